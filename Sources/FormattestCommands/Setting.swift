//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import ArgumentParser

/// Checks shared by the commands' options and `serve`'s settings (ServeSettings): a value that is
/// not valid stops the command (exit 2) rather than falling back to a default.
enum Setting {
    /// A setting's flag: `--` and its key. The option groups `serve` shares with other commands
    /// name their checks' subjects so (their flags are the settings' keys); `serve` adds the
    /// value's source (``ServeSettings/Resolved/name(_:)``).
    static func flag(_ key: String) -> String { "--" + key }

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

    /// A number as a person writes it: `300`, not `300.0`.
    static func plain(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(value)
    }
}
