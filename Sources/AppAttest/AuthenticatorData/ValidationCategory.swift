//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// How the running app was signed and delivered, as iOS 27 reports it in
/// `apple_validation_category_01` (or `validationCategory`): a `UInt32` written as four
/// little-endian bytes (Apple's 2026 sample carries `h'01000000'`).
///
/// The values are those implementers publish (WWDC26 session 201 and Apple's 2026 sample; Apple's
/// reference does not list them): 0 invalid, 1 OS executable, 2 TestFlight, 3 development-signed,
/// 4 App Store, 5 enterprise or ad hoc, 6 Developer ID, 10 other. A value outside that list is kept
/// as its number (``name`` is `nil`), never rejected: Apple may add categories.
public struct ValidationCategory: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The number on the wire.
    public let rawValue: UInt32

    /// A category by number.
    public init(rawValue: UInt32) {
        self.rawValue = rawValue
    }

    /// Reads the wire form: exactly four bytes, little-endian; any other length is `nil`.
    public init?(littleEndianBytes bytes: some Collection<UInt8>) {
        guard bytes.count == 4, let value = UInt32(littleEndianBytes: bytes) else { return nil }
        self.rawValue = value
    }

    /// Parses a command-line or configuration spelling: a name of ``named`` (`app-store`) or a
    /// decimal number (`4`, any `UInt32`).
    public init?(argument: String) {
        if let known = Self.named.first(where: { $0.name == argument }) {
            self = known.category
            return
        }
        guard !argument.isEmpty, argument.utf8.count <= 10,
            argument.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
            let value = UInt32(argument)
        else { return nil }
        self.rawValue = value
    }

    /// The four wire bytes, little-endian.
    public var littleEndianBytes: [UInt8] {
        [0, 8, 16, 24].map { UInt8(truncatingIfNeeded: self.rawValue >> $0) }
    }

    /// The published name, such as `app-store`; `nil` for a value outside the published list.
    public var name: String? {
        Self.named.first { $0.category == self }?.name
    }

    /// `4 (app-store)`, or the bare number when it has no published name.
    public var description: String {
        self.name.map { "\(self.rawValue) (\($0))" } ?? "\(self.rawValue)"
    }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    /// 0: no valid category could be established.
    public static let invalid = Self(rawValue: 0)
    /// 1: an executable of the operating system.
    public static let osExecutable = Self(rawValue: 1)
    /// 2: TestFlight.
    public static let testFlight = Self(rawValue: 2)
    /// 3: development-signed.
    public static let development = Self(rawValue: 3)
    /// 4: the App Store.
    public static let appStore = Self(rawValue: 4)
    /// 5: enterprise or ad hoc distribution.
    public static let enterprise = Self(rawValue: 5)
    /// 6: Developer ID.
    public static let developerID = Self(rawValue: 6)
    /// 10: another category.
    public static let other = Self(rawValue: 10)

    /// Every published category with its name, in number order.
    public static let named: [(category: ValidationCategory, name: String)] = [
        (.invalid, "invalid"), (.osExecutable, "os-executable"), (.testFlight, "testflight"),
        (.development, "development"), (.appStore, "app-store"), (.enterprise, "enterprise"),
        (.developerID, "developer-id"), (.other, "other"),
    ]
}
