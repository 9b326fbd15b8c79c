//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import CanonicalJSON
public import FormAttestFlows
import FormAttestForm
import RFC3339
import WebAuthn

/// `GET /api/passkeys/options`'s answer: what `navigator.credentials.create()` (or iOS's
/// `ASAuthorizationPlatformPublicKeyCredentialProvider`) needs to create a passkey.
public struct PasskeyOptionsResponse: APIResponse, Hashable {
    public static let schemaName = "PasskeyOptions"

    /// The one-time challenge (purpose `passkey`).
    public var challenge: ChallengeResponse
    /// `user.id`, base64url: the user's existing passkeys' handle, or a fresh random one.
    public var userHandle: String
    /// The relying party id (`rp.id`).
    public var rpId: String
    /// The user's active credential ids, base64url (`excludeCredentials`).
    public var excludeCredentials: [String]

    public init(challenge: IssuedChallenge, userHandle: [UInt8], relyingPartyID: String, excludeCredentials: [[UInt8]]) {
        self.challenge = ChallengeResponse(challenge)
        self.userHandle = Base64URL.encode(userHandle)
        self.rpId = relyingPartyID
        self.excludeCredentials = excludeCredentials.map { Base64URL.encode($0) }
    }

    public init(_ options: FormFlows.PasskeyRegistrationOptions) {
        self.init(
            challenge: options.challenge, userHandle: options.userHandle, relyingPartyID: options.relyingPartyID,
            excludeCredentials: options.excludeCredentials)
    }
}

/// `POST /api/passkeys/register`'s answer: the registered credential as the verifier saw it.
public struct PasskeyRegisteredResponse: APIResponse, Hashable {
    public static let schemaName = "PasskeyRegistered"

    public var verified = true
    /// base64url.
    public var credentialId: String
    /// The attestation statement format.
    public var format: String
    /// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    public var aaguid: String
    public var signCount: UInt32
    public var userVerified: Bool
    public var backupEligible: Bool
    public var backedUp: Bool
    /// Whether the attestation chain reached a configured anchor; absent for formats without
    /// certificates (`none`, packed self attestation).
    public var attestationAnchored: Bool?
    /// The transports kept (WebAuthn's registered names).
    public var transports: [String]
    /// `{fido2Wrapper}`: the FIDO2 wrapper's passkey counterpart (schemas/fido2-wrapper.schema.json),
    /// the registration in the shape a WebAuthn server stores a credential.
    public var formats: JSONValue?

    /// - Parameters:
    ///   - passkey: the stored credential.
    ///   - aaguid: its AAGUID in the usual spelling.
    ///   - userVerified: the registration's UV flag.
    ///   - attestationAnchored: whether the chain reached an anchor (`nil`: no certificate).
    ///   - formats: the tokens made of the registration.
    public init(passkey: StoredPasskey, aaguid: String, userVerified: Bool, attestationAnchored: Bool?, formats: JSONValue? = nil) {
        self.credentialId = Base64URL.encode(passkey.credentialID)
        self.format = passkey.format
        self.aaguid = aaguid
        self.signCount = passkey.signCount
        self.userVerified = userVerified
        self.backupEligible = passkey.backupEligible
        self.backedUp = passkey.backedUp
        self.attestationAnchored = attestationAnchored
        self.transports = passkey.transports
        self.formats = formats
    }

    public init(_ outcome: FormFlows.PasskeyRegistrationOutcome, formats: JSONValue?) {
        self.init(
            passkey: outcome.passkey, aaguid: outcome.registration.aaguidString, userVerified: outcome.registration.userVerified,
            attestationAnchored: outcome.registration.attestationAnchored, formats: formats)
    }
}

/// `POST /api/appattest/assert`'s answer to a request that carried a passkey assertion: which
/// factors signed the form, and what each one's state is now.
public struct ConfirmedResponse: APIResponse, Hashable {
    public static let schemaName = "Confirmed"

    /// What the passkey's assertion showed.
    public struct Passkey: Encodable, Sendable, Hashable {
        /// base64url.
        public var credentialId: String
        public var signCount: UInt32
        public var userVerified: Bool
        public var backupEligible: Bool
        public var backedUp: Bool

        public init(credentialID: [UInt8], signCount: UInt32, userVerified: Bool, backupEligible: Bool, backedUp: Bool) {
            self.credentialId = Base64URL.encode(credentialID)
            self.signCount = signCount
            self.userVerified = userVerified
            self.backupEligible = backupEligible
            self.backedUp = backedUp
        }
    }

    public var verified = true
    /// SHA-256 of the form's RFC 8785 bytes, base64url: the App Attest clientDataHash and the
    /// passkey's challenge.
    public var formHash: String
    /// The factors that signed the form: `app-attest`, `passkey` (docs/passkeys.md).
    public var factors: [String]
    /// The App Attest key and its counter, when an App Attest assertion signed the form.
    public var keyId: String?
    public var counter: UInt32?
    /// The passkey's state after the assertion, when a passkey signed the form.
    public var passkey: Passkey?
    /// The server-signed JWS, when an App Attest assertion signed the form.
    public var formats: JSONValue?
    /// The form's evidence record (version 3, with the passkey): its id, whether it was
    /// archived, its leaf index in the evidence log, the signed record.
    public var evidenceId: String?
    public var evidenceArchived: Bool?
    public var evidenceLogIndex: UInt64?
    public var evidence: JSONValue?
    public var nextChallenge: ChallengeResponse?

    /// - Parameters:
    ///   - formHash: the form's clientDataHash.
    ///   - key: the App Attest key after the commit, when one signed.
    ///   - passkey: the passkey's assertion, when one signed.
    public init(
        formHash: [UInt8], key: StoredKey?, passkey: Passkey?, formats: JSONValue?, evidence: EvidenceFields? = nil, nextChallenge: ChallengeResponse?
    ) {
        self.formHash = Base64URL.encode(formHash)
        self.factors = (key == nil ? [] : ["app-attest"]) + (passkey == nil ? [] : ["passkey"])
        self.keyId = key.map { Base64URL.encode($0.keyID) }
        self.counter = key?.counter
        self.passkey = passkey
        self.formats = formats
        (self.evidenceId, self.evidenceArchived, self.evidence) = (evidence?.id, evidence?.archived, evidence?.envelope)
        self.evidenceLogIndex = evidence?.logIndex
        self.nextChallenge = nextChallenge
    }

    public init(_ outcome: FormFlows.ConfirmOutcome, formats: JSONValue?, evidence: EvidenceFields? = nil) {
        var passkey: Passkey?
        if let stored = outcome.passkey, let assertion = outcome.passkeyAssertion {
            passkey = Passkey(
                credentialID: stored.credentialID, signCount: assertion.signCount, userVerified: assertion.userVerified,
                backupEligible: assertion.backupEligible, backedUp: assertion.backedUp
            )
        }
        self.init(
            formHash: outcome.form.clientDataHash, key: outcome.key, passkey: passkey, formats: formats, evidence: evidence,
            nextChallenge: outcome.nextChallenge.map(ChallengeResponse.init))
    }

    enum CodingKeys: String, CodingKey {
        case verified, formHash, factors, keyId, counter, passkey, formats, evidenceId, evidenceArchived, evidenceLogIndex, evidence
        case nextChallenge = "next_challenge"
    }
}
