//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
import Crypto
public import FormAttestForm
public import Foundation
import RFC3339
public import WebAuthn

/// Passkeys: registration for the authenticated user, and forms confirmed by a passkey, an App
/// Attest key, or both, through the same form policy, replay record and error model as App Attest
/// assertions (``FormFlows/confirm(_:now:)``).
extension FormFlows {
    /// What the client needs to create a passkey for `username`.
    public struct PasskeyRegistrationOptions: Sendable {
        /// The one-time server challenge (purpose ``ChallengePurpose/passkey``).
        public var challenge: IssuedChallenge
        /// The WebAuthn `user.id` to create the credential for: the user's existing passkeys'
        /// handle, or 32 fresh random bytes for a user without one.
        public var userHandle: [UInt8]
        /// The relying party id.
        public var relyingPartyID: String
        /// The user's registered credential ids (WebAuthn's `excludeCredentials`).
        public var excludeCredentials: [[UInt8]]
    }

    /// Register a passkey for the authenticated user.
    public struct PasskeyRegistrationRequest: Sendable {
        public var username: String
        /// The server challenge the client created the credential with (issued by
        /// ``passkeyRegistrationOptions(username:now:)``).
        public var challenge: [UInt8]
        /// The `user.id` the credential was created for (the options' ``PasskeyRegistrationOptions/userHandle``).
        public var userHandle: [UInt8]
        /// The registration response, `PublicKeyCredential.toJSON()`'s shape.
        public var response: [UInt8]
        /// For a user who has an active passkey: an assertion (`toJSON()`'s shape) by one of them,
        /// with user verification, over the same challenge: the person approves the new passkey.
        public var approval: [UInt8]?

        public init(username: String, challenge: [UInt8], userHandle: [UInt8], response: [UInt8], approval: [UInt8]? = nil) {
            self.username = username
            self.challenge = challenge
            self.userHandle = userHandle
            self.response = response
            self.approval = approval
        }
    }

    /// A registered passkey.
    public struct PasskeyRegistrationOutcome: Sendable {
        public var passkey: StoredPasskey
        public var registration: VerifiedRegistration
        /// The relying party id it was verified for.
        public var relyingPartyID: String
    }

    /// An App Attest assertion in a confirmation.
    public struct AppAttestSignature: Sendable {
        public var keyID: [UInt8]
        public var assertion: [UInt8]

        public init(keyID: [UInt8], assertion: [UInt8]) {
            self.keyID = keyID
            self.assertion = assertion
        }
    }

    /// A form signed by an App Attest key, a passkey, or both.
    public struct ConfirmRequest: Sendable {
        public var username: String
        public var appAttest: AppAttestSignature?
        /// The passkey assertion, `PublicKeyCredential.toJSON()`'s shape, whose challenge is the
        /// form's clientDataHash (SHA-256 of its RFC 8785 bytes).
        public var passkey: [UInt8]?
        public var form: [UInt8]
        /// The caller's session (an identity token's `sid`): the form's `session` must be it.
        public var session: String?
        /// The form already parsed from a request body; used only while its canonical bytes are
        /// still ``form``'s.
        var preparedForm: SignedForm? = nil

        public init(username: String, appAttest: AppAttestSignature?, passkey: [UInt8]?, form: [UInt8], session: String? = nil) {
            self.username = username
            self.appAttest = appAttest
            self.passkey = passkey
            self.form = form
            self.session = session
        }
    }

    /// A form accepted with the signatures it carried.
    public struct ConfirmOutcome: Sendable {
        public var form: SignedForm
        /// What the factor policy required of this form.
        public var requirement: FactorRequirement
        /// The App Attest key as stored after the commit, and its verified assertion.
        public var key: StoredKey?
        public var assertion: VerifiedAssertion?
        /// The passkey as stored after the commit, and its verified assertion.
        public var passkey: StoredPasskey?
        public var passkeyAssertion: VerifiedAuthentication?
        /// The passkey assertion as received (what an evidence record keeps), and the stored sign
        /// count it was checked against.
        public var passkeyResponse: AuthenticationResponse?
        public var passkeyPreviousSignCount: UInt32?
        public var nextChallenge: IssuedChallenge?
    }

    /// The transport names WebAuthn registers (§5.8.4); a client's others are not kept.
    static let knownTransports: Set<String> = ["ble", "hybrid", "internal", "nfc", "smart-card", "usb"]

    /// The registered transport names among `reported`, each once, in the order first reported: at
    /// most six, whatever the client sent.
    static func keptTransports(_ reported: [String]) -> [String] {
        var kept: [String] = []
        for name in reported where Self.knownTransports.contains(name) && !kept.contains(name) {
            kept.append(name)
        }
        return kept
    }

