//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import ArgumentParser

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Checks shared by the commands' options and `serve`'s settings (ServeSettings): a value that is
/// not valid stops the command (exit 2) rather than falling back to a default.
enum Setting {
    /// A setting's flag: `--` and its key. The option groups `serve` shares with other commands
    /// name their checks' subjects so (their flags are the settings' keys); `serve` adds the
    /// value's source (``ServeSettings/Resolved/name(_:)``).
    static func flag(_ key: String) -> String { "--" + key }

    /// Text that is not empty and holds no control characters, nor what cannot be seen: U+FFFD
    /// (what invalid UTF-8 in an argument or a variable becomes), format characters (zero-width
    /// spaces and joiners, bidirectional overrides, the byte-order mark: general category Cf),
    /// the other default-ignorable code points (the Hangul fillers, variation selectors), spaces
    /// other than U+0020 (the no-break space), the line and paragraph separators, private-use and
    /// unassigned code points; and no space at either end. A value that looks like another is
    /// refused rather than used (red team r13, r14 F6: `'https://idp.example '`).
    static func checkText(_ value: String, _ name: String) throws {
        guard !value.isEmpty, !value.unicodeScalars.contains(where: Self.isHidden), value.first != " ", value.last != " " else {
            throw ValidationError("\(name) \(Self.textRule).")
        }
    }

    /// What ``checkText(_:_:)`` asks of a value, as its refusal says it.
    static let textRule = "must be non-empty text without control or invisible characters, or a space at either end"

    private static func isHidden(_ scalar: Unicode.Scalar) -> Bool {
        if scalar == "\u{FFFD}" || scalar.properties.isDefaultIgnorableCodePoint { return true }
        switch scalar.properties.generalCategory {
        case .control, .format, .lineSeparator, .paragraphSeparator, .privateUse, .surrogate, .unassigned: return true
        case .spaceSeparator: return scalar != " "
        default: return false
        }
    }

    /// A duration in seconds: finite and within `range` (NaN and infinities are refused).
    static func checkSeconds(_ value: Double, _ name: String, _ range: ClosedRange<Double>) throws {
        guard value.isFinite, range.contains(value) else {
            throw ValidationError("\(name) must be a number of seconds from \(Self.plain(range.lowerBound)) to \(Self.plain(range.upperBound)).")
        }
    }

    /// A number as a person writes it: `300`, not `300.0`.
    static func plain(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(value)
    }

    /// Why `text` cannot be an address to listen on, or nil: an IPv4 address in dotted decimal or
    /// an IPv6 address (as `inet_pton` reads them; IPv6 with an interface zone, `fe80::1%eth0`),
    /// or a DNS name (labels of letters, digits and hyphens, 1-63 bytes, neither starting nor
    /// ending with a hyphen, 253 bytes at most, a final dot allowed). Checked at start, so that a
    /// mistyped host stops `serve` with the setting's name rather than failing at bind time; and a
    /// name the system's resolver reads as an IPv4 number in another spelling (`0x0`, `127.1`,
    /// `0177.0.0.1`, `0xdead`) is refused, since it names an address the text does not show
    /// (red team r14 F2: `0x0` passed as a name and listened on every interface).
    static func hostProblem(_ text: String) -> String? {
        let problem = "must be an IPv4 address in dotted decimal, an IPv6 address or a host name"
        var buffer = [UInt8](repeating: 0, count: 16)
        if inet_pton(AF_INET, text, &buffer) == 1 || inet_pton(AF_INET6, text, &buffer) == 1 { return nil }
        if let percent = text.firstIndex(of: "%") {
            let zone = text[text.index(after: percent)...].utf8
            let isZone =
                (1...15).contains(zone.count)
                && zone.allSatisfy { byte in
                    (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte | 0x20) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                        || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ".")
                }
            return isZone && inet_pton(AF_INET6, String(text[..<percent]), &buffer) == 1 ? nil : problem
        }
        var number = in_addr()
        if inet_aton(text, &number) != 0 { return problem }
        let bytes = Array(text.utf8.last == UInt8(ascii: ".") ? text.utf8.dropLast() : text.utf8[...])
        let labels = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        let isName =
            bytes.count <= 253
            && labels.allSatisfy { label in
                (1...63).contains(label.count) && label.first != UInt8(ascii: "-") && label.last != UInt8(ascii: "-")
                    && label.allSatisfy { byte in
                        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte | 0x20) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                            || byte == UInt8(ascii: "-")
                    }
            }
            // Digits and dots alone are an IPv4 address inet_pton refused (256.1.1.1), not a name.
            && !bytes.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || $0 == UInt8(ascii: ".") }
        return isName ? nil : problem
    }
}
