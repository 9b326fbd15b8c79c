//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
public import Foundation

/// The WebAuthn relying party's checks: registration (W3C WebAuthn Level 3 §7.1) and
/// authentication (§7.2), each step a guard with its own ``WebAuthnError/Code``.
///
/// Pure: no clock (the time certificates are checked at is a parameter), no randomness (the
/// caller generated the challenge), no storage (the caller passes the stored key and sign count
/// and stores what the answer says).
public struct WebAuthnVerifier: Sendable {
    /// The policy.
    public let policy: WebAuthnPolicy
    private let relyingPartyIDHash: [UInt8]

    /// - Throws: ``WebAuthnError/Code/invalidPolicy`` without an RP id, an origin or an algorithm.
    public init(policy: WebAuthnPolicy) throws(WebAuthnError) {
        guard !policy.relyingPartyID.isEmpty else {
            throw WebAuthnError(code: .invalidPolicy, reason: "the policy has no relying party id")
        }
        guard !policy.allowedOrigins.isEmpty else {
            throw WebAuthnError(code: .invalidPolicy, reason: "the policy allows no origin")
        }
        guard !policy.credentialAlgorithms.isEmpty else {
            throw WebAuthnError(code: .invalidPolicy, reason: "the policy accepts no algorithm")
        }
        self.policy = policy
        self.relyingPartyIDHash = Array(SHA256.hash(data: Array(policy.relyingPartyID.utf8)))
    }

    // MARK: - Registration (§7.1)

    /// Verifies a registration response given as its JSON (`PublicKeyCredential.toJSON()` shape).
    ///
    /// - Parameters:
    ///   - json: the response.
    ///   - challenge: the challenge the server issued (the exact bytes).
    ///   - time: when attestation certificates must be valid.
    /// - Throws: ``WebAuthnError`` naming the failed step.
    public func verifyRegistration(json: some Collection<UInt8>, challenge: [UInt8], at time: Date) async throws(WebAuthnError)
        -> VerifiedRegistration
    {
        try await self.verifyRegistration(RegistrationResponse(json: json), challenge: challenge, at: time)
    }

    /// Verifies a parsed registration response.
    public func verifyRegistration(_ response: RegistrationResponse, challenge: [UInt8], at time: Date) async throws(WebAuthnError)
        -> VerifiedRegistration
    {
        // Steps 5–10: the client data.
        let clientData = try CollectedClientData(bytes: response.clientDataJSON)
        try self.checkClientData(clientData, type: "webauthn.create", challenge: challenge)
        // Step 11: its hash.
        let clientDataHash = Array(clientData.hash)
        // Step 12: the attestation object.
        let object = try WebAuthnAttestationObject(bytes: response.attestationObject)
        let authenticatorData = object.authenticatorData
        // Steps 13–16: rpIdHash, UP, UV, BE/BS.
        try self.checkAuthenticatorData(authenticatorData)
        guard let credential = authenticatorData.attestedCredential else {
            throw WebAuthnError(
                code: .attestedCredentialMissing, reason: "the registration's authenticator data has no attested credential (AT flag)")
        }
        // Step 25 (its length was checked while parsing): the credential is the one the client reported.
        guard bytesMatch(credential.credentialID, response.rawID) else {
            throw WebAuthnError(code: .credentialIDMismatch, reason: "rawId is not the credential id of the authenticator data")
        }
        // Step 19: the credential's algorithm is one the policy accepts.
        guard self.policy.credentialAlgorithms.contains(credential.publicKey.algorithm) else {
            throw WebAuthnError(code: .algorithmNotAllowed, reason: "the credential's algorithm \(credential.publicKey.algorithm) is not accepted")
        }
        // Steps 21–24: the attestation statement, its format's procedure and its trust path.
        let anchored = try await AttestationStatementVerifier(
            object: object,
            credential: credential,
            clientDataHash: clientDataHash,
            anchors: self.policy.trustAnchors,
            time: time
        ).verify()
        return VerifiedRegistration(
            credentialID: credential.credentialID,
            publicKey: credential.publicKey,
            signCount: authenticatorData.signCount,
            format: AttestationFormat(rawValue: object.format),
            aaguid: credential.aaguid,
            userVerified: authenticatorData.userVerified,
            backupEligible: authenticatorData.backupEligible,
            backedUp: authenticatorData.backedUp,
            attestationAnchored: anchored,
            transports: response.transports,
            authenticatorAttachment: response.authenticatorAttachment
        )
    }

    // MARK: - Authentication (§7.2)

