//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// An append-only CBOR writer that produces deterministic encoding (RFC 8949 §4.2.1).
///
/// Arguments are always in their shortest form, lengths are definite, and map entries are sorted
/// by the bytewise order of their encoded keys, with duplicate keys refused. It writes only what
/// FormAttest emits (COSE keys, simulated attestations and assertions, wrapper tokens), so it has
/// no floating-point support.
public struct CBORSerializer: Sendable {
    /// The bytes written so far.
    public private(set) var bytes: [UInt8]

    public init(reservingCapacity capacity: Int = 64) {
        self.bytes = []
        self.bytes.reserveCapacity(capacity)
    }

    /// Serializes one item built by `body` and returns its bytes.
    public static func serialize(_ body: (inout CBORSerializer) throws -> Void) rethrows -> [UInt8] {
        var serializer = CBORSerializer()
        try body(&serializer)
        return serializer.bytes
    }

    private mutating func appendHeader(majorType: UInt8, argument: UInt64) {
        let major = majorType << 5
        switch argument {
        case 0...23:
            self.bytes.append(major | UInt8(truncatingIfNeeded: argument))
        case 24...0xff:
            self.bytes.append(major | 24)
            self.bytes.append(UInt8(truncatingIfNeeded: argument))
        case 0x100...0xffff:
            self.bytes.append(major | 25)
            self.appendBigEndian(argument, width: 2)
        case 0x1_0000...0xffff_ffff:
            self.bytes.append(major | 26)
            self.appendBigEndian(argument, width: 4)
        default:
            self.bytes.append(major | 27)
            self.appendBigEndian(argument, width: 8)
        }
    }

    private mutating func appendBigEndian(_ value: UInt64, width: Int) {
        for shift in stride(from: (width - 1) * 8, through: 0, by: -8) {
            self.bytes.append(UInt8(truncatingIfNeeded: value >> UInt64(shift)))
        }
    }

    /// Appends an integer (major type 0 or 1).
    public mutating func appendInteger(_ value: Int64) {
        if value >= 0 {
            self.appendHeader(majorType: 0, argument: UInt64(value))
        } else {
            // -1 - value is non-negative for every negative Int64, including .min.
            self.appendHeader(majorType: 1, argument: UInt64(-1 - value))
        }
    }

    /// Appends a byte string.
    public mutating func appendByteString(_ value: some Collection<UInt8>) {
        self.appendHeader(majorType: 2, argument: UInt64(value.count))
        self.bytes.append(contentsOf: value)
    }

    /// Appends a text string.
    public mutating func appendTextString(_ value: String) {
        let utf8 = Array(value.utf8)
        self.appendHeader(majorType: 3, argument: UInt64(utf8.count))
        self.bytes.append(contentsOf: utf8)
    }

    /// Appends a boolean.
    public mutating func appendBoolean(_ value: Bool) {
        self.bytes.append(value ? 0xf5 : 0xf4)
    }

    /// Appends the header of an array of `count` elements; append the elements next.
    public mutating func appendArrayHeader(count: Int) {
        self.appendHeader(majorType: 4, argument: UInt64(count))
    }

    /// A map key: App Attest, COSE and FormAttest's own documents use integer and text keys only.
    public enum MapKey: Sendable, Hashable {
        case integer(Int64)
        case text(String)
    }

    /// Appends a map in deterministic order.
    ///
    /// - Parameter entries: each entry's key and a closure that writes its value.
    /// - Throws: ``CBORError/Code/duplicateMapKey`` when two keys are equal, or what a value closure throws.
    public mutating func appendMap(
        _ entries: [(key: MapKey, value: (inout CBORSerializer) throws -> Void)]
    ) throws {
        var encoded: [(key: [UInt8], value: [UInt8])] = []
        encoded.reserveCapacity(entries.count)
        for entry in entries {
            let key = CBORSerializer.serialize { serializer in
                switch entry.key {
                case .integer(let value): serializer.appendInteger(value)
                case .text(let value): serializer.appendTextString(value)
                }
            }
            encoded.append((key, try CBORSerializer.serialize(entry.value)))
        }
        // RFC 8949 §4.2.1: sort by the bytewise lexicographic order of the encoded keys.
        encoded.sort { $0.key.lexicographicallyPrecedes($1.key) }
        for (previous, next) in zip(encoded, encoded.dropFirst()) where previous.key == next.key {
            throw CBORError(code: .duplicateMapKey, reason: "duplicate map key in serialized map")
        }
        self.appendHeader(majorType: 5, argument: UInt64(encoded.count))
        for entry in encoded {
            self.bytes.append(contentsOf: entry.key)
            self.bytes.append(contentsOf: entry.value)
        }
    }

    /// Appends bytes that are already one encoded CBOR item.
    public mutating func appendEncodedItem(_ item: some Collection<UInt8>) {
        self.bytes.append(contentsOf: item)
    }
}
