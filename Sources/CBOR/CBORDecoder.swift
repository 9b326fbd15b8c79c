//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// A strict RFC 8949 decoder for untrusted input.
///
/// It accepts well-formed items in preferred serialization only and rejects, with a specific
/// ``CBORError/Code/malformed`` reason, everything else:
/// - truncated input, and trailing bytes after the top-level item (``decode(_:limits:)``);
/// - reserved additional-information values (28–30) and stray `break` bytes;
/// - indefinite-length strings, arrays and maps (App Attest never uses them, and they make sizes
///   unknowable before reading);
/// - length arguments that are not in their shortest form, and two-byte simple values below 32;
/// - duplicate map keys (compared by their encoded bytes, exact because encodings are minimal);
/// - text strings that are not valid UTF-8;
/// - more nesting than ``Limits/maximumDepth`` or more items than ``Limits/maximumItemCount``.
///
/// Every length is checked against the bytes that remain before anything is allocated, so a
/// small input can never ask for a large allocation.
public struct CBORDecoder: Sendable {
    /// Bounds that keep decoding cheap on hostile input.
    public struct Limits: Sendable, Hashable {
        /// Maximum nesting of arrays, maps and tags; the top-level item is depth 1. App Attest
        /// objects nest 3 deep; 16 matches the WebAuthn reference decoders and caps recursion.
        public var maximumDepth: Int
        /// Maximum number of items (every key, value and element counts), to bound work and memory.
        public var maximumItemCount: Int

        public init(maximumDepth: Int = 16, maximumItemCount: Int = 4096) {
            self.maximumDepth = maximumDepth
            self.maximumItemCount = maximumItemCount
        }

        /// The defaults: depth 16, 4096 items.
        public static let `default` = Limits()
    }

    /// Decodes exactly one item spanning all of `bytes`.
    ///
    /// - Throws: ``CBORError`` with code ``CBORError/Code/malformed``.
    public static func decode(_ bytes: some Collection<UInt8>, limits: Limits = .default) throws(CBORError) -> CBORItem {
        let input = Array(bytes)
        var state = State(input: input, limits: limits)
        let item = try state.readItem(depth: 1)
        guard state.position == input.count else {
            throw CBORError.malformed(
                "\(input.count - state.position) trailing byte(s) after the item at offset \(state.position)"
            )
        }
        return item
    }

    /// Decodes one item from the start of `bytes` and reports how many bytes it used.
    ///
    /// Ranges in the returned item are offsets from the start of `bytes`. Used where a CBOR item is
    /// embedded in a binary structure (the COSE key and extension map inside authenticator data).
    public static func decodePrefix(
        _ bytes: some Collection<UInt8>,
        limits: Limits = .default
    ) throws(CBORError) -> (item: CBORItem, consumed: Int) {
        var state = State(input: Array(bytes), limits: limits)
        let item = try state.readItem(depth: 1)
        return (item, state.position)
    }

    private struct State {
        let input: [UInt8]
        let limits: Limits
        var position = 0
        var itemCount = 0

        init(input: [UInt8], limits: Limits) {
            self.input = input
            self.limits = limits
        }

        var remaining: Int { self.input.count - self.position }

        mutating func readByte() throws(CBORError) -> UInt8 {
            guard self.position < self.input.count else {
                throw CBORError.malformed("input ends at offset \(self.position) inside an item")
            }
            defer { self.position += 1 }
            return self.input[self.position]
        }

        mutating func readBytes(_ count: Int) throws(CBORError) -> [UInt8] {
            guard count <= self.remaining else {
                throw CBORError.malformed(
                    "input ends at offset \(self.input.count): \(count) byte(s) needed from offset \(self.position)"
                )
            }
            defer { self.position += count }
            return Array(self.input[self.position..<(self.position + count)])
        }

        /// Reads the argument that follows an initial byte, enforcing the shortest form.
        mutating func readArgument(_ additionalInformation: UInt8, majorType: UInt8) throws(CBORError) -> UInt64 {
            switch additionalInformation {
            case 0...23:
                return UInt64(additionalInformation)
            case 24, 25, 26, 27:
                let width = 1 << Int(additionalInformation - 24)
                let bytes = try self.readBytes(width)
                let value = bytes.reduce(UInt64(0)) { ($0 << 8) | UInt64($1) }
                // Floats (major 7, widths 2/4/8) carry bits, not a length: no minimality rule.
                if majorType != 7 {
                    let minimum: UInt64 = width == 1 ? 24 : (1 << (4 * UInt64(width)))
                    guard value >= minimum else {
                        throw CBORError.malformed(
                            "argument \(value) at offset \(self.position - width - 1) is not in its shortest form"
                        )
                    }
                }
                return value
            case 31:
                throw CBORError.malformed(
                    "indefinite length (major type \(majorType)) at offset \(self.position - 1) is not accepted"
                )
            default:
                throw CBORError.malformed(
                    "reserved additional information \(additionalInformation) at offset \(self.position - 1)"
                )
            }
        }

