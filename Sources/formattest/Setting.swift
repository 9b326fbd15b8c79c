//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import ArgumentParser

/// Settings read from environment variables, checked as strictly as the flags they stand for:
/// a value that is set but not valid stops the command (exit 2) rather than falling back to a
/// default (`FORMATTEST_PORT=18086x` listening on 8080, `FORMATTEST_ENVIRONMENT=Production`
/// meaning `any`).
enum Setting {
    /// The variable's text, `nil` when unset; set but empty, or with control characters: an error.
    static func text(_ variables: [String: String], _ name: String) throws -> String? {
        guard let value = variables[name] else { return nil }
        try Self.checkText(value, name)
        return value
    }

    /// A port: ASCII digits only, 1-65535.
    static func port(_ variables: [String: String], _ name: String) throws -> Int? {
        guard let text = try Self.text(variables, name) else { return nil }
        guard text.utf8.count <= 5, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
            let port = Int(text), (1...65535).contains(port)
        else { throw ValidationError("\(name) must be a port number 1-65535, not \(text.debugDescription).") }
        return port
    }

    /// One of a fixed set of values, spelled exactly.
    static func choice<Choice: RawRepresentable & CaseIterable>(_ variables: [String: String], _ name: String, _: Choice.Type) throws -> Choice?
    where Choice.RawValue == String {
        guard let text = try Self.text(variables, name) else { return nil }
        guard let choice = Choice(rawValue: text) else {
            let values = Choice.allCases.map(\.rawValue).joined(separator: ", ")
            throw ValidationError("\(name) must be one of \(values), not \(text.debugDescription).")
        }
        return choice
    }

    /// A switch: exactly `true` or `false`.
    static func boolean(_ variables: [String: String], _ name: String) throws -> Bool? {
        guard let text = try Self.text(variables, name) else { return nil }
        switch text {
        case "true": return true
        case "false": return false
        default: throw ValidationError("\(name) must be true or false, not \(text.debugDescription).")
        }
    }

    /// Text that is not empty and holds no control characters.
    static func checkText(_ value: String, _ name: String) throws {
        guard !value.isEmpty, !value.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }) else {
            throw ValidationError("\(name) must be non-empty text without control characters.")
        }
    }

    /// A duration in seconds: finite and within `range` (NaN and infinities are refused).
    static func checkSeconds(_ value: Double, _ name: String, _ range: ClosedRange<Double>) throws {
        guard value.isFinite, range.contains(value) else {
            throw ValidationError("\(name) must be a number of seconds from \(Self.plain(range.lowerBound)) to \(Self.plain(range.upperBound)).")
        }
    }

    private static func plain(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(value)
    }
}
