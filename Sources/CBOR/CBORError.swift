//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// The one error type of the `CBOR` module.
///
/// A ``Code`` (stable, machine readable) and a human-readable ``reason``. Two errors compare equal
/// when their codes are equal, so tests can check the code alone. Callers that parse a larger
/// structure (the verifier's attestation objects and assertions) wrap it in their own error.
///
/// ``Code`` is a struct over a private enum so that adding a code is not a breaking change.
public struct CBORError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What failed. Compare with the static members, for example ``Code/malformed``.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Backing: String, Hashable, Sendable, CaseIterable {
            case malformed = "malformed_cbor"
            case duplicateMapKey = "duplicate_map_key"
        }

        fileprivate let backing: Backing

        fileprivate init(_ backing: Backing) {
            self.backing = backing
        }

        /// Every code of the module.
        public static var allCases: [Code] { Backing.allCases.map(Code.init) }

        /// The stable `snake_case` identifier, such as `malformed_cbor`.
        public var identifier: String { self.backing.rawValue }

        public var description: String { self.backing.rawValue }

        /// The input is not well-formed CBOR in preferred serialization, or breaks a limit of the
        /// strict decoder (``CBORDecoder/Limits``).
        public static let malformed = Code(.malformed)
        /// The serializer was asked to write a map with two equal keys.
        public static let duplicateMapKey = Code(.duplicateMapKey)
    }

    /// What failed.
    public let code: Code
    /// Why, in words meant for a log or an operator (with the byte offset where it applies).
    public let reason: String

    /// Creates an error. Prefer the static factories.
    public init(code: Code, reason: String) {
        self.code = code
        self.reason = reason
    }

    public var description: String { "\(self.code.identifier): \(self.reason)" }

    public static func == (lhs: CBORError, rhs: CBORError) -> Bool { lhs.code == rhs.code }

    public func hash(into hasher: inout Hasher) { hasher.combine(self.code) }

    /// A ``Code/malformed`` error.
    public static func malformed(_ reason: String) -> Self { Self(code: .malformed, reason: reason) }
}
