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
        var symbols = Array(text.utf8)
        var padding = 0
        while symbols.last == UInt8(ascii: "=") {
            symbols.removeLast()
            padding += 1
        }
        let remainder = symbols.count % 4
        // A remainder of 1 cannot encode whole bytes; padding, when present, must complete the quantum.
        guard remainder != 1, padding == 0 || (remainder != 0 && padding == 4 - remainder) else { return nil }
        var urlAlphabet = false
        var standardAlphabet = false
        var values: [UInt8] = []
        values.reserveCapacity(symbols.count)
        for symbol in symbols {
            switch symbol {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): values.append(symbol - UInt8(ascii: "A"))
            case UInt8(ascii: "a")...UInt8(ascii: "z"): values.append(symbol - UInt8(ascii: "a") + 26)
            case UInt8(ascii: "0")...UInt8(ascii: "9"): values.append(symbol - UInt8(ascii: "0") + 52)
            case UInt8(ascii: "-"), UInt8(ascii: "_"):
                urlAlphabet = true
                values.append(symbol == UInt8(ascii: "-") ? 62 : 63)
            case UInt8(ascii: "+"), UInt8(ascii: "/"):
                standardAlphabet = true
                values.append(symbol == UInt8(ascii: "+") ? 62 : 63)
            default: return nil
            }
        }
        guard !(urlAlphabet && standardAlphabet) else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(values.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for value in values {
            // Invariant: bits < 8 before the shift, so the accumulator keeps at most 14 bits.
            accumulator = (accumulator << 6) | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                bytes.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
                accumulator &= (1 << UInt32(bits)) - 1
            }
        }
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