    // MARK: - Registration

    /// Issues a passkey challenge for `username` with the user handle to create the credential for.
    public func passkeyRegistrationOptions(username: String, now: Date) async throws(FlowError) -> PasskeyRegistrationOptions {
        let verifier = try self.passkeyVerifier()
        let existing = try await self.passkeyCredentials(of: username)
        let challenge = try await self.issueChallenge(purpose: .passkey, username: username, now: now)
        return PasskeyRegistrationOptions(
            challenge: challenge,
            userHandle: existing.userHandle ?? Self.firstUserHandle(challenge: challenge.value),
            relyingPartyID: verifier.policy.relyingPartyID,
            excludeCredentials: existing.activeCredentialIDs
        )
    }

    /// The user handle of a user's first passkey, made from the one-time challenge the options
    /// issued with it: SHA-256 of a label and the challenge. The registration must carry exactly
    /// it, so the client cannot choose a handle (another user's: two accounts would share one
    /// WebAuthn user.id), and the server keeps nothing beside the challenge. It says nothing of the
    /// user (the challenge is random), and every user's is their own (the challenge is used once).
    public static func firstUserHandle(challenge: [UInt8]) -> [UInt8] {
        var hasher = SHA256()
        hasher.update(data: Array("FormAttest passkey user handle\u{0}".utf8))
        hasher.update(data: challenge)
        return Array(hasher.finalize())
    }

    /// Verifies a passkey registration (W3C WebAuthn §7.1) and stores the credential for the
    /// user, consuming its one-time server challenge in the same commit. `admit` as in
    /// ``attest(_:now:admit:)``: once the registration (and its approval) verified.
    public func registerPasskey(_ request: PasskeyRegistrationRequest, now: Date, admit: Admission? = nil) async throws(FlowError)
        -> PasskeyRegistrationOutcome
    {
        let verifier = try self.passkeyVerifier()
        guard (1...WebAuthnLimits.maximumUserHandleSize).contains(request.userHandle.count) else {
            throw FlowError(code: .invalidRequest, category: .malformedInput, reason: "userHandle must be 1 to 64 bytes")
        }
        guard request.challenge.count == 32 else {
            throw FlowError(code: .challengeInvalid, category: .policy, reason: "the passkey challenge is not 32 bytes")
        }
        // One user, one handle: every passkey of the user is created for the same user.id.
        // A first passkey's, the one the options made of this challenge.
        let credentials = try await self.passkeyCredentials(of: request.username)
        let handle = credentials.userHandle ?? Self.firstUserHandle(challenge: request.challenge)
        guard constantTimeEquals(handle, request.userHandle) else {
            throw FlowError(
                code: .invalidRequest, category: .malformedInput, reason: "userHandle is not this user's (fetch the registration options)")
        }
        // A user with a passkey adds another only with one of them: the caller's credential (the
        // user's session or token, which code in the app holds too) does not prove the person.
        if !credentials.activeCredentialIDs.isEmpty {
            guard let approval = request.approval else {
                throw FlowError(
                    code: .passkeyApprovalRequired, category: .factorMissing,
                    reason: "this user has a passkey: approve the new one with an assertion of it (user verification) over the same challenge")
            }
            _ = try await self.verifyPasskeyAssertion(
                approval, username: request.username, challenge: request.challenge, userVerification: true, replayOf: nil, now: now)
        }
        let registration: VerifiedRegistration
        do throws(WebAuthnError) {
            registration = try await verifier.verifyRegistration(json: request.response, challenge: request.challenge, at: now)
        } catch {
            throw FlowError(error)
        }
        let passkey = StoredPasskey(
            credentialID: registration.credentialID,
            username: request.username,
            userHandle: request.userHandle,
            publicKey: registration.publicKey.cborEncoded,
            signCount: registration.signCount,
            backupEligible: registration.backupEligible,
            backedUp: registration.backedUp,
            aaguid: registration.aaguid,
            transports: Self.keptTransports(registration.transports),
            format: registration.format.rawValue,
            createdAt: now,
            lastUsed: now,
            registration: try Self.registrationRecord(request.response)
        )
        try await admit?()
        do {
            try await self.store.commitPasskeyRegistration(
                PasskeyRegistrationCommit(
                    passkey: passkey,
                    challenges: [ChallengeClaim(value: request.challenge, purpose: .passkey, username: request.username)],
                    now: now,
                    maximumActiveCredentials: self.configuration.maximumPasskeysPerUser,
                    // Without an approval: the store checks again, in the commit, that the user
                    // still has no active passkey (two first registrations racing).
                    firstPasskey: credentials.activeCredentialIDs.isEmpty
                )
            )
        } catch  where error.code == .duplicateKey {
            throw FlowError(code: .passkeyAlreadyRegistered, category: .conflict, reason: "this credential id is registered already")
        } catch {
            throw FlowError(error)
        }
        return PasskeyRegistrationOutcome(passkey: passkey, registration: registration, relyingPartyID: verifier.policy.relyingPartyID)
    }

