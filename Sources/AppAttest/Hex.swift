//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// Lowercase hex, for error messages, reports and identities (`wrap --batch` hexes each line's
/// SHA-256). Two digits a byte, computed: a table of `Character`s made per byte showed in a profile
/// of `wrap --batch` (docs/performance.md, "Figures formerly in source comments").
package func hex(_ bytes: some Sequence<UInt8>) -> String {
    var digits: [UInt8] = []
    digits.reserveCapacity(bytes.underestimatedCount * 2)
    for byte in bytes {
        digits.append(hexDigit(byte >> 4))
        digits.append(hexDigit(byte & 0x0F))
    }
    return String(decoding: digits, as: UTF8.self)
}

/// 16 bytes (an AAGUID) in the UUID spelling, `61707061-7474-6573-7400-000000000000`; any other
/// length as plain hex.
package func uuidString(_ bytes: [UInt8]) -> String {
    let digits = Array(hex(bytes).utf8)
    guard bytes.count == 16 else { return String(decoding: digits, as: UTF8.self) }
    let groups = [digits[0..<8], digits[8..<12], digits[12..<16], digits[16..<20], digits[20..<32]]
    return groups.map { String(decoding: $0, as: UTF8.self) }.joined(separator: "-")
}

/// The lowercase ASCII digit of a value 0-15.
private func hexDigit(_ value: UInt8) -> UInt8 {
    value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "a") + value - 10
}

/// Decodes hex (either case); `nil` for an odd length or another character. For configured values
/// (CDHashes, client data hashes on the command line), never for wire data.
package func bytes(hex text: String) -> [UInt8]? {
    func value(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return digit - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
    var digits = text.utf8[...]
    guard digits.count % 2 == 0 else { return nil }
    var result: [UInt8] = []
    result.reserveCapacity(digits.count / 2)
    while let first = digits.popFirst(), let second = digits.popFirst() {
        guard let high = value(first), let low = value(second) else { return nil }
        result.append(high << 4 | low)
    }
    return result
}
