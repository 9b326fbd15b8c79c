//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// The binary fields of a WebAuthn response: base64url without padding as the spec writes them,
/// and, because real clients send both, standard base64 and padding as well.
///
/// Decoding is strict otherwise: one alphabet per value (`-`/`_` and `+`/`/` never mixed), padding
/// only at the end and only as much as the length needs, no whitespace, and no value whose unused
/// trailing bits are not zero (so that each byte string has exactly one accepted spelling per
/// alphabet).
public enum WebAuthnBase64 {
    /// Decodes base64url or base64, padded or not; `nil` for anything else.
    public static func decode(_ text: String) -> [UInt8]? {
        self.decode(utf8: text.utf8)
    }

    /// Decodes base64url or base64 text given as its UTF-8 bytes, padded or not; `nil` for
    /// anything else.
    ///
    /// One pass straight into the output: the padding is counted from the end, the length checked,
    /// then each symbol is read once and its six bits go into the result; the one allocation is the
    /// result's.
    public static func decode(utf8 text: some BidirectionalCollection<UInt8>) -> [UInt8]? {
        // Padding ('=') only at the end.
        var end = text.endIndex
        var padding = 0
        while end != text.startIndex {
            let before = text.index(before: end)
            guard text[before] == UInt8(ascii: "=") else { break }
            end = before
            padding += 1
        }
        let count = text.distance(from: text.startIndex, to: end)
        let remainder = count % 4
        // A remainder of 1 cannot encode whole bytes; padding, when present, must complete the quantum.
        guard remainder != 1, padding == 0 || (remainder != 0 && padding == 4 - remainder) else { return nil }
        var bytes: [UInt8] = []
        // Exactly the decoded length: 3 bytes a quantum, 1 or 2 for a final 2 or 3 symbols.
        bytes.reserveCapacity(count / 4 * 3 + (remainder == 0 ? 0 : remainder - 1))
        // Bit 0: a symbol only base64url has ('-', '_'); bit 1: one only base64 has ('+', '/').
        var alphabets: UInt8 = 0
        var accumulator: UInt32 = 0
        var bits = 0
        var index = text.startIndex
        while index != end {
            let symbol = text[index]
            let value: UInt8
            switch symbol {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): value = symbol &- UInt8(ascii: "A")
            case UInt8(ascii: "a")...UInt8(ascii: "z"): value = symbol &- UInt8(ascii: "a") &+ 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = symbol &- UInt8(ascii: "0") &+ 52
            case UInt8(ascii: "-"):
                value = 62
                alphabets |= 1
            case UInt8(ascii: "_"):
                value = 63
                alphabets |= 1
            case UInt8(ascii: "+"):
                value = 62
                alphabets |= 2
            case UInt8(ascii: "/"):
                value = 63
                alphabets |= 2
            default: return nil
            }
            // Invariant: bits < 8 before the shift, so the accumulator keeps at most 14 bits (and
            // the wrapping arithmetic above stays within 0...63).
            accumulator = (accumulator << 6) | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                bytes.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
                accumulator &= (1 << UInt32(bits)) - 1
            }
            index = text.index(after: index)
        }
        // One alphabet per value.
        guard alphabets != 3 else { return nil }
        // Unused trailing bits must be zero (a canonical encoding).
        guard accumulator == 0 else { return nil }
        return bytes
    }

    /// Encodes as base64url without padding (what every output of the project uses).
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        var output: [UInt8] = []
        output.reserveCapacity((bytes.count * 4 + 2) / 3)
        var accumulator: UInt32 = 0
        var bits = 0
        for byte in bytes {
            accumulator = (accumulator << 8) | UInt32(byte)
            bits += 8
            while bits >= 6 {
                bits -= 6
                output.append(alphabet[Int((accumulator >> UInt32(bits)) & 0x3F)])
            }
            accumulator &= (1 << UInt32(bits)) - 1
        }
        if bits > 0 {
            output.append(alphabet[Int((accumulator << UInt32(6 - bits)) & 0x3F)])
        }
        return String(decoding: output, as: UTF8.self)
    }
}
