//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Foundation

extension JSONEncoder.DateEncodingStrategy {
    /// Dates as ``RFC3339UTC`` writes them (instead of `.iso8601`, Foundation's formatter).
    public static func rfc3339UTC(fractionDigits: Int = 3) -> Self {
        .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(RFC3339UTC.format(date, fractionDigits: fractionDigits))
        }
    }
}

extension JSONDecoder.DateDecodingStrategy {
    /// Dates read by ``RFC3339UTC``'s strict reader (instead of `.iso8601`: Foundation's formatter
    /// is not made for hostile text, and files another process wrote may be anything).
    public static var rfc3339UTC: Self {
        .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = RFC3339UTC.parse(text) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "not an RFC 3339 UTC time")
            }
            return date
        }
    }
}