    // MARK: - Confirmation

    /// Accepts a form signed by what its factor policy requires: an App Attest assertion, a
    /// passkey assertion over the same clientDataHash, or both, in one atomic commit with the
    /// form's one replay record.
    public func confirm(_ request: ConfirmRequest, now: Date) async throws(FlowError) -> ConfirmOutcome {
        try await self.rotating(username: request.username, now: now) { () async throws(FlowError) -> ConfirmOutcome in
            let form = try self.acceptedForm(
                request.form, prepared: request.preparedForm, username: request.username, session: request.session, now: now)
            let requirement = try await self.requireFactors(form, appAttest: request.appAttest != nil, passkey: request.passkey != nil, now: now)
            let claims = try self.formChallengeClaims(form, username: request.username)
            var signed: (key: StoredKey, assertion: VerifiedAssertion)?
            if let appAttest = request.appAttest {
                signed = try await self.verifyKeyAssertion(
                    appAttest.assertion, keyID: appAttest.keyID, username: request.username, form: form, now: now)
            }
            var passkey: (stored: StoredPasskey, assertion: VerifiedAuthentication, response: AuthenticationResponse)?
            if let json = request.passkey {
                passkey = try await self.verifyPasskeyAssertion(
                    json, username: request.username, challenge: form.clientDataHash, userVerification: requirement.userVerification,
                    replayOf: form.clientDataHash, now: now)
            }
            let signals = signed.flatMap { Self.signals($0.assertion.extensions) }
            try await self.commitSigned(
                AssertionCommit(
                    keyID: signed?.key.keyID,
                    counter: signed?.assertion.counter ?? 0,
                    replay: ReplayRecord(formHash: form.clientDataHash, expiresAt: self.configuration.replayExpiry(for: form, now: now)),
                    challenges: claims,
                    now: now,
                    signals: signals,
                    passkey: passkey.map {
                        PasskeyUse(
                            credentialID: $0.stored.credentialID, previousSignCount: $0.stored.signCount, signCount: $0.assertion.signCount,
                            backedUp: $0.assertion.backedUp)
                    }
                ),
                form: form,
                now: now
            )
            var outcome = ConfirmOutcome(form: form, requirement: requirement)
            if let signed {
                outcome.key = Self.advanced(signed.key, to: signed.assertion.counter, form: form, signals: signals, now: now)
                outcome.assertion = signed.assertion
            }
            if let passkey {
                var stored = passkey.stored
                stored.signCount = passkey.assertion.signCount
                stored.backedUp = passkey.assertion.backedUp
                stored.lastUsed = now
                outcome.passkey = stored
                outcome.passkeyAssertion = passkey.assertion
                outcome.passkeyResponse = passkey.response
                outcome.passkeyPreviousSignCount = passkey.stored.signCount
            }
            return outcome
        } attach: { outcome, challenge in
            outcome.nextChallenge = challenge
        }
    }

    // MARK: - Steps

    /// The factor policy's check: the request carries every signature `form` needs. A form
    /// accepted before is named a `replay` whatever it carries now (the record is read only to
    /// name the refusal, never to accept).
    /// - Returns: what the form needs (user verification is checked once the passkey verified).
    func requireFactors(_ form: SignedForm, appAttest: Bool, passkey: Bool, now: Date) async throws(FlowError) -> FactorRequirement {
        let requirement = self.configuration.factorPolicy.requirement(for: form)
        var missing: FlowError?
        if requirement.appAttest && !appAttest {
            missing = FlowError(
                code: .appAttestRequired, category: .factorMissing, reason: "this form needs an App Attest assertion (factor policy: \(requirement))")
        } else if requirement.passkey && !passkey {
            missing = FlowError(
                code: .passkeyRequired, category: .factorMissing,
                reason:
                    "this form needs a passkey assertion\(requirement.userVerification ? " with user verification" : "") (factor policy: \(requirement))"
            )
        }
        guard let missing else { return requirement }
        let recorded: Bool
        do {
            recorded = try await self.store.isFormHashRecorded(form.clientDataHash, now: now)
        } catch {
            throw FlowError(error)
        }
        if recorded { throw FlowError(code: .replay, category: .conflict, reason: "this form was accepted before") }
        throw missing
    }

