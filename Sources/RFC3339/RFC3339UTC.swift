//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Foundation

/// RFC 3339 timestamps in UTC: the one reader for every untrusted time in FormAttest (forms, the
/// CLI's `--at` and batch lines, receipts), and the one writer.
///
/// The grammar is the strict subset `YYYY-MM-DDTHH:MM:SS[.F]Z`: ASCII digits only, `T` and `Z`
/// upper case, one to nine fraction digits, no offsets, no whitespace. Every field is range
/// checked (the day against its month, leap years included; no leap second, which `Date` cannot
/// represent). Written by hand over bytes: Foundation's date formatters are not made for hostile
/// input (one divided by zero on a 35-digit fraction) and accept far more than this grammar.
public enum RFC3339UTC {
    /// The longest text the grammar admits: `YYYY-MM-DDTHH:MM:SS.fffffffffZ`.
    public static let maximumLength = 30

    /// Parses `YYYY-MM-DDTHH:MM:SS[.F]Z` (F: 1 to 9 digits); `nil` for anything else.
    public static func parse(_ text: some StringProtocol) -> Date? {
        // Bounded before any copy: a hostile string of any length costs nothing.
        guard text.utf8.count <= Self.maximumLength else { return nil }
        return Self.parse(bytes: Array(text.utf8))
    }

    /// ``parse(_:)`` over UTF-8 bytes.
    public static func parse(bytes: some Collection<UInt8>) -> Date? {
        guard bytes.count >= 20, bytes.count <= Self.maximumLength else { return nil }
        let b = Array(bytes)
        guard b[4] == UInt8(ascii: "-"), b[7] == UInt8(ascii: "-"), b[10] == UInt8(ascii: "T"),
            b[13] == UInt8(ascii: ":"), b[16] == UInt8(ascii: ":"), b[b.count - 1] == UInt8(ascii: "Z")
        else { return nil }
        guard let year = Self.number(b, 0..<4), let month = Self.number(b, 5..<7), let day = Self.number(b, 8..<10),
            let hour = Self.number(b, 11..<13), let minute = Self.number(b, 14..<16), let second = Self.number(b, 17..<19),
            (1...12).contains(month), (1...Self.daysIn(month: month, year: year)).contains(day),
            hour < 24, minute < 60, second < 60
        else { return nil }
        var nanoseconds = 0
        if b.count > 20 {
            // ".F" then "Z": 1 to 9 digits (nanoseconds at most; the value cannot overflow).
            let digitCount = b.count - 21
            guard b[19] == UInt8(ascii: "."), (1...9).contains(digitCount), let digits = Self.number(b, 20..<(b.count - 1)) else {
                return nil
            }
            nanoseconds = digits
            for _ in digitCount..<9 { nanoseconds *= 10 }
        }
        let days = Self.daysFromCivil(year: year, month: month, day: day)
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second
        return Date(timeIntervalSince1970: Double(seconds) + Double(nanoseconds) / 1e9)
    }

    /// `date` at the precision ``format(_:fractionDigits:)`` keeps (the millisecond): the instant
    /// that reads back from its own text, so that a time judged and a time recorded are one.
    public static func millisecondPrecision(_ date: Date) -> Date {
        Self.parse(Self.format(date)) ?? date
    }

    /// Formats as `YYYY-MM-DDTHH:MM:SS.mmmZ` (rounded to the millisecond, which absorbs a
    /// double's representation error), or, with `fractionDigits` 0, that instant's whole second
    /// (the fraction dropped, never rounded up into the next second). Years outside 0000–9999
    /// are clamped to that range's ends.
    public static func format(_ date: Date, fractionDigits: Int = 3) -> String {
        var units = (date.timeIntervalSince1970 * 1000).rounded()
        if units.isNaN { units = 0 }
        // 0000-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z.
        units = min(max(units, -62_167_219_200_000), 253_402_300_799_999)
        let total = Int64(units)
        var seconds = total / 1000
        var fraction = total % 1000
        if fraction < 0 {
            fraction += 1000
            seconds -= 1
        }
        var days = seconds / 86_400
        var secondOfDay = seconds % 86_400
        if secondOfDay < 0 {
            secondOfDay += 86_400
            days -= 1
        }
        let (year, month, day) = Self.civilFromDays(Int(days))
        var out = [UInt8]()
        out.reserveCapacity(24)
        func append(_ value: Int, width: Int) {
            var digits = [UInt8](repeating: UInt8(ascii: "0"), count: width)
            var rest = value
            for index in stride(from: width - 1, through: 0, by: -1) {
                digits[index] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
            }
            out += digits
        }
        append(year, width: 4)
        out.append(UInt8(ascii: "-"))
        append(month, width: 2)
        out.append(UInt8(ascii: "-"))
        append(day, width: 2)
        out.append(UInt8(ascii: "T"))
        append(Int(secondOfDay / 3600), width: 2)
        out.append(UInt8(ascii: ":"))
        append(Int(secondOfDay / 60 % 60), width: 2)
        out.append(UInt8(ascii: ":"))
        append(Int(secondOfDay % 60), width: 2)
        if fractionDigits != 0 {
            out.append(UInt8(ascii: "."))
            append(Int(fraction), width: 3)
        }
        out.append(UInt8(ascii: "Z"))
        return String(decoding: out, as: UTF8.self)
    }

    // MARK: - Calendar arithmetic (proleptic Gregorian; H. Hinnant's days_from_civil)

    private static func number(_ bytes: [UInt8], _ range: Range<Int>) -> Int? {
        var value = 0
        for byte in bytes[range] {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return value
    }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    static func civilFromDays(_ days: Int) -> (year: Int, month: Int, day: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
