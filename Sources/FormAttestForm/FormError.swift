//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import CanonicalJSON

/// Why a form cannot be signed or accepted. One type for the form rules, with a stable code.
public struct FormError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Backing: String, Hashable, Sendable, CaseIterable {
            case invalidJSON = "invalid_form_json"
            case inexactNumber = "form_inexact_number"
            case notAnObject = "form_not_object"
            case missingField = "form_missing_field"
            case invalidField = "form_invalid_field"
            case timestampOutsideWindow = "timestamp_outside_window"
            case bindingMismatch = "binding_mismatch"
            case sessionMismatch = "session_mismatch"
        }

        fileprivate let backing: Backing
        fileprivate init(_ backing: Backing) { self.backing = backing }

        /// Every code of the form rules (the error table in docs/errors.md is generated from them).
        public static var allCases: [Code] { Backing.allCases.map(Code.init) }

        public var identifier: String { self.backing.rawValue }
        /// What the code means, in a line (docs/errors.md is generated from it).
        public var summary: String {
            switch self.backing {
            case .invalidJSON: "the form is not canonicalizable JSON (duplicate names, lone surrogates, bad UTF-8, ...)"
            case .inexactNumber: "a number in the form does not survive RFC 8785 exactly: send amounts as strings"
            case .notAnObject: "the form is JSON but not an object"
            case .missingField: "a required field of the form is absent"
            case .invalidField: "a field has the wrong type or format (such as a timestamp that is not RFC 3339 UTC)"
            case .timestampOutsideWindow: "the form's timestamp is too old or too far in the future"
            case .bindingMismatch: "the form is not bound to this key, user or purpose"
            case .sessionMismatch: "the form's session is not the caller token's sid"
            }
        }

        public var description: String { self.backing.rawValue }

        /// The form is not canonicalizable JSON (duplicates, lone surrogates, bad UTF-8, ...).
        public static let invalidJSON = Code(.invalidJSON)
        /// A number in the form does not survive RFC 8785 exactly (more precision than a double,
        /// or beyond ±2^53): send such values (amounts) as strings.
        public static let inexactNumber = Code(.inexactNumber)
        /// The form is JSON but not an object.
        public static let notAnObject = Code(.notAnObject)
        /// A required field is absent.
        public static let missingField = Code(.missingField)
        /// A field has the wrong type or format (such as a timestamp that is not RFC 3339 UTC).
        public static let invalidField = Code(.invalidField)
        /// The timestamp is too old or too far in the future.
        public static let timestampOutsideWindow = Code(.timestampOutsideWindow)
        /// A bound field (the username) differs from the session's.
        public static let bindingMismatch = Code(.bindingMismatch)
        /// The form's `session` is not the caller's session (the identity token's `sid`).
        public static let sessionMismatch = Code(.sessionMismatch)
    }

    public let code: Code
    public let reason: String
    /// The underlying JSON error, for ``Code/invalidJSON``.
    public let jsonError: CanonicalJSONError?

    public init(code: Code, reason: String, jsonError: CanonicalJSONError? = nil) {
        self.code = code
        self.reason = reason
        self.jsonError = jsonError
    }

    public var description: String { "\(self.code.identifier): \(self.reason)" }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(self.code) }
}