    /// Verifies a passkey assertion (W3C WebAuthn §7.2) with the user's stored credential: over a
    /// form (the challenge its clientDataHash), or over a registration's challenge (an approval).
    ///
    /// - Parameters:
    ///   - userVerification: whether the UV flag is needed.
    ///   - replayOf: the form's hash, when a sign count that did not increase may be the same form again.
    func verifyPasskeyAssertion(
        _ json: [UInt8], username: String, challenge: [UInt8], userVerification: Bool, replayOf formHash: [UInt8]?, now: Date
    ) async throws(FlowError) -> (stored: StoredPasskey, assertion: VerifiedAuthentication, response: AuthenticationResponse) {
        let verifier = try self.passkeyVerifier()
        let response: AuthenticationResponse
        do throws(WebAuthnError) {
            response = try AuthenticationResponse(json: json)
        } catch {
            throw FlowError(error)
        }
        // An unknown credential and another user's get the same answer.
        let loaded: StoredPasskey?
        do {
            loaded = try await self.store.loadPasskey(credentialID: response.rawID)
        } catch {
            throw FlowError(error)
        }
        guard let stored = loaded, Array(stored.username.utf8) == Array(username.utf8) else {
            throw FlowError(
                code: .passkeyMismatch, category: .keyMismatch, reason: "this credential is not registered to this user; register a passkey")
        }
        if let revokedAt = stored.revokedAt {
            throw FlowError(
                code: .passkeyRevoked, category: .keyMismatch,
                reason: "this passkey was revoked at \(RFC3339UTC.format(revokedAt)); register a new one")
        }
        // With evidence records on, every form's record carries its passkey's registration (an
        // approval of a new passkey makes no record): a
        // passkey whose registration was not kept cannot back one (as an App Attest key without
        // its attestation cannot), so the form is refused before anything is stored.
        if formHash != nil && self.configuration.requireVerifiableKeyAttestation && stored.registration == nil {
            throw FlowError(
                code: .keyAttestationUnverifiable, category: .requiresReattestation,
                reason: "this passkey's registration was not kept, and evidence records need it: register a new passkey")
        }
        let publicKey: CredentialPublicKey
        do throws(WebAuthnError) {
            publicKey = try CredentialPublicKey(cborEncoded: stored.publicKey)
        } catch {
            throw FlowError(
                code: .storeCorrupt, category: .storeUnavailable, reason: "the stored passkey's public key is not a COSE key FormAttest accepts")
        }
        let verified: VerifiedAuthentication
        do throws(WebAuthnError) {
            verified = try verifier.verifyAuthentication(
                response, publicKey: publicKey, challenge: challenge, previousSignCount: stored.signCount,
                credentialID: stored.credentialID, userHandle: stored.userHandle, backupEligible: stored.backupEligible
            )
        } catch  where error.code == .signCountNotIncreasing {
            // The signature verified first: the same form again is a replay, as for App Attest.
            if let formHash, (try? await self.store.isFormHashRecorded(formHash, now: now)) == true {
                throw FlowError(code: .replay, category: .conflict, reason: "this form was accepted before")
            }
            throw FlowError(error)
        } catch {
            throw FlowError(error)
        }
        if userVerification && !verified.userVerified {
            throw FlowError(
                code: .userVerificationRequired, category: .factorMissing,
                reason: "this form needs a passkey assertion with user verification (the UV flag); ask for userVerification: \"required\"")
        }
        return (stored, verified, response)
    }

    /// The passkey verifier, or `passkeys_disabled` when the service has no passkey settings.
    private func passkeyVerifier() throws(FlowError) -> WebAuthnVerifier {
        guard let verifier = self.webAuthn else {
            throw FlowError(
                code: .passkeysDisabled, category: .policy,
                reason: "this service accepts no passkeys (no relying party id and origins are configured)")
        }
        return verifier
    }

    private func passkeyCredentials(of username: String) async throws(FlowError) -> PasskeyCredentials {
        try Self.checkUsername(username)
        do {
            return try await self.store.passkeyCredentials(username: username)
        } catch {
            throw FlowError(error)
        }
    }

    /// The registration as the client sent it, kept for evidence records.
    private static func registrationRecord(_ json: [UInt8]) throws(FlowError) -> PasskeyRegistrationRecord {
        do throws(WebAuthnError) {
            let response = try RegistrationResponse(json: json)
            return PasskeyRegistrationRecord(attestationObject: response.attestationObject, clientDataJSON: response.clientDataJSON)
        } catch {
            throw FlowError(error)
        }
    }
}
