//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Crypto
public import Foundation
import SwiftASN1
@_spi(FixedExpiryValidationTime) import X509

/// Verifies App Attest attestations and assertions against a ``AppAttestPolicy``.
///
/// Pure: no IO, no clock and no randomness. The verification time is a parameter, replay and
/// counter state belong to the caller (the flows), and each failed step throws an
/// ``AppAttestError`` whose code names it. The steps follow Apple's "Validating apps that connect
/// to your server", numbered as there.
public struct AppAttestVerifier: Sendable {
    /// The policy this verifier enforces.
    public let policy: AppAttestPolicy
    private let relyingParties: [(appID: String, hash: [UInt8])]
    /// Verified intermediates and receipt signers (shared by copies of this verifier).
    let chainCache = VerifiedChainCache()
    /// SHA-256 over each anchor set's DER, in order: part of every cache key.
    private let anchorsDigest: [UInt8]
    private let receiptAnchorsDigest: [UInt8]

    /// Which trust anchors a chain is validated against.
    enum Anchors {
        /// ``AppAttestPolicy/trustAnchors``: the attestation's x5c.
        case attestation
        /// ``AppAttestPolicy/receiptTrustAnchors``: the receipt's signer.
        case receipt
    }

    /// How many verified intermediates this verifier has cached.
    package var cachedIntermediateCount: Int { self.chainCache.count }

    /// Creates a verifier.
    ///
    /// - Throws: ``AppAttestError/Code/invalidPolicy`` when the policy names no app id or no trust anchor.
    public init(policy: AppAttestPolicy) throws(AppAttestError) {
        guard !policy.appIDs.isEmpty else {
            throw AppAttestError(code: .invalidPolicy, reason: "the policy accepts no app id")
        }
        guard !policy.trustAnchors.isEmpty else {
            throw AppAttestError(code: .invalidPolicy, reason: "the policy has no trust anchor")
        }
        self.policy = policy
        self.relyingParties = policy.appIDs.map { ($0, Array(SHA256.hash(data: Array($0.utf8)))) }
        self.anchorsDigest = try Self.digest(of: policy.trustAnchors)
        self.receiptAnchorsDigest = try Self.digest(of: policy.receiptTrustAnchors)
    }

    private static func digest(of anchors: [Certificate]) throws(AppAttestError) -> [UInt8] {
        var digest = SHA256()
        for anchor in anchors {
            var serializer = DER.Serializer()
            do {
                try serializer.serialize(anchor)
            } catch {
                throw AppAttestError(code: .invalidPolicy, reason: "a trust anchor cannot be serialized")
            }
            digest.update(data: serializer.serializedBytes)
        }
        return Array(digest.finalize())
    }

    // MARK: - Attestation

