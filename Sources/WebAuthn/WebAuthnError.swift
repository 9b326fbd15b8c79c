//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// The one error type of the `WebAuthn` module.
///
/// Every rejection carries a ``Code`` that names the failed step of W3C WebAuthn Level 3 §7.1
/// (registration) or §7.2 (authentication), stable and machine readable (the `snake_case`
/// identifier is what the command line prints), and a human-readable ``reason``. Two errors compare
/// equal when their codes are equal, so tests check the code, not the wording.
///
/// Every identifier starts with `passkey_`, so that none collides with a code of the App Attest
/// verifier (`malformed_attestation`, `signature_invalid`, ...) where both reach one client.
/// ``Code`` is a struct over a private enum so that adding a code is not a breaking change.
public struct WebAuthnError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What failed. Compare with the static members, for example ``Code/challengeMismatch``.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Backing: String, Hashable, Sendable, CaseIterable {
            case responseTooLarge = "passkey_response_too_large"
            case malformedResponse = "passkey_malformed_response"
            case malformedClientData = "passkey_malformed_client_data"
            case typeMismatch = "passkey_type_mismatch"
            case challengeMismatch = "passkey_challenge_mismatch"
            case originNotAllowed = "passkey_origin_not_allowed"
            case crossOriginNotAllowed = "passkey_cross_origin_not_allowed"
            case topOriginNotAllowed = "passkey_top_origin_not_allowed"
            case malformedAttestation = "passkey_malformed_attestation"
            case malformedAuthenticatorData = "passkey_malformed_authenticator_data"
            case rpIDMismatch = "passkey_rp_id_mismatch"
            case userNotPresent = "passkey_user_not_present"
            case userNotVerified = "passkey_user_not_verified"
            case backupStateInvalid = "passkey_backup_state_invalid"
            case attestedCredentialMissing = "passkey_attested_credential_missing"
            case credentialIDTooLong = "passkey_credential_id_too_long"
            case credentialIDMismatch = "passkey_credential_id_mismatch"
            case invalidPublicKey = "passkey_invalid_public_key"
            case algorithmNotAllowed = "passkey_algorithm_not_allowed"
            case unsupportedFormat = "passkey_unsupported_format"
            case attestationSignatureInvalid = "passkey_attestation_signature_invalid"
            case attestationCertificateInvalid = "passkey_attestation_certificate_invalid"
            case aaguidMismatch = "passkey_aaguid_mismatch"
            case nonceMismatch = "passkey_nonce_mismatch"
            case publicKeyMismatch = "passkey_public_key_mismatch"
            case malformedCertificate = "passkey_malformed_certificate"
            case certificateExpired = "passkey_certificate_expired"
            case certificateNotYetValid = "passkey_certificate_not_yet_valid"
            case certificateChainInvalid = "passkey_certificate_chain_invalid"
            case signatureInvalid = "passkey_signature_invalid"
            case signCountNotIncreasing = "passkey_sign_count_not_increasing"
            case userHandleMismatch = "passkey_user_handle_mismatch"
            case invalidPolicy = "passkey_invalid_policy"
        }

        fileprivate let backing: Backing

        fileprivate init(_ backing: Backing) {
            self.backing = backing
        }

        /// Every code of the passkey verifier (docs/errors.md lists them from here).
        public static var allCases: [Code] { Backing.allCases.map(Code.init) }

        /// The stable `snake_case` identifier, such as `passkey_challenge_mismatch`.
        public var identifier: String { self.backing.rawValue }

        public var description: String { self.backing.rawValue }

        /// One sentence on what failed, for generated tables (docs/errors.md) and messages.
        public var summary: String {
            switch self.backing {
            case .responseTooLarge: "the response, or one of its binary members, is over its size limit"
            case .malformedResponse: "the response is not the PublicKeyCredential.toJSON() shape (type, id = rawId, response, base64url members)"
            case .malformedClientData: "clientDataJSON is not strict UTF-8 JSON with string type, challenge and origin"
            case .typeMismatch: "clientDataJSON's type is not webauthn.create (registration) or webauthn.get (assertion)"
            case .challengeMismatch: "clientDataJSON's challenge is not the expected one (for a form: SHA-256 of its RFC 8785 bytes)"
            case .originNotAllowed: "clientDataJSON's origin is not an allowed origin"
            case .crossOriginNotAllowed: "clientDataJSON says crossOrigin: true and the policy refuses cross-origin ceremonies"
            case .topOriginNotAllowed: "clientDataJSON's topOrigin is not an allowed top origin"
            case .malformedAttestation: "the attestation object or its statement does not have the format's syntax"
            case .malformedAuthenticatorData: "the authenticator data is truncated, has trailing bytes or a malformed part"
            case .rpIDMismatch: "rpIdHash is not SHA-256 of the relying party id"
            case .userNotPresent: "the UP (user present) flag is not set"
            case .userNotVerified: "user verification is required and the UV flag is not set"
            case .backupStateInvalid: "the BS (backed up) flag is set without BE (backup eligible)"
            case .attestedCredentialMissing: "the registration carries no attested credential data (AT flag)"
            case .credentialIDTooLong: "the credential id is longer than 1023 bytes"
            case .credentialIDMismatch: "rawId is not the credential id of the authenticator data or of the expected credential"
            case .invalidPublicKey: "the credential public key is not a supported COSE key (ES256, EdDSA, RS256, PS256, PS384)"
            case .algorithmNotAllowed: "the credential's (or the statement's) algorithm is not one the policy accepts"
            case .unsupportedFormat: "the attestation format is not one the verifier implements (none, packed, fido-u2f, apple, tpm, android-key)"
            case .attestationSignatureInvalid: "the attestation statement's signature does not verify"
            case .attestationCertificateInvalid: "the attestation certificate does not meet its format's requirements"
            case .aaguidMismatch: "the attestation certificate's AAGUID extension differs from the authenticator data's"
            case .nonceMismatch: "the statement does not bind this registration (apple nonce, tpm extraData, android-key challenge)"
            case .publicKeyMismatch: "the attested key (certificate or tpm pubArea) is not the credential key, or of the wrong type"
            case .malformedCertificate: "a certificate of x5c cannot be parsed"
            case .certificateExpired: "a certificate of x5c had expired at the verification time"
            case .certificateNotYetValid: "a certificate of x5c was not yet valid at the verification time"
            case .certificateChainInvalid: "x5c does not chain to a configured trust anchor (or, without anchors, is not a signed chain)"
            case .signatureInvalid: "the assertion signature does not verify with the stored credential key"
            case .signCountNotIncreasing: "the sign count is not zero and not greater than the stored one (a cloned authenticator?)"
            case .userHandleMismatch: "the returned userHandle is not the credential's user"
            case .invalidPolicy: "the verifier's policy has no relying party id, origin or algorithm"
            }
        }

        /// The response JSON, clientDataJSON, attestation object, authenticator data or signature is
        /// larger than its limit in ``WebAuthnLimits``.
        public static let responseTooLarge = Code(.responseTooLarge)
        /// The response is not the `PublicKeyCredential.toJSON()` shape: a member is missing or of
        /// the wrong type, `type` is not `public-key`, a binary field is not base64url/base64, or
        /// `id` and `rawId` differ.
        public static let malformedResponse = Code(.malformedResponse)
        /// §7.1 steps 5–6, §7.2 steps 9–10: clientDataJSON is not strict UTF-8 JSON (duplicate
        /// members, bad UTF-8, ...) or lacks `type`, `challenge` or `origin` as strings.
        public static let malformedClientData = Code(.malformedClientData)
        /// §7.1 step 7, §7.2 step 11: `type` is not `webauthn.create` (registration) or `webauthn.get`.
        public static let typeMismatch = Code(.typeMismatch)
        /// §7.1 step 8, §7.2 step 12: `challenge` is not the expected challenge.
        public static let challengeMismatch = Code(.challengeMismatch)
        /// §7.1 step 9, §7.2 step 13: `origin` is not one of the allowed origins.
        public static let originNotAllowed = Code(.originNotAllowed)
        /// §7.1 step 10, §7.2 step 14: `crossOrigin` is true and the policy does not allow it.
        public static let crossOriginNotAllowed = Code(.crossOriginNotAllowed)
        /// §7.1 step 10, §7.2 step 14: `topOrigin` is present and not an allowed top origin.
        public static let topOriginNotAllowed = Code(.topOriginNotAllowed)
        /// §7.1 step 12: the attestation object is not a CBOR map of `fmt`, `attStmt` and `authData`,
        /// or its statement does not have its format's syntax.
        public static let malformedAttestation = Code(.malformedAttestation)
        /// The authenticator data is truncated, has trailing bytes or a malformed part (the COSE key
        /// or the extension map).
        public static let malformedAuthenticatorData = Code(.malformedAuthenticatorData)
        /// §7.1 step 13, §7.2 step 15: rpIdHash is not SHA-256 of the relying party id.
        public static let rpIDMismatch = Code(.rpIDMismatch)
        /// §7.1 step 14, §7.2 step 16: the UP flag is not set.
        public static let userNotPresent = Code(.userNotPresent)
        /// §7.1 step 15, §7.2 step 17: user verification is required and the UV flag is not set.
        public static let userNotVerified = Code(.userNotVerified)
        /// §7.1 step 16, §7.2 step 18: the BS flag is set without the BE flag.
        public static let backupStateInvalid = Code(.backupStateInvalid)
        /// §7.1: the AT flag or the attested credential data is missing from a registration.
        public static let attestedCredentialMissing = Code(.attestedCredentialMissing)
        /// §7.1 step 25: the credential id is longer than 1023 bytes.
        public static let credentialIDTooLong = Code(.credentialIDTooLong)
        /// The response's `rawId` is not the credential id of the authenticator data (registration)
        /// or of the expected credential (authentication).
        public static let credentialIDMismatch = Code(.credentialIDMismatch)
        /// The credential public key is not a well-formed COSE key of a supported type.
        public static let invalidPublicKey = Code(.invalidPublicKey)
        /// §7.1 step 19: the credential's algorithm is not one the policy accepts (RS1 never unless configured).
        public static let algorithmNotAllowed = Code(.algorithmNotAllowed)
        /// §7.1 step 21: `fmt` is not a format this verifier implements (none, packed, fido-u2f, apple, tpm, android-key).
        public static let unsupportedFormat = Code(.unsupportedFormat)
        /// §7.1 step 22: the attestation statement's signature does not verify.
        public static let attestationSignatureInvalid = Code(.attestationSignatureInvalid)
        /// §8.2.1 and the other formats' certificate requirements: the attestation certificate does
        /// not meet them (version, subject, basic constraints, a critical AAGUID extension, ...).
        public static let attestationCertificateInvalid = Code(.attestationCertificateInvalid)
        /// §8.2.1: the certificate's AAGUID extension (1.3.6.1.4.1.45724.1.1.4) differs from authData's aaguid.
        public static let aaguidMismatch = Code(.aaguidMismatch)
        /// §8.8 (apple): the certificate's nonce (1.2.840.113635.100.8.2) is not SHA-256(authData ‖ clientDataHash);
        /// §8.3 (tpm): certInfo's extraData is not the hash of authData ‖ clientDataHash; §8.4
        /// (android-key): the key description's attestationChallenge is not clientDataHash.
        public static let nonceMismatch = Code(.nonceMismatch)
        /// The attestation certificate's key is not the credential public key (apple, android-key), a
        /// key of the wrong type (fido-u2f), or the key tpm's pubArea and certInfo name is not it (tpm).
        public static let publicKeyMismatch = Code(.publicKeyMismatch)
        /// A certificate of `x5c` (or a trust anchor) is not a well-formed X.509 certificate.
        public static let malformedCertificate = Code(.malformedCertificate)
        /// A certificate of the attestation chain expired before the verification time.
        public static let certificateExpired = Code(.certificateExpired)
        /// A certificate of the attestation chain is not yet valid at the verification time.
        public static let certificateNotYetValid = Code(.certificateNotYetValid)
        /// §7.1 step 24: trust anchors are configured and `x5c` does not chain to one, or (without
        /// anchors) a certificate of `x5c` is not signed by the next one.
        public static let certificateChainInvalid = Code(.certificateChainInvalid)
        /// §7.2 step 21: the assertion signature does not verify with the credential public key.
        public static let signatureInvalid = Code(.signatureInvalid)
        /// §7.2 step 22: the sign count is non-zero and not greater than the stored one.
        public static let signCountNotIncreasing = Code(.signCountNotIncreasing)
        /// §7.2 step 6: the response's userHandle is not the credential's user.
        public static let userHandleMismatch = Code(.userHandleMismatch)
        /// The verification policy itself is unusable (no relying party id, no origin, no algorithm).
        public static let invalidPolicy = Code(.invalidPolicy)
    }

    /// What failed.
    public let code: Code
    /// Why, in words meant for a log or an operator. Never contains secrets.
    public let reason: String
    /// Where the error was raised.
    public let file: String
    /// Where the error was raised.
    public let line: UInt

    /// Creates an error with an explicit code.
    public init(code: Code, reason: String, file: String = #fileID, line: UInt = #line) {
        self.code = code
        self.reason = reason
        self.file = file
        self.line = line
    }

    public var description: String { "\(self.code.identifier): \(self.reason)" }

    public static func == (lhs: WebAuthnError, rhs: WebAuthnError) -> Bool { lhs.code == rhs.code }

    public func hash(into hasher: inout Hasher) { hasher.combine(self.code) }
}

extension WebAuthnError {
    static func malformedResponse(_ reason: String, file: String = #fileID, line: UInt = #line) -> Self {
        Self(code: .malformedResponse, reason: reason, file: file, line: line)
    }

    static func malformedAuthenticatorData(_ reason: String, file: String = #fileID, line: UInt = #line) -> Self {
        Self(code: .malformedAuthenticatorData, reason: reason, file: file, line: line)
    }

    static func malformedAttestation(_ reason: String, file: String = #fileID, line: UInt = #line) -> Self {
        Self(code: .malformedAttestation, reason: reason, file: file, line: line)
    }

    static func invalidPublicKey(_ reason: String, file: String = #fileID, line: UInt = #line) -> Self {
        Self(code: .invalidPublicKey, reason: reason, file: file, line: line)
    }
}
