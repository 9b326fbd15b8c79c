//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
public import Foundation

/// What a server requires of a signed form before it looks at the signature's freshness state:
/// a timestamp inside a window around its clock, and fields bound to the session.
public struct FormPolicy: Sendable, Hashable {
    /// How far in the past a timestamp may be. Default 300 s.
    public var maximumAge: TimeInterval
    /// How far in the future a timestamp may be (clock skew). Default 30 s.
    public var maximumFutureSkew: TimeInterval
    /// Fields that must be present besides `timestamp` (for example `username`, `nonce`).
    public var requiredFields: Set<String>

    public init(maximumAge: TimeInterval = 300, maximumFutureSkew: TimeInterval = 30, requiredFields: Set<String> = []) {
        self.maximumAge = maximumAge
        self.maximumFutureSkew = maximumFutureSkew
        self.requiredFields = requiredFields
    }

    /// Checks the timestamp window, the required fields and the username binding.
    ///
    /// - Parameters:
    ///   - form: the parsed form.
    ///   - now: the server's time.
    ///   - username: the request's (session's) user; when given, the form's `username` must be
    ///     present and equal to it, code unit for code unit.
    ///   - session: the caller's session id (an identity token's `sid`); when given, the form's
    ///     `session` must be present and equal to it, so that a form signed in one login cannot
    ///     be submitted in another.
    /// - Throws: ``FormError`` with `timestamp_outside_window`, `form_missing_field`,
    ///   `binding_mismatch` or `session_mismatch`.
    public func validate(_ form: SignedForm, now: Date, username: String? = nil, session: String? = nil) throws(FormError) {
        let age = now.timeIntervalSince(form.timestamp)
        guard age <= self.maximumAge else {
            throw FormError(
                code: .timestampOutsideWindow,
                reason: "the form is \(Self.seconds(age)) s old; at most \(Self.seconds(self.maximumAge)) s are accepted"
            )
        }
        guard -age <= self.maximumFutureSkew else {
            throw FormError(
                code: .timestampOutsideWindow,
                reason: "the form is \(Self.seconds(-age)) s in the future; at most \(Self.seconds(self.maximumFutureSkew)) s are accepted"
            )
        }
        for field in self.requiredFields.sorted() where form.value[field] == nil {
            throw FormError(code: .missingField, reason: "the form has no \(field)")
        }
        if let username {
            guard let bound = form.username else {
                throw FormError(code: .missingField, reason: "the form has no username to bind to the session")
            }
            guard Array(bound.utf8) == Array(username.utf8) else {
                throw FormError(code: .bindingMismatch, reason: "the form's username is not the session's")
            }
        }
        if let session {
            guard let signed = form.value[SignedForm.Field.session]?.stringValue, Array(signed.utf8) == Array(session.utf8) else {
                throw FormError(code: .sessionMismatch, reason: "the form's session is not the caller's (the token's sid)")
            }
        }
    }

    /// Whole seconds for a message; any other double (NaN, infinities, beyond Int) as it is,
    /// never a trapping conversion.
    static func seconds(_ value: Double) -> String {
        if let whole = Int(exactly: value.rounded(.towardZero)) { return String(whole) }
        return String(value)
    }
}
