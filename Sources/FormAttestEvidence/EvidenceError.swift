//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// The one error type of the `FormAttestEvidence` module: a ``Code`` naming the step that failed,
/// and a reason. Two errors compare equal when their codes are equal.
public struct EvidenceError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What failed, in the order ``SignedEvidence/verify(_:signers:trustAnchors:receiptTrustAnchors:clientData:expecting:)`` checks.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Backing: String, Hashable, Sendable, CaseIterable {
            case malformedEnvelope = "evidence_malformed_envelope"
            case unknownSigner = "evidence_unknown_signer"
            case serverSignatureInvalid = "evidence_server_signature_invalid"
            case malformedRecord = "evidence_malformed_record"
            case policyMismatch = "evidence_policy_mismatch"
            case formInvalid = "evidence_form_invalid"
            case keyAttestationInvalid = "evidence_key_attestation_invalid"
            case formNotSigned = "evidence_form_not_signed"
            case counterMismatch = "evidence_counter_mismatch"
            case malformedBundle = "evidence_malformed_bundle"
            case checkpointInvalid = "evidence_checkpoint_invalid"
            case notInLog = "evidence_not_in_log"
            case registrationMissing = "evidence_registration_missing"
            case registrationMismatch = "evidence_registration_mismatch"
            case passkeyRegistrationInvalid = "evidence_passkey_registration_invalid"
            case passkeyAssertionInvalid = "evidence_passkey_assertion_invalid"
            case passkeyClaimMismatch = "evidence_passkey_claim_mismatch"
        }

        fileprivate let backing: Backing
        fileprivate init(_ backing: Backing) { self.backing = backing }

        /// Every code, in the order the checks run (docs/errors.md lists them from here:
        /// `formattest docs evidence-errors`).
        public static var allCases: [Code] { Backing.allCases.map(Code.init) }

        /// The stable `snake_case` identifier.
        public var identifier: String { self.backing.rawValue }
        public var description: String { self.backing.rawValue }

        /// Not a JWS in flattened JSON serialization with an ES256 protected header.
        public static let malformedEnvelope = Code(.malformedEnvelope)
        /// The header's `kid` names no key of the given JWKS (or a key whose thumbprint differs).
        public static let unknownSigner = Code(.unknownSigner)
        /// The server's signature does not verify: some byte of the record or header changed.
        public static let serverSignatureInvalid = Code(.serverSignatureInvalid)
        /// The payload is not a canonical record of this version.
        public static let malformedRecord = Code(.malformedRecord)
        /// The record's app id, environment or trust anchors are outside its own policy or the
        /// verifier's expectations.
        public static let policyMismatch = Code(.policyMismatch)
        /// The form is not canonical, not a form, not for the record's user, outside the policy's
        /// time window, or lacks the session or challenge the policy required.
        public static let formInvalid = Code(.formInvalid)
        /// The key's attestation does not verify at its recorded time (``EvidenceError/verifierCode`` says which step).
        public static let keyAttestationInvalid = Code(.keyAttestationInvalid)
        /// The key's attestation or assertion does not sign the form's hash.
        public static let formNotSigned = Code(.formNotSigned)
        /// The assertion's counter is not the recorded one.
        public static let counterMismatch = Code(.counterMismatch)
        /// Not an evidence bundle (``EvidenceBundle``) of this version.
        public static let malformedBundle = Code(.malformedBundle)
        /// The bundle's checkpoint is not a checkpoint signed by the log's key, or names another log.
        public static let checkpointInvalid = Code(.checkpointInvalid)
        /// The bundle's inclusion proof does not lead from the record to the checkpoint's root.
        public static let notInLog = Code(.notInLog)
        /// A version-2 record's key registration (``KeyRegistration``) was not given or is not
        /// where it should be.
        public static let registrationMissing = Code(.registrationMissing)
        /// The registration given for a version-2 record does not hash to its reference (altered,
        /// or another key's), is not a registration document, or names another key, app id or
        /// environment than the record.
        public static let registrationMismatch = Code(.registrationMismatch)
        /// A version-3 record's passkey registration does not verify (W3C WebAuthn §7.1) at its
        /// recorded time under the record's passkey policy (``EvidenceError/verifierCode`` says which step).
        public static let passkeyRegistrationInvalid = Code(.passkeyRegistrationInvalid)
        /// A version-3 record's passkey assertion does not verify (§7.2) over the form's hash with
        /// the registered credential's key, for its credential and user, at the recorded previous
        /// sign count (``EvidenceError/verifierCode`` says which step).
        public static let passkeyAssertionInvalid = Code(.passkeyAssertionInvalid)
        /// What a version-3 record claims of its passkey assertion (UV, BE, BS) is not what its
        /// signed authenticator data says, or the policy it records required user verification and
        /// the assertion has none. (Its `amr` must be what these claims make, or the record is
        /// malformed.)
        public static let passkeyClaimMismatch = Code(.passkeyClaimMismatch)

        /// One sentence on what failed, for docs/errors.md.
        public var summary: String {
            switch self.backing {
            case .malformedEnvelope: "the file is not a JWS in flattened JSON serialization with an ES256 protected header"
            case .unknownSigner: "the header's kid names no key of the JWKS given (or the JWKS is not one)"
            case .serverSignatureInvalid: "the server's signature does not verify: a byte of the record or its header changed"
            case .malformedRecord: "the payload is not a canonical record of version 1, 2 or 3 (every member with its type, no other)"
            case .policyMismatch: "the record's app id, environment, anchors or times are outside its own policy or the verifier's expectations"
            case .formInvalid:
                "the form is not canonical, not for the record's user, outside the policy's window, or lacks a session or challenge the policy required"
            case .keyAttestationInvalid: "the App Attest key's attestation does not verify at its recorded time"
            case .formNotSigned: "the App Attest key's attestation or assertion does not sign SHA-256 of the form"
            case .counterMismatch:
                "a signed counter (App Attest) or sign count (passkey) is not the recorded one, or the recorded previous sign count is below the registration's"
            case .malformedBundle: "the file is not an evidence bundle of this version"
            case .checkpointInvalid: "the bundle's checkpoint is not signed by the log's key, or names another log"
            case .notInLog: "the bundle's inclusion proof does not lead from the record to the checkpoint's root"
            case .registrationMissing: "a version-2 record's key registration was not given or is not where it should be"
            case .registrationMismatch:
                "the key registration given does not hash to the record's reference, is not a registration, or names another key"
            case .passkeyRegistrationInvalid:
                "the passkey's registration does not verify (WebAuthn §7.1) at its recorded time under the record's passkey policy"
            case .passkeyAssertionInvalid:
                "the passkey's assertion does not verify (WebAuthn §7.2) over the form's hash with the registered key, credential and user, at the recorded previous sign count"
            case .passkeyClaimMismatch: "the record's UV, BE or BS claims differ from the signed flags, or its policy required UV and the flag is off"
            }
        }
    }

    public let code: Code
    public let reason: String
    /// The verifier's own code, when an App Attest step failed.
    public let verifierCode: String?

    public init(code: Code, reason: String, verifierCode: String? = nil) {
        self.code = code
        self.reason = reason
        self.verifierCode = verifierCode
    }

    public var description: String { "\(self.code.identifier): \(self.reason)" }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(self.code) }

    static func malformed(_ reason: String) -> Self { Self(code: .malformedRecord, reason: reason) }
}
