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
        var output: [UInt8] = []
        output.reserveCapacity((input.count * 4 + 2) / 3)
        var index = 0
        while index + 3 <= input.count {
            let value = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
            output.append(Self.alphabet[Int(value >> 18 & 63)])
            output.append(Self.alphabet[Int(value >> 12 & 63)])
            output.append(Self.alphabet[Int(value >> 6 & 63)])
            output.append(Self.alphabet[Int(value & 63)])
            index += 3
        }
        switch input.count - index {
        case 1:
            let value = UInt32(input[index]) << 16
            output.append(Self.alphabet[Int(value >> 18 & 63)])
            output.append(Self.alphabet[Int(value >> 12 & 63)])
        case 2:
            let value = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8
            output.append(Self.alphabet[Int(value >> 18 & 63)])
            output.append(Self.alphabet[Int(value >> 12 & 63)])
            output.append(Self.alphabet[Int(value >> 6 & 63)])
        default:
            break
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Decodes base64url or standard base64, padded or not; `nil` when it is neither.
    public static func decode(_ text: String) -> [UInt8]? {
        var normalized = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        if normalized.count % 4 != 0 {
            normalized += String(repeating: "=", count: 4 - normalized.count % 4)
        }
        return Data(base64Encoded: normalized).map(Array.init)
    }
}