    /// Verifies an authentication response (parse its JSON with ``AuthenticationResponse/init(json:)``).
    ///
    /// - Parameters:
    ///   - response: the response.
    ///   - publicKey: the credential's stored public key.
    ///   - challenge: the challenge (for a form: SHA-256 of its RFC 8785 bytes).
    ///   - previousSignCount: the stored sign count.
    ///   - credentialID: the stored credential id, when the caller looked the key up by user rather than by id.
    ///   - userHandle: the credential's user handle; a userHandle in the response must equal it.
    ///   - backupEligible: the BE flag the credential was registered with; the assertion's must
    ///     equal it (BE is fixed when the credential is made: a synced passkey cannot sign as a
    ///     device-bound one). `nil` when the caller has no record of it.
    /// - Throws: ``WebAuthnError`` naming the failed step.
    public func verifyAuthentication(
        _ response: AuthenticationResponse,
        publicKey: CredentialPublicKey,
        challenge: [UInt8],
        previousSignCount: UInt32,
        credentialID: [UInt8]? = nil,
        userHandle: [UInt8]? = nil,
        backupEligible: Bool? = nil
    ) throws(WebAuthnError) -> VerifiedAuthentication {
        // Step 5: the credential is the one expected.
        if let credentialID {
            guard bytesMatch(credentialID, response.rawID) else {
                throw WebAuthnError(code: .credentialIDMismatch, reason: "rawId is not the expected credential id")
            }
        }
        // Step 6: the user handle, when the response has one, is the credential's user.
        if let returned = response.userHandle, let userHandle {
            guard bytesMatch(returned, userHandle) else {
                throw WebAuthnError(code: .userHandleMismatch, reason: "userHandle is not the credential's user")
            }
        }
        // Step 19's algorithm policy applies to the stored key too.
        guard self.policy.credentialAlgorithms.contains(publicKey.algorithm) else {
            throw WebAuthnError(code: .algorithmNotAllowed, reason: "the credential's algorithm \(publicKey.algorithm) is not accepted")
        }
        // Steps 9–14: the client data.
        let clientData = try CollectedClientData(bytes: response.clientDataJSON)
        try self.checkClientData(clientData, type: "webauthn.get", challenge: challenge)
        // Steps 15–18: rpIdHash, UP, UV, BE/BS.
        let authenticatorData = try WebAuthnAuthenticatorData(bytes: response.authenticatorData)
        try self.checkAuthenticatorData(authenticatorData)
        // Step 18 with a credential record: BE is the one it was registered with.
        if let backupEligible {
            guard authenticatorData.backupEligible == backupEligible else {
                throw WebAuthnError(
                    code: .backupStateInvalid,
                    reason:
                        "the BE flag is \(authenticatorData.backupEligible ? "set" : "clear"); the credential was registered with it \(backupEligible ? "set" : "clear")"
                )
            }
        }
        // Steps 20–21: the signature over authenticatorData ‖ SHA-256(clientDataJSON).
        guard publicKey.isValidSignature(response.signature, for: response.authenticatorData + Array(clientData.hash)) else {
            throw WebAuthnError(code: .signatureInvalid, reason: "the assertion signature does not verify with the credential's key")
        }
        // Step 22: a non-zero count must increase; 0 and 0 (no counter) is accepted.
        let signCount = authenticatorData.signCount
        guard (signCount == 0 && previousSignCount == 0) || signCount > previousSignCount else {
            throw WebAuthnError(
                code: .signCountNotIncreasing,
                reason: "sign count \(signCount) is not greater than the stored \(previousSignCount): the authenticator may be cloned"
            )
        }
        return VerifiedAuthentication(
            credentialID: response.rawID,
            signCount: signCount,
            userVerified: authenticatorData.userVerified,
            backupEligible: authenticatorData.backupEligible,
            backedUp: authenticatorData.backedUp,
            userHandle: response.userHandle
        )
    }

    // MARK: - Shared steps

    /// §7.1 steps 7–10, §7.2 steps 11–14.
    private func checkClientData(_ clientData: CollectedClientData, type: String, challenge: [UInt8]) throws(WebAuthnError) {
        guard clientData.type == type else {
            throw WebAuthnError(code: .typeMismatch, reason: "clientDataJSON's type is \"\(clientData.type)\", not \"\(type)\"")
        }
        guard let received = WebAuthnBase64.decode(clientData.challenge), bytesMatch(received, challenge) else {
            throw WebAuthnError(code: .challengeMismatch, reason: "clientDataJSON's challenge is not the expected challenge")
        }
        guard self.policy.allowedOrigins.contains(clientData.origin) else {
            throw WebAuthnError(code: .originNotAllowed, reason: "origin \"\(clientData.origin)\" is not an allowed origin")
        }
        guard !clientData.crossOrigin || self.policy.allowCrossOrigin else {
            throw WebAuthnError(code: .crossOriginNotAllowed, reason: "clientDataJSON says crossOrigin: true and the policy refuses it")
        }
        if let topOrigin = clientData.topOrigin {
            guard self.policy.allowedTopOrigins.contains(topOrigin) else {
                throw WebAuthnError(code: .topOriginNotAllowed, reason: "topOrigin \"\(topOrigin)\" is not an allowed top origin")
            }
        }
    }

    /// §7.1 steps 13–16, §7.2 steps 15–18.
    private func checkAuthenticatorData(_ authenticatorData: WebAuthnAuthenticatorData) throws(WebAuthnError) {
        guard bytesMatch(authenticatorData.relyingPartyIDHash, self.relyingPartyIDHash) else {
            throw WebAuthnError(code: .rpIDMismatch, reason: "rpIdHash is not SHA-256(\"\(self.policy.relyingPartyID)\")")
        }
        guard authenticatorData.userPresent else {
            throw WebAuthnError(code: .userNotPresent, reason: "the UP flag is not set")
        }
        guard authenticatorData.userVerified || !self.policy.requireUserVerification else {
            throw WebAuthnError(code: .userNotVerified, reason: "user verification is required and the UV flag is not set")
        }
        guard authenticatorData.backupEligible || !authenticatorData.backedUp else {
            throw WebAuthnError(code: .backupStateInvalid, reason: "the BS flag is set without the BE flag")
        }
    }
}
