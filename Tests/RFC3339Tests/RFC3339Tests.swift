//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation
import RFC3339
import Testing

struct RFC3339Tests {
    @Test(
        "the grammar's own spellings parse to the exact instant",
        arguments: [
            ("1970-01-01T00:00:00Z", 0.0),
            ("2026-11-22T10:00:00Z", 1_795_341_600.0),
            ("2026-11-22T10:00:00.5Z", 1_795_341_600.5),
            ("2026-11-22T10:00:00.123Z", 1_795_341_600.123),
            ("2026-11-22T10:00:00.123456789Z", 1_795_341_600.123456789),
            ("2000-02-29T23:59:59Z", 951_868_799.0),  // a leap year's 29 February
            ("1969-12-31T23:59:59Z", -1.0),
            ("0000-01-01T00:00:00Z", -62_167_219_200.0),
            ("9999-12-31T23:59:59Z", 253_402_300_799.0),
        ])
    func parses(text: String, seconds: Double) throws {
        let date = try #require(RFC3339UTC.parse(text))
        #expect(abs(date.timeIntervalSince1970 - seconds) < 1e-6, "\(date.timeIntervalSince1970)")
    }

    @Test(
        "anything else is refused, never trapped on",
        arguments: [
            "2026-01-01T00:00:00.0000000000000000000000000000000000000001Z",  // 40 fraction digits (Foundation divided by zero)
            "2026-01-01T00:00:00." + String(repeating: "9", count: 60) + "Z",
            "2026-01-01T00:00:00.1234567890Z",  // ten digits
            "2026-01-01T00:00:00.Z", "2026-01-01T00:00:00Z ", " 2026-01-01T00:00:00Z", "2026-01-01T00:00:00",
            "2026-01-01T17:51:13+01:00Z", "2026-01-01T17:51:13+01:00", "2026-01-01T17:51:13-00:00",
            "2026-01-01t00:00:00Z", "2026-01-01T00:00:00z", "2026-01-01 00:00:00Z",
            "\u{FF12}\u{FF10}\u{FF12}\u{FF16}-01-01T00:00:00Z",  // fullwidth digits
            "\u{0662}\u{0660}\u{0662}\u{0666}-01-01T00:00:00Z",  // Arabic-Indic digits
            "12026-01-01T00:00:00Z", "226-01-01T00:00:00Z", "+2026-01-01T00:00:00Z", "-2026-01-01T00:00:00Z",
            "2026-13-01T00:00:00Z", "2026-00-01T00:00:00Z", "2026-01-00T00:00:00Z", "2026-01-32T00:00:00Z",
            "2026-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2026-02-30T00:00:00Z", "2026-04-31T00:00:00Z",
            "2026-01-01T24:00:00Z", "2026-01-01T00:60:00Z", "2026-01-01T00:00:60Z", "2026-01-01T00:00:61Z",
            "20260101T000000Z", "2026-1-01T00:00:00Z", "", "Z", String(repeating: "2", count: 10_000),
            "2026-01-01T00:00:0\u{0}Z", "2026-01-01T00:00:00\u{0}Z",
        ])
    func refuses(text: String) {
        #expect(RFC3339UTC.parse(text) == nil, "\(text.prefix(80).debugDescription)")
    }

    @Test("format writes milliseconds (rounded) or whole seconds, and reads back")
    func format() throws {
        #expect(RFC3339UTC.format(Date(timeIntervalSince1970: 1_795_341_600.123)) == "2026-11-22T10:00:00.123Z")
        #expect(RFC3339UTC.format(Date(timeIntervalSince1970: 1_795_341_600.9996)) == "2026-11-22T10:00:01.000Z")
        #expect(RFC3339UTC.format(Date(timeIntervalSince1970: 1_795_341_600.4), fractionDigits: 0) == "2026-11-22T10:00:00Z")
        // Whole seconds drop the fraction, never round up into the next second.
        #expect(RFC3339UTC.format(Date(timeIntervalSince1970: 1_605_996_782.796), fractionDigits: 0) == "2020-11-21T22:13:02Z")
        #expect(RFC3339UTC.format(Date(timeIntervalSince1970: -0.5), fractionDigits: 0) == "1969-12-31T23:59:59Z")
        #expect(RFC3339UTC.format(Date(timeIntervalSince1970: -0.5)) == "1969-12-31T23:59:59.500Z")
        #expect(RFC3339UTC.format(Date(timeIntervalSince1970: 951_868_799)) == "2000-02-29T23:59:59.000Z")
        #expect(RFC3339UTC.format(Date(timeIntervalSince1970: .nan), fractionDigits: 0) == "1970-01-01T00:00:00Z")
        #expect(RFC3339UTC.format(.distantFuture, fractionDigits: 0) == "4001-01-01T00:00:00Z")
        #expect(RFC3339UTC.format(Date(timeIntervalSince1970: 1e15), fractionDigits: 0) == "9999-12-31T23:59:59Z")
        // Every millisecond instant over four centuries, sampled, round-trips.
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<5_000 {
            let milliseconds = Int64.random(in: -2_208_988_800_000...32_503_680_000_000, using: &generator)
            let date = Date(timeIntervalSince1970: Double(milliseconds) / 1000)
            let text = RFC3339UTC.format(date)
            let back = try #require(RFC3339UTC.parse(text), "\(text)")
            #expect(abs(back.timeIntervalSince(date)) < 0.0005, "\(text)")
        }
    }

    @Test("the calendar agrees with Foundation's Gregorian calendar on every day from 1800 to 2300")
    func calendar() throws {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        var components = DateComponents(year: 1800, month: 1, day: 1)
        var date = try #require(calendar.date(from: components))
        let end = try #require(calendar.date(from: DateComponents(year: 2300, month: 12, day: 31)))
        while date <= end {
            components = calendar.dateComponents([.year, .month, .day], from: date)
            let text = String(format: "%04d-%02d-%02dT12:34:56Z", components.year!, components.month!, components.day!)
            #expect(RFC3339UTC.parse(text) == date.addingTimeInterval(12 * 3600 + 34 * 60 + 56), "\(text)")
            date = date.addingTimeInterval(86_400)
        }
    }
}