    /// Verifies an attestation object for a new key.
    ///
    /// - Parameters:
    ///   - attestationObject: the CBOR attestation object from `attestKey`.
    ///   - keyID: the keyId the app reported (32 bytes: SHA-256 of the public key).
    ///   - clientDataHash: the exact bytes the app passed to `attestKey` (opaque; 32 in form flows).
    ///   - time: the time to verify the certificate chain at (the caller's "now", or a pinned time).
    /// - Returns: the attested key and what the attestation says about it.
    /// - Throws: ``AppAttestError`` naming the first step that failed.
    public func verifyAttestation(
        _ attestationObject: some Collection<UInt8>,
        keyID: some Collection<UInt8>,
        clientDataHash: some Collection<UInt8>,
        at time: Date
    ) async throws(AppAttestError) -> VerifiedAttestation {
        let clientDataHash = try Self.checkedClientDataHash(clientDataHash)
        let keyID = Array(keyID)
        let object = try AttestationObject(cborEncoded: attestationObject)
        let authData = object.authenticatorData
        guard let credential = authData.attestedCredentialData else {
            // Unreachable: parsing with kind .attestation guarantees attested credential data.
            throw AppAttestError.malformedAuthenticatorData("attested credential data is missing")
        }

        // Step 1: x5c = [credCert, intermediate] chains to a trusted root at `time`.
        let (leaf, intermediate) = try object.statement.parsedCertificates()
        try Self.checkValidity(of: leaf, role: "credential certificate", at: time)
        try Self.checkValidity(of: intermediate, role: "intermediate", at: time)
        try await self.validateChain(
            leaf: leaf,
            intermediate: intermediate,
            intermediateDER: object.statement.intermediateCertificate,
            anchors: .attestation,
            at: time
        )

        // Steps 2-3: nonce = SHA256(authData || clientDataHash).
        var hasher = SHA256()
        hasher.update(data: authData.rawValue)
        hasher.update(data: clientDataHash)
        let nonce = hasher.finalize()

        // Step 4: the nonce equals the octet string in extension 1.2.840.113635.100.8.2.
        let certifiedNonce = try leaf.appAttestNonce()
        guard constantTimeEquals(nonce, certifiedNonce) else {
            throw AppAttestError(
                code: .nonceMismatch,
                reason: "SHA256(authData || clientDataHash) differs from the credential certificate's nonce"
            )
        }

        // Step 5: SHA256(credCert public key, uncompressed point) == keyId.
        guard let publicKey = P256.Signing.PublicKey(leaf.publicKey) else {
            throw AppAttestError(code: .malformedCertificate, reason: "the credential certificate's key is not P-256")
        }
        let point = Array(publicKey.x963Representation)
        guard constantTimeEquals(SHA256.hash(data: point), keyID) else {
            throw AppAttestError(code: .keyIDMismatch, reason: "SHA256(credential public key) differs from the keyId")
        }

        // Step 6: rpIdHash == SHA256(appId).
        let appID = try self.matchAppID(authData.relyingPartyIDHash)

        // Step 7: the counter is 0.
        guard authData.signCount == 0 else {
            throw AppAttestError(code: .counterNotZero, reason: "the attestation's counter is \(authData.signCount)")
        }

        // Step 8: the aaguid names an environment the policy accepts.
        guard let environment = AppAttestEnvironment(aaguid: credential.aaguid) else {
            throw AppAttestError(code: .aaguidInvalid, reason: "aaguid \(hex(credential.aaguid)) is not App Attest's")
        }
        guard self.policy.environments.contains(environment) else {
            throw AppAttestError(
                code: .environmentNotAllowed,
                reason: "the \(environment.rawValue) environment is not accepted by this policy"
            )
        }

        // Step 9: credentialId == keyId, and the COSE key is the certificate's key.
        guard constantTimeEquals(credential.credentialID, keyID) else {
            throw AppAttestError(code: .credentialIDMismatch, reason: "authData's credentialId differs from the keyId")
        }
        guard constantTimeEquals(credential.publicKey.x963Representation, point) else {
            throw AppAttestError(
                code: .publicKeyMismatch,
                reason: "authData's COSE key differs from the credential certificate's key"
            )
        }

        // iOS 27 / macOS 27: the signals of the extension map and the key's access control.
        try self.checkSignals(authData.extensions)
        let accessControl = leaf.appAttestAccessControl
        try self.checkAccessControl(accessControl)

        // Not one of Apple's steps: the receipt is checked and reported; required only by policy.
        let receiptCheck = await self.checkAttestationReceipt(
            object.statement.receipt,
            expecting: ReceiptExpectation(
                appID: appID,
                attestedKey: .certificate(object.statement.leafCertificate),
                clientHash: clientDataHash,
                type: .attest
            ),
            at: time
        )
        if self.policy.requireValidReceipt, let error = receiptCheck.error {
            throw error
        }

        return VerifiedAttestation(
            keyID: keyID,
            publicKey: publicKey,
            appID: appID,
            environment: environment,
            counter: authData.signCount,
            receipt: object.statement.receipt,
            receiptCheck: receiptCheck,
            osVersion: leaf.appAttestOSVersion,
            extensions: authData.extensions,
            accessControl: accessControl,
            authenticatorData: authData,
            certificateChain: [leaf, intermediate],
            verificationTime: time
        )
    }

