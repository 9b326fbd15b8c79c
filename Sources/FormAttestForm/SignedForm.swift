//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import CanonicalJSON
import Crypto
public import Foundation
import RFC3339

/// A form as signed: a JSON object, its RFC 8785 bytes and clientDataHash = SHA-256 of them.
///
/// The app and the server compute the same hash from the same form, whatever whitespace, member
/// order or number spelling each JSON library produced.
public struct SignedForm: Sendable, Hashable {
    /// Field names with a meaning in FormAttest's flows.
    public enum Field {
        /// Required: RFC 3339 in UTC (`Z`), such as `2026-11-22T10:15:00.123Z`.
        public static let timestamp = "timestamp"
        /// Optional: a random value that makes two otherwise equal forms different.
        public static let nonce = "nonce"
        /// Optional: a server-issued challenge (base64url) that the form answers.
        public static let challenge = "challenge"
        /// Optional: the user the form is for; servers bind it to the session.
        public static let username = "username"
        /// Optional: the login session the form was signed in (the identity token's `sid`);
        /// servers that bind sessions require it.
        public static let session = "session"
    }

    /// Limits for a form: 64 KiB, nesting 16, numbers exact. A transfer form is a few hundred
    /// bytes. A number the canonical form would change is refused rather than signed in a value
    /// its sender did not write (amounts belong in strings).
    public static let limits = CanonicalJSON.Limits(maximumSize: 64 * 1024, maximumDepth: 16, exactNumbers: true)

    /// The parsed form.
    public let value: JSONValue
    /// The canonical bytes (RFC 8785).
    public let canonicalBytes: [UInt8]
    /// SHA-256 of ``canonicalBytes``: exactly 32 bytes, what the app passes to App Attest.
    public let clientDataHash: [UInt8]
    /// The `timestamp` field.
    public let timestamp: Date
    /// The `nonce` field, when present.
    public let nonce: String?
    /// The `challenge` field, when present.
    public let challenge: String?
    /// The `username` field, when present.
    public let username: String?

    /// Parses and canonicalizes a form.
    ///
    /// - Throws: ``FormError``: `invalid_form_json`, `form_inexact_number`, `form_not_object`, `form_missing_field`
    ///   (no timestamp) or `form_invalid_field` (a known field of the wrong type or format).
    public init(jsonBytes: some Collection<UInt8>) throws(FormError) {
        let value: JSONValue
        do {
            value = try CanonicalJSON.parse(jsonBytes, limits: Self.limits)
        } catch {
            throw FormError(code: error.code == .inexactNumber ? .inexactNumber : .invalidJSON, reason: error.description, jsonError: error)
        }
        try self.init(value: value)
    }

    /// Wraps an already parsed value.
    public init(value: JSONValue) throws(FormError) {
        guard case .object = value else {
            throw FormError(code: .notAnObject, reason: "a form is a JSON object")
        }
        guard let timestampValue = value[Field.timestamp] else {
            throw FormError(code: .missingField, reason: "the form has no timestamp")
        }
        guard let timestampText = timestampValue.stringValue, let timestamp = RFC3339UTC.parse(timestampText) else {
            throw FormError(code: .invalidField, reason: "timestamp must be an RFC 3339 UTC string ending in Z")
        }
        self.value = value
        self.canonicalBytes = value.canonicalBytes
        self.clientDataHash = Array(SHA256.hash(data: self.canonicalBytes))
        self.timestamp = timestamp
        self.nonce = try Self.optionalString(value, Field.nonce)
        self.challenge = try Self.optionalString(value, Field.challenge)
        self.username = try Self.optionalString(value, Field.username)
    }

    private static func optionalString(_ value: JSONValue, _ name: String) throws(FormError) -> String? {
        guard let field = value[name] else { return nil }
        guard let string = field.stringValue else {
            throw FormError(code: .invalidField, reason: "\(name) must be a string")
        }
        return string
    }

    /// Builds a form with a fresh timestamp and a random nonce, ready to sign.
    ///
    /// - Parameters:
    ///   - fields: the form's own fields (amount, payee, ...). They must not use the reserved names.
    ///   - username: the signed-in user, bound by the server to the session.
    ///   - challenge: a server challenge to answer, if the flow uses one.
    ///   - now: the time to stamp (injected for tests).
    ///   - generator: the source of the 16-byte nonce.
    public static func make(
        fields: [String: JSONValue],
        username: String? = nil,
        challenge: String? = nil,
        now: Date = Date(),
        using generator: inout some RandomNumberGenerator
    ) throws(FormError) -> SignedForm {
        let reserved = [Field.timestamp, Field.nonce, Field.challenge, Field.username]
        if let clash = fields.keys.first(where: reserved.contains) {
            throw FormError(code: .invalidField, reason: "\(clash) is set by the builder")
        }
        let nonceBytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
        var members = fields.map { (name: $0.key, value: $0.value) }
        members.append((Field.timestamp, .string(JSONString(RFC3339UTC.format(now)))))
        members.append((Field.nonce, .string(JSONString(Base64URL.encode(nonceBytes)))))
        if let username { members.append((Field.username, .string(JSONString(username)))) }
        if let challenge { members.append((Field.challenge, .string(JSONString(challenge)))) }
        let object: JSONObject
        do {
            object = try JSONObject(members)
        } catch {
            // Swift dictionary keys are unique, and the reserved names were checked above.
            throw FormError(code: .invalidField, reason: "duplicate field name")
        }
        return try SignedForm(value: .object(object))
    }

    /// ``make(fields:username:challenge:now:using:)`` with the system's random number generator.
    public static func make(
        fields: [String: JSONValue],
        username: String? = nil,
        challenge: String? = nil,
        now: Date = Date()
    ) throws(FormError) -> SignedForm {
        var generator = SystemRandomNumberGenerator()
        return try self.make(fields: fields, username: username, challenge: challenge, now: now, using: &generator)
    }
}
