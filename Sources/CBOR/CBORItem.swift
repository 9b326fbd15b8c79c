//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// One decoded CBOR data item (RFC 8949) together with where it stood in the input.
///
/// The byte range lets the inspector show every item's raw bytes, and lets verifiers hash the exact
/// bytes an item was decoded from.
public struct CBORItem: Sendable, Hashable {
    /// The decoded value.
    public indirect enum Value: Sendable, Hashable {
        /// Major type 0.
        case unsigned(UInt64)
        /// Major type 1: the value is `-1 - n`, kept as `n` so that the full range fits.
        case negative(UInt64)
        /// Major type 2.
        case byteString([UInt8])
        /// Major type 3 (validated UTF-8).
        case textString(String)
        /// Major type 4.
        case array([CBORItem])
        /// Major type 5, entries in input order; keys are unique.
        case map([CBORMapEntry])
        /// Major type 6.
        case tagged(tag: UInt64, item: CBORItem)
        /// Major type 7: `false` / `true`.
        case boolean(Bool)
        /// Major type 7: `null`.
        case null
        /// Major type 7: `undefined`.
        case undefined
        /// Major type 7: another simple value.
        case simple(UInt8)
        /// Major type 7: a half, single or double precision float.
        case float(Double)
    }

    /// The decoded value.
    public let value: Value
    /// The item's bytes in the decoded input, from its initial byte to its last content byte.
    public let range: Range<Int>
    /// How many bytes of ``range`` are the header (initial byte and length argument).
    public let headerLength: Int

    package init(value: Value, range: Range<Int>, headerLength: Int) {
        self.value = value
        self.range = range
        self.headerLength = headerLength
    }
}

/// One key/value pair of a CBOR map.
public struct CBORMapEntry: Sendable, Hashable {
    public let key: CBORItem
    public let value: CBORItem
}

extension CBORItem {
    /// The bytes of a byte string, or `nil` for any other item.
    public var byteString: [UInt8]? {
        if case .byteString(let bytes) = self.value { return bytes }
        return nil
    }

    /// The string of a text string, or `nil` for any other item.
    public var textString: String? {
        if case .textString(let text) = self.value { return text }
        return nil
    }

    /// The entries of a map, or `nil` for any other item.
    public var mapEntries: [CBORMapEntry]? {
        if case .map(let entries) = self.value { return entries }
        return nil
    }

    /// The elements of an array, or `nil` for any other item.
    public var arrayElements: [CBORItem]? {
        if case .array(let items) = self.value { return items }
        return nil
    }

    /// The value of an integer item that fits `Int64`, or `nil`.
    public var integer: Int64? {
        switch self.value {
        case .unsigned(let n): return Int64(exactly: n)
        case .negative(let n):
            guard let magnitude = Int64(exactly: n) else { return nil }
            return -1 - magnitude
        default: return nil
        }
    }

    /// The value stored under the text key `name` in a map item, or `nil`.
    public subscript(textKey name: String) -> CBORItem? {
        self.mapEntries?.first(where: { $0.key.textString == name })?.value
    }

    /// The value stored under the integer key `key` in a map item, or `nil`.
    public subscript(integerKey key: Int64) -> CBORItem? {
        self.mapEntries?.first(where: { $0.key.integer == key })?.value
    }
}