    // MARK: - Assertion

    /// Verifies an assertion made with an attested key.
    ///
    /// - Parameters:
    ///   - assertion: the CBOR assertion from `generateAssertion`.
    ///   - publicKey: the key stored when the keyId was attested.
    ///   - clientDataHash: the bytes the app passed to `generateAssertion` (SHA256(clientData)).
    ///   - previousCounter: the counter stored for this key (0 right after attestation); the
    ///     assertion's counter must be strictly greater.
    ///   - expectedAppID: the app id the key was attested for. When given, rpIdHash must be SHA256 of
    ///     exactly this app id (and the policy must still accept it), not of any accepted one: a
    ///     key attested for one app cannot sign for another app of the same deployment.
    /// - Returns: the signed counter, to be stored by compare-and-set.
    /// - Throws: ``AppAttestError`` naming the first step that failed.
    public func verifyAssertion(
        _ assertion: some Collection<UInt8>,
        publicKey: P256.Signing.PublicKey,
        clientDataHash: some Collection<UInt8>,
        previousCounter: UInt32,
        appID expectedAppID: String? = nil
    ) throws(AppAttestError) -> VerifiedAssertion {
        let clientDataHash = try Self.checkedClientDataHash(clientDataHash)
        let object = try AssertionObject(cborEncoded: assertion)
        let authData = object.authenticatorData

        // Steps 1-2: nonce = SHA256(authenticatorData || clientDataHash).
        var hasher = SHA256()
        hasher.update(data: authData.rawValue)
        hasher.update(data: clientDataHash)
        let nonce = hasher.finalize()

        // Step 3: the signature is ECDSA P-256 with SHA-256 over the nonce, by the attested key.
        let signature: P256.Signing.ECDSASignature
        do {
            signature = try P256.Signing.ECDSASignature(derRepresentation: object.signature)
        } catch {
            throw AppAttestError.malformedAssertion("the signature is not a DER ECDSA signature")
        }
        guard publicKey.isValidSignature(signature, for: Array(nonce)) else {
            throw AppAttestError(code: .signatureInvalid, reason: "the signature does not verify with the attested key")
        }

        // Step 4: rpIdHash == SHA256(appId), the key's own app id when it is known.
        let appID = try self.matchAppID(authData.relyingPartyIDHash)
        if let expectedAppID, appID != expectedAppID {
            throw AppAttestError(
                code: .appIDMismatch,
                reason: "rpIdHash is SHA256 of \(appID), but the key was attested for \(expectedAppID)"
            )
        }

        // Step 5: the counter is strictly greater than the stored one.
        guard authData.signCount > previousCounter else {
            throw AppAttestError(
                code: .counterNotIncreasing,
                reason: "counter \(authData.signCount) is not greater than the stored \(previousCounter)"
            )
        }

        // iOS 27 / macOS 27: the signals the assertion carries (whatever its AT and ED flags say).
        try self.checkSignals(authData.extensions)

        return VerifiedAssertion(
            counter: authData.signCount,
            appID: appID,
            publicKey: publicKey,
            extensions: authData.extensions,
            authenticatorData: authData
        )
    }

    // MARK: - Steps shared by both

    private func matchAppID(_ relyingPartyIDHash: [UInt8]) throws(AppAttestError) -> String {
        for party in self.relyingParties where constantTimeEquals(party.hash, relyingPartyIDHash) {
            return party.appID
        }
        throw AppAttestError(
            code: .appIDMismatch,
            reason: "rpIdHash is not SHA256 of an accepted app id (\(self.policy.appIDs.joined(separator: ", ")))"
        )
    }

