//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// Standard base64 with padding (RFC 4648 §4), strictly: one spelling per byte string (no
/// missing padding, no whitespace, no set bits past the end), as checkpoints and signed notes
/// require. Their readers compare text byte for byte, so a lenient reader would be a second
/// spelling of one checkpoint.
public enum StrictBase64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    public static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index < bytes.count {
            let b0 = UInt32(bytes[index])
            let b1 = index + 1 < bytes.count ? UInt32(bytes[index + 1]) : 0
            let b2 = index + 2 < bytes.count ? UInt32(bytes[index + 2]) : 0
            let group = b0 << 16 | b1 << 8 | b2
            out.append(Self.alphabet[Int(group >> 18 & 63)])
            out.append(Self.alphabet[Int(group >> 12 & 63)])
            out.append(index + 1 < bytes.count ? Self.alphabet[Int(group >> 6 & 63)] : UInt8(ascii: "="))
            out.append(index + 2 < bytes.count ? Self.alphabet[Int(group & 63)] : UInt8(ascii: "="))
            index += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    public static func decode(_ text: some Collection<UInt8>) -> [UInt8]? {
        let chars = Array(text)
        guard !chars.isEmpty, chars.count % 4 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(chars.count / 4 * 3)
        var start = 0
        while start < chars.count {
            let isLast = start + 4 == chars.count
            var values: [UInt32] = []
            var padding = 0
            for offset in 0..<4 {
                let char = chars[start + offset]
                if char == UInt8(ascii: "=") {
                    guard isLast, offset >= 2 else { return nil }
                    padding += 1
                    continue
                }
                guard padding == 0, let value = Self.value(of: char) else { return nil }
                values.append(value)
            }
            while values.count < 4 { values.append(0) }
            let group = values[0] << 18 | values[1] << 12 | values[2] << 6 | values[3]
            switch padding {
            case 0: out += [UInt8(group >> 16 & 0xFF), UInt8(group >> 8 & 0xFF), UInt8(group & 0xFF)]
            case 1:
                guard group & 0xFF == 0 else { return nil }
                out += [UInt8(group >> 16 & 0xFF), UInt8(group >> 8 & 0xFF)]
            default:
                guard group & 0xFFFF == 0 else { return nil }
                out.append(UInt8(group >> 16 & 0xFF))
            }
            start += 4
        }
        return out
    }

    private static func value(of char: UInt8) -> UInt32? {
        switch char {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): UInt32(char - UInt8(ascii: "A"))
        case UInt8(ascii: "a")...UInt8(ascii: "z"): UInt32(char - UInt8(ascii: "a")) + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(char - UInt8(ascii: "0")) + 52
        case UInt8(ascii: "+"): 62
        case UInt8(ascii: "/"): 63
        default: nil
        }
    }
}
