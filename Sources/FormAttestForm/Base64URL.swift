//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation

/// base64url without padding (RFC 4648 §5).
public enum Base64URL {
    /// The alphabet of RFC 4648 §5.
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// Encodes in one pass over the bytes (Foundation's base64 followed by three string
    /// replacements cost most of an evidence record's signing time).
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        let input = Array(bytes)
        // Taken once: a static's accessor inside the loop costs a call per character.
        let alphabet = Self.alphabet
        var output: [UInt8] = []
        output.reserveCapacity((input.count * 4 + 2) / 3)
        var index = 0
        while index + 3 <= input.count {
            let value = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
            output.append(alphabet[Int(value >> 18 & 63)])
            output.append(alphabet[Int(value >> 12 & 63)])
            output.append(alphabet[Int(value >> 6 & 63)])
            output.append(alphabet[Int(value & 63)])
            index += 3
        }
        switch input.count - index {
        case 1:
            let value = UInt32(input[index]) << 16
            output.append(alphabet[Int(value >> 18 & 63)])
            output.append(alphabet[Int(value >> 12 & 63)])
        case 2:
            let value = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8
            output.append(alphabet[Int(value >> 18 & 63)])
            output.append(alphabet[Int(value >> 12 & 63)])
            output.append(alphabet[Int(value >> 6 & 63)])
        default:
            break
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Decodes base64url or standard base64, padded or not; `nil` when it is neither.
    ///
    /// One pass over the UTF-8 bytes (a profile of the service under load found Foundation's string
    /// replacements and `Data(base64Encoded:)` here costing more CPU than the assertion's signature
    /// check). Strict: only the two alphabets, `=` only at the end and only as much as the length
    /// needs, and the unused bits of the last character zero, so every byte string has exactly
    /// one spelling per alphabet and padding choice.
    public static func decode(_ text: String) -> [UInt8]? {
        Self.decode(utf8: Array(text.utf8))
    }

    /// ``decode(_:)`` over text given as its UTF-8 bytes (a JSON string's), without a `String` in
    /// between: the same bytes are accepted and refused.
    public static func decode(utf8 text: [UInt8]) -> [UInt8]? {
        var utf8 = text[...]
        var padding = 0
        while utf8.last == UInt8(ascii: "=") {
            utf8.removeLast()
            padding += 1
        }
        let count = utf8.count
        let remainder = count % 4
        guard remainder != 1 else { return nil }
        // Padding, when present, completes the last group exactly.
        guard padding == 0 || (remainder != 0 && padding == 4 - remainder) else { return nil }
        // Taken once: a static's accessor inside the loop costs a call per character.
        let values = Self.values
        var output: [UInt8] = []
        output.reserveCapacity(count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for byte in utf8 {
            let value = values[Int(byte)]
            guard value != 0xFF else { return nil }
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
                accumulator &= (1 << UInt32(bits)) - 1
            }
        }
        // What is left over are the last character's unused bits: zero in a canonical encoding.
        guard accumulator == 0 else { return nil }
        return output
    }

    /// Each byte's 6-bit value in either alphabet (`-` and `+` are 62, `_` and `/` 63), 0xFF for others.
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, character) in Self.alphabet.enumerated() {
            table[Int(character)] = UInt8(index)
        }
        table[Int(UInt8(ascii: "+"))] = 62
        table[Int(UInt8(ascii: "/"))] = 63
        return table
    }()
}
