//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Hummingbird

/// A request's query string, decoded as strictly as a body: only visible ASCII as sent, every
/// `%` followed by two hex digits, every decoded name and value is valid UTF-8, and no name appears twice. Anything else
/// is 400 `invalid_query`: never a U+FFFD replacement (which would make different raw names one
/// user), never the raw text kept as it is, never one of two values picked.
///
/// Hummingbird's own `queryParameters` is lenient on all three; the service reads its query
/// strings only through this type.
struct QueryParameters {
    private let values: [String: String]

    init(_ request: Request) throws(APIError) {
        try self.init(query: request.uri.query)
    }

    init(query: String?) throws(APIError) {
        var values: [String: String] = [:]
        guard let query, !query.isEmpty else {
            self.values = values
            return
        }
        for pair in query.utf8.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let name: String
            let value: String
            if let equals = pair.firstIndex(of: UInt8(ascii: "=")) {
                name = try Self.decode(pair[pair.startIndex..<equals], part: "a parameter's name")
                value = try Self.decode(pair[pair.index(after: equals)...], part: "the value of a parameter")
            } else {
                name = try Self.decode(pair, part: "a parameter's name")
                value = ""
            }
            guard values.updateValue(value, forKey: name) == nil else {
                throw APIError.invalidQuery("the query string names \(name.debugDescription) more than once")
            }
        }
        self.values = values
    }

    /// The value of `name`, or nil when the query string does not name it.
    func get(_ name: String) -> String? { self.values[name] }

    /// Percent-decodes `bytes` strictly: `%` and two hex digits, and valid UTF-8 after decoding.
    static func decode(_ bytes: some Collection<UInt8>, part: String) throws(APIError) -> String {
        var decoded: [UInt8] = []
        decoded.reserveCapacity(bytes.count)
        var iterator = bytes.makeIterator()
        while let byte = iterator.next() {
            // RFC 3986 §3.4: anything but visible ASCII must arrive percent-encoded (raw bytes of
            // invalid UTF-8 reach here already replaced by U+FFFD, so they are refused too).
            guard (0x21...0x7E).contains(byte) else {
                throw APIError.invalidQuery("\(part) holds a byte that must be percent-encoded")
            }
            guard byte == UInt8(ascii: "%") else {
                decoded.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(Self.hexValue), let low = iterator.next().flatMap(Self.hexValue) else {
                throw APIError.invalidQuery("\(part) has a % that is not followed by two hex digits")
            }
            decoded.append(high << 4 | low)
        }
        guard let text = String(validating: decoded, as: UTF8.self) else {
            throw APIError.invalidQuery("\(part) is not valid UTF-8 once percent-decoded")
        }
        return text
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
