//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// A dot-separated numeric version such as `CFBundleVersion` (`1`, `2.10`, `2026.4.21`), compared
/// numerically component by component, a missing component counting as 0: `1.10 > 1.9`,
/// `2 == 2.0`. This is how a minimum version forces an upgrade.
///
/// Only ASCII digits and single dots are accepted (at most 16 components of at most 18 digits
/// each, so every component fits a `UInt64`). A bundle version of another shape (`1.0b3`) is kept
/// as text by ``AuthenticatorExtensions``; a policy that must compare it refuses it (fail closed).
public struct BundleVersion: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The components, as written (trailing zeros included).
    public let components: [UInt64]
    /// The text this version was parsed from.
    public let text: String

    /// Parses `text`; `nil` unless it is dot-separated decimal digits.
    public init?(_ text: String) {
        let parts = text.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard (1...16).contains(parts.count) else { return nil }
        var components: [UInt64] = []
        for part in parts {
            guard (1...18).contains(part.count),
                part.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
            else { return nil }
            // Invariant: at most 18 decimal digits, below UInt64.max.
            components.append(part.reduce(UInt64(0)) { $0 * 10 + UInt64($1 - UInt8(ascii: "0")) })
        }
        self.components = components
        self.text = text
    }

    /// The components without trailing zeros: what equality and hashing use.
    private var significant: ArraySlice<UInt64> {
        var end = self.components.endIndex
        while end > self.components.startIndex, self.components[end - 1] == 0 { end -= 1 }
        return self.components[..<end]
    }

    public var description: String { self.text }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.significant == rhs.significant }

    public func hash(into hasher: inout Hasher) {
        for component in self.significant { hasher.combine(component) }
    }

    public static func < (lhs: Self, rhs: Self) -> Bool {
        let count = max(lhs.components.count, rhs.components.count)
        for index in 0..<count {
            let left = index < lhs.components.count ? lhs.components[index] : 0
            let right = index < rhs.components.count ? rhs.components[index] : 0
            if left != right { return left < right }
        }
        return false
    }
}