    private static func checkedClientDataHash(_ bytes: some Collection<UInt8>) throws(AppAttestError) -> [UInt8] {
        guard !bytes.isEmpty, bytes.count <= AppAttestLimits.maximumClientDataHashSize else {
            throw AppAttestError(
                code: .invalidClientDataHash,
                reason: "clientDataHash is \(bytes.count) bytes; 1 to \(AppAttestLimits.maximumClientDataHashSize) expected"
            )
        }
        return Array(bytes)
    }

    // MARK: - Step 1 helpers

    /// Reports expiry with its own code before path building, which only says "no valid path".
    static func checkValidity(
        of certificate: Certificate,
        role: String,
        at time: Date,
        notYetValid: AppAttestError.Code = .certificateNotYetValid,
        expired: AppAttestError.Code = .certificateExpired
    ) throws(AppAttestError) {
        guard time >= certificate.notValidBefore else {
            throw AppAttestError(code: notYetValid, reason: "the \(role) is valid from \(certificate.notValidBefore), after \(time)")
        }
        guard time <= certificate.notValidAfter else {
            throw AppAttestError(code: expired, reason: "the \(role) expired at \(certificate.notValidAfter), before \(time)")
        }
    }

    /// Path validation for step 1 and for receipts. A cached intermediate (verified to a trust
    /// anchor before, and valid with it at `time`) serves as the anchor of the leaf's path, so only
    /// the leaf's signature is checked; otherwise the whole path is validated and, on success only,
    /// the intermediate is cached for the window in which it and its anchor are both valid.
    ///
    /// - Returns: the window in which every certificate of the verified path is valid.
    @discardableResult
    func validateChain(
        leaf: Certificate,
        intermediate: Certificate,
        intermediateDER: [UInt8],
        anchors: Anchors,
        at time: Date
    ) async throws(AppAttestError) -> ClosedRange<Date> {
        let (trustAnchors, anchorsDigest) = self.trustAnchors(anchors)
        let key = VerifiedChainCache.Key(intermediate: intermediateDER, anchors: anchorsDigest)
        let cached = self.chainCache.entry(of: key, at: time)
        var verifier = Verifier(rootCertificates: cached?.asAnchor ?? CertificateStore(trustAnchors)) {
            RFC5280Policy(fixedExpiryValidationTime: time)
        }
        let result = await verifier.validate(leaf: leaf, intermediates: CertificateStore(cached != nil ? [] : [intermediate]))
        guard case .validCertificate(let chain) = result else {
            throw AppAttestError(
                code: .certificateChainInvalid,
                reason: "x5c does not chain to a trusted App Attest root at \(time)"
            )
        }
        let leafWindow = leaf.notValidBefore...max(leaf.notValidBefore, leaf.notValidAfter)
        if let cached {
            return leafWindow.clamped(to: cached.window)
        }
        // Cache only a full path through this exact intermediate: [leaf, intermediate, anchor].
        let start = chain.map(\.notValidBefore).max() ?? time
        let end = chain.map(\.notValidAfter).min() ?? time
        if chain.count == 3, chain[1] == intermediate {
            let root = chain[2]
            let intermediateStart = max(intermediate.notValidBefore, root.notValidBefore)
            let intermediateEnd = min(intermediate.notValidAfter, root.notValidAfter)
            if intermediateStart <= intermediateEnd {
                self.chainCache.insert(key, certificate: intermediate, window: intermediateStart...intermediateEnd)
            }
        }
        return start <= end ? start...end : time...time
    }

    func trustAnchors(_ anchors: Anchors) -> (certificates: [Certificate], digest: [UInt8]) {
        switch anchors {
        case .attestation: (self.policy.trustAnchors, self.anchorsDigest)
        case .receipt: (self.policy.receiptTrustAnchors, self.receiptAnchorsDigest)
        }
    }
}