        /// Converts a length argument to `Int` and checks that the input can hold it.
        func checkedLength(_ argument: UInt64, minimumBytesPerElement: Int, at offset: Int) throws(CBORError) -> Int {
            guard let length = Int(exactly: argument),
                length <= self.remaining / max(minimumBytesPerElement, 1)
            else {
                throw CBORError.malformed(
                    "length \(argument) at offset \(offset) exceeds the \(self.remaining) byte(s) that remain"
                )
            }
            return length
        }

        mutating func readItem(depth: Int) throws(CBORError) -> CBORItem {
            guard depth <= self.limits.maximumDepth else {
                throw CBORError.malformed(
                    "nesting deeper than \(self.limits.maximumDepth) at offset \(self.position)"
                )
            }
            self.itemCount += 1
            guard self.itemCount <= self.limits.maximumItemCount else {
                throw CBORError.malformed("more than \(self.limits.maximumItemCount) items")
            }

            let start = self.position
            let initial = try self.readByte()
            let majorType = initial >> 5
            let additionalInformation = initial & 0x1f
            if majorType == 7 && additionalInformation == 31 {
                throw CBORError.malformed("unexpected break byte at offset \(start)")
            }
            let argument = try self.readArgument(additionalInformation, majorType: majorType)
            let headerLength = self.position - start

            let value: CBORItem.Value
            switch majorType {
            case 0:
                value = .unsigned(argument)
            case 1:
                value = .negative(argument)
            case 2:
                let length = try self.checkedLength(argument, minimumBytesPerElement: 1, at: start)
                value = .byteString(try self.readBytes(length))
            case 3:
                let length = try self.checkedLength(argument, minimumBytesPerElement: 1, at: start)
                let bytes = try self.readBytes(length)
                guard let text = String(validating: bytes, as: UTF8.self) else {
                    throw CBORError.malformed("text string at offset \(start) is not valid UTF-8")
                }
                value = .textString(text)
            case 4:
                let count = try self.checkedLength(argument, minimumBytesPerElement: 1, at: start)
                var elements: [CBORItem] = []
                elements.reserveCapacity(count)
                for _ in 0..<count {
                    elements.append(try self.readItem(depth: depth + 1))
                }
                value = .array(elements)
            case 5:
                let count = try self.checkedLength(argument, minimumBytesPerElement: 2, at: start)
                var entries: [CBORMapEntry] = []
                entries.reserveCapacity(count)
                var seenKeys = Set<ArraySlice<UInt8>>()
                for _ in 0..<count {
                    let key = try self.readItem(depth: depth + 1)
                    guard seenKeys.insert(self.input[key.range]).inserted else {
                        throw CBORError.malformed("duplicate map key at offset \(key.range.lowerBound)")
                    }
                    let entryValue = try self.readItem(depth: depth + 1)
                    entries.append(CBORMapEntry(key: key, value: entryValue))
                }
                value = .map(entries)
            case 6:
                value = .tagged(tag: argument, item: try self.readItem(depth: depth + 1))
            default:
                value = try Self.simpleOrFloat(additionalInformation, argument: argument, at: start)
            }
            return CBORItem(value: value, range: start..<self.position, headerLength: headerLength)
        }

        static func simpleOrFloat(_ additionalInformation: UInt8, argument: UInt64, at offset: Int) throws(CBORError)
            -> CBORItem.Value
        {
            switch additionalInformation {
            case 20: return .boolean(false)
            case 21: return .boolean(true)
            case 22: return .null
            case 23: return .undefined
            case 0...19: return .simple(additionalInformation)
            case 24:
                // RFC 8949 §3.3: two-byte simple values below 32 are not well-formed.
                guard argument >= 32, let simple = UInt8(exactly: argument) else {
                    throw CBORError.malformed("simple value \(argument) at offset \(offset) is not well-formed")
                }
                return .simple(simple)
            case 25:
                guard let bits = UInt16(exactly: argument) else {
                    throw CBORError.malformed("half-precision float at offset \(offset)")
                }
                return .float(Double(Float16Bits(bits).value))
            case 26:
                guard let bits = UInt32(exactly: argument) else {
                    throw CBORError.malformed("single-precision float at offset \(offset)")
                }
                return .float(Double(Float(bitPattern: bits)))
            default:
                return .float(Double(bitPattern: argument))
            }
        }
    }
}

/// IEEE 754 half precision, decoded by hand (`Float16` is unavailable on some x86 platforms).
private struct Float16Bits {
    let value: Float

    init(_ bits: UInt16) {
        let sign: Float = (bits & 0x8000) == 0 ? 1 : -1
        let exponent = Int((bits >> 10) & 0x1f)
        let fraction = Float(bits & 0x3ff)
        switch exponent {
        case 0: self.value = sign * fraction * Float(sign: .plus, exponent: -24, significand: 1)
        case 31: self.value = fraction == 0 ? sign * .infinity : .nan
        default: self.value = sign * (1 + fraction / 1024) * Float(sign: .plus, exponent: exponent - 15, significand: 1)
        }
    }
}
