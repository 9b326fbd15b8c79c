//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
import CanonicalJSON
public import Crypto
import FormAttestForm
import FormAttestTokens
import Foundation
import WebAuthn
public import X509

/// An ``EvidenceRecord`` signed by the server: a JWS (RFC 7515) in flattened JSON serialization,
/// ES256, whose payload is the record's RFC 8785 bytes.
///
/// Any JOSE library holding the server's JWKS can check the server's signature; ``verify(_:signers:trustAnchors:receiptTrustAnchors:clientData:expecting:)``
/// checks it and then re-verifies, at the recorded times, everything the device signed. A record's
/// id is base64url(SHA-256 of its payload): the same record always has the same id.
public enum SignedEvidence {
    /// The protected header's `typ`.
    public static let type = "formattest-evidence+json"
    /// The largest envelope read (a record is about 7 KiB: the attestation object is most of it).
    public static let maximumSize = 1 << 20
    /// The deepest a record nests (version 3: record, passkey, policy, origins).
    static let maximumRecordDepth = 5

    /// A record with its server signature.
    public struct Signed: Sendable {
        /// The envelope's bytes (canonical JSON, then a newline): what an archive file holds.
        public var bytes: [UInt8]
        /// base64url(SHA-256 of the payload).
        public var id: String
        /// The record's RFC 8785 bytes, which the envelope signs: an evidence log's leaf.
        public var payload: [UInt8]
    }

    /// A server public key, as ``signers(jwks:)`` returns them by `kid`.
    public typealias SignerKey = P256.Signing.PublicKey

    /// What the signed client data must be.
    public enum ClientData: Sendable {
        /// A FormAttest form (what the service records): canonical, for the record's user, its
        /// timestamp within the record's policy window.
        case form
        /// Any bytes: only the device's signature over their hash is checked (a record assembled
        /// from another App Attest deployment's recordings, whose client data is not a form).
        case opaque
    }

    /// What the verifying party expects, beyond what the record says of itself.
    public struct Expectations: Sendable {
        /// The record's app id must be one of these (nil: any).
        public var appIDs: [String]?
        /// The record's environment must be one of these (nil: any).
        public var environments: Set<AppAttestEnvironment>?

        public init(appIDs: [String]? = nil, environments: Set<AppAttestEnvironment>? = nil) {
            self.appIDs = appIDs
            self.environments = environments
        }
    }

    /// A verified record.
    public struct Verified: Sendable {
        public var record: EvidenceRecord
        public var id: String
        /// The `kid` (RFC 7638 thumbprint) of the server key that signed it.
        public var signer: String
        /// Whether the client data was checked as a form (``ClientData/form``).
        public var formChecked: Bool
        /// For a record with a passkey: whether its registration's attestation chain reached one
        /// of the passkey trust anchors given; nil without a passkey, or for a format without
        /// certificates (`none`, packed self attestation).
        public var passkeyAttestationAnchored: Bool? = nil
    }

    /// Signs a record with the server's current key.
    public static func sign(_ record: EvidenceRecord, with key: P256.Signing.PrivateKey) throws -> Signed {
        let payload = record.json.canonicalBytes
        let jws = try JWS.es256(payload: payload, key: key, kid: SigningKeys.thumbprint(key.publicKey), type: Self.type)
        let envelope = JSONValue.object(
            JSONObject(constantMembers: [
                ("payload", .string(JSONString(jws.payload))),
                ("protected", .string(JSONString(jws.protected))),
                ("signature", .string(JSONString(jws.signature))),
            ])
        )
        return Signed(bytes: envelope.canonicalBytes + [0x0A], id: Self.id(ofPayload: payload), payload: payload)
    }

    static func id(ofPayload payload: [UInt8]) -> String {
        Base64URL.encode(SHA256.hash(data: payload))
    }

    /// The server keys of a JWKS document (as `formattest keys jwks` prints it), by `kid`. Only
    /// P-256 keys whose `kid` is their own thumbprint are taken: a `kid` cannot be borrowed.
    /// - Throws: ``EvidenceError/Code/unknownSigner`` when the document is not a JWKS.
    public static func signers(jwks bytes: some Collection<UInt8>) throws(EvidenceError) -> [String: P256.Signing.PublicKey] {
        let document: JSONValue
        do {
            document = try CanonicalJSON.parse(bytes, limits: CanonicalJSON.Limits(maximumSize: Self.maximumSize, maximumDepth: 8))
        } catch {
            throw EvidenceError(code: .unknownSigner, reason: "the JWKS is not JSON: \(error)")
        }
        guard case .array(let keys)? = document["keys"] else {
            throw EvidenceError(code: .unknownSigner, reason: "the JWKS has no keys array")
        }
        var signers: [String: P256.Signing.PublicKey] = [:]
        for key in keys {
            guard key["kty"]?.stringValue == "EC", key["crv"]?.stringValue == "P-256", let kid = key["kid"]?.stringValue,
                let x = key["x"]?.stringValue.flatMap(StrictBase64URL.decode), let y = key["y"]?.stringValue.flatMap(StrictBase64URL.decode),
                x.count == 32, y.count == 32, let publicKey = try? P256.Signing.PublicKey(x963Representation: [0x04] + x + y),
                SigningKeys.thumbprint(publicKey) == kid
            else { continue }
            signers[kid] = publicKey
        }
        return signers
    }

    /// Verifies a signed record offline: the server's signature, the record's form, the key's
    /// attestation to one of `trustAnchors` at its recorded time, and that the device signed the
    /// form's hash (the attestation itself, or the assertion at the recorded counter).
    ///
    /// - Parameters:
    ///   - envelope: the file's bytes.
    ///   - signers: the server's public keys by `kid` (``signers(jwks:)``): every key that ever
    ///     signed records must be kept, as old tokens' keys leave the published JWKS.
    ///   - trustAnchors: the roots to verify attestations against (Apple's App Attestation root);
    ///     only those the record's policy names are used.
    ///   - receiptTrustAnchors: the roots the key's receipt must verify to (Apple Root CA - G3).
    ///     The receipt is the one part of an attestation object that its certificate's nonce does
    ///     not cover; Apple's own signature on it does, so it must verify too.
    ///   - clientData: whether the signed bytes must be a FormAttest form (the default).
    ///   - expectations: the app ids and environments the verifying party accepts. The record's
    ///     own policy is the server's statement; these are the verifier's.
    ///   - registrations: where a version-2 record's key registration is found (its bytes are
    ///     checked against the record's reference); unused for version 1.
    ///   - passkeyTrustAnchors: roots for a passkey registration's attestation chain (vendor roots
    ///     such as Apple's WebAuthn root or Yubico's). With none, the statement's signatures are
    ///     still checked and ``Verified/passkeyAttestationAnchored`` says it is not anchored; with
    ///     some, a chain that reaches none of them is refused.
    /// - Throws: ``EvidenceError`` naming the first step that failed.
    public static func verify(
        _ envelope: some Collection<UInt8>,
        signers: [String: P256.Signing.PublicKey],
        trustAnchors: [Certificate] = AppAttestPolicy.appleTrustAnchors,
        receiptTrustAnchors: [Certificate] = AppAttestPolicy.appleReceiptTrustAnchors,
        clientData: ClientData = .form,
        expecting expectations: Expectations = Expectations(),
        registrations: EvidenceRecord.RegistrationResolver? = nil,
        passkeyTrustAnchors: [Certificate] = []
    ) async throws(EvidenceError) -> Verified {
        let (payload, signer) = try Self.checkServerSignature(envelope, signers: signers)
        return try await Self.verifyRecord(
            payload: payload, signer: signer, trustAnchors: trustAnchors, receiptTrustAnchors: receiptTrustAnchors, clientData: clientData,
            expecting: expectations, registrations: registrations, passkeyTrustAnchors: passkeyTrustAnchors)
    }

    /// The steps after the server's signature (or, for a logged record, after the log's
    /// checkpoint): the record, its policy, the form and the device's signatures.
    static func verifyRecord(
        payload: [UInt8], signer: String, trustAnchors: [Certificate], receiptTrustAnchors: [Certificate], clientData: ClientData,
        expecting expectations: Expectations, registrations: EvidenceRecord.RegistrationResolver?, passkeyTrustAnchors: [Certificate] = []
    ) async throws(EvidenceError) -> Verified {
        let record = try Self.record(payload: payload, registrations: registrations)
        let anchors = try Self.checkPolicy(record, trustAnchors: trustAnchors, expectations: expectations)
        if case .form = clientData { try Self.checkForm(record) }
        if record.signedByAppAttest {
            try await Self.checkDeviceSignatures(record, anchors: anchors, receiptAnchors: receiptTrustAnchors)
        }
        var verified = Verified(record: record, id: Self.id(ofPayload: payload), signer: signer, formChecked: clientData == .form)
        if let passkey = record.passkey {
            verified.passkeyAttestationAnchored = try await Self.checkPasskey(passkey, of: record, anchors: passkeyTrustAnchors)
        }
        return verified
    }

    // MARK: - Steps

    static func checkServerSignature(
        _ envelope: some Collection<UInt8>,
        signers: [String: P256.Signing.PublicKey]
    ) throws(EvidenceError) -> (payload: [UInt8], signer: String) {
        func malformed(_ reason: String) -> EvidenceError { EvidenceError(code: .malformedEnvelope, reason: reason) }
        let document: JSONValue
        do {
            document = try CanonicalJSON.parse(envelope, limits: CanonicalJSON.Limits(maximumSize: Self.maximumSize, maximumDepth: 4))
        } catch {
            throw malformed("the evidence is not JSON: \(error)")
        }
        guard case .object(let members) = document, members.members.count == 3,
            let protected = document["protected"]?.stringValue, let encodedPayload = document["payload"]?.stringValue,
            let encodedSignature = document["signature"]?.stringValue
        else { throw malformed("the evidence is not a flattened JWS {protected, payload, signature}") }
        guard let headerBytes = StrictBase64URL.decode(protected),
            case .object(let header)? = try? CanonicalJSON.parse(headerBytes, limits: CanonicalJSON.Limits(maximumSize: 4096, maximumDepth: 2)),
            header.members.count == 3, header["alg"]?.stringValue == "ES256", header["typ"]?.stringValue == Self.type,
            let kid = header["kid"]?.stringValue
        else { throw malformed("the protected header is not {alg: ES256, kid, typ: \(Self.type)}") }
        guard let signer = signers[kid] else {
            throw EvidenceError(code: .unknownSigner, reason: "no server key with kid \(kid) is given (pass the JWKS that held it)")
        }
        guard let signatureBytes = StrictBase64URL.decode(encodedSignature), let payload = StrictBase64URL.decode(encodedPayload),
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes),
            signer.isValidSignature(signature, for: Array("\(protected).\(encodedPayload)".utf8))
        else {
            throw EvidenceError(code: .serverSignatureInvalid, reason: "the server's signature over the record does not verify with key \(kid)")
        }
        return (payload, kid)
    }

    private static func record(payload: [UInt8], registrations: EvidenceRecord.RegistrationResolver?) throws(EvidenceError) -> EvidenceRecord {
        let json: JSONValue
        do {
            json = try CanonicalJSON.parse(
                payload, limits: CanonicalJSON.Limits(maximumSize: Self.maximumSize, maximumDepth: Self.maximumRecordDepth, exactNumbers: true))
        } catch {
            throw .malformed("the payload is not JSON: \(error)")
        }
        guard json.canonicalBytes == payload else { throw .malformed("the payload is not in its RFC 8785 form") }
        return try EvidenceRecord(json: json, registrations: registrations)
    }

    /// The anchors to verify with: those given that the record's policy names.
    private static func checkPolicy(_ record: EvidenceRecord, trustAnchors: [Certificate], expectations: Expectations) throws(EvidenceError)
        -> [Certificate]
    {
        func mismatch(_ reason: String) -> EvidenceError { EvidenceError(code: .policyMismatch, reason: reason) }
        guard record.signedByAppAttest else {
            // A passkey alone: no app id or environment to expect, and no App Attest anchor used.
            if expectations.appIDs != nil || expectations.environments != nil {
                throw mismatch("a passkey alone signed the form: the record names no app id or environment, and the verifier expects one")
            }
            return []
        }
        if let appIDs = expectations.appIDs, !appIDs.contains(record.appID) {
            throw mismatch("the app id \(record.appID) is not one the verifier expects")
        }
        if let environments = expectations.environments, !environments.contains(record.environment) {
            throw mismatch("the \(record.environment.rawValue) environment is not one the verifier expects")
        }
        guard record.policy.appIDs.contains(record.appID) else { throw mismatch("the app id \(record.appID) is not in the record's policy") }
        guard record.policy.environments.contains(record.environment) else {
            throw mismatch("the \(record.environment.rawValue) environment is not in the record's policy")
        }
        guard record.keyAttestation.verifiedAt <= record.verifiedAt else {
            throw mismatch("the key's attestation was verified after the form was accepted")
        }
        let anchors = trustAnchors.filter { anchor in
            record.policy.trustAnchorKeyDigests.contains(EvidenceRecord.Policy.keyDigest(of: anchor))
        }
        guard !anchors.isEmpty else { throw mismatch("none of the given trust anchors is one the record's policy names") }
        return anchors
    }

    private static func checkForm(_ record: EvidenceRecord) throws(EvidenceError) {
        func invalid(_ reason: String) -> EvidenceError { EvidenceError(code: .formInvalid, reason: reason) }
        let form: SignedForm
        do {
            form = try SignedForm(jsonBytes: record.form)
        } catch {
            throw invalid("the form is not a signed form: \(error)")
        }
        guard form.canonicalBytes == record.form else { throw invalid("the form is not in its RFC 8785 form") }
        // The service requires a form's username to be the caller's: a form without one was not
        // accepted by it.
        guard let username = form.username, Array(username.utf8) == Array(record.username.utf8) else {
            throw invalid("the form is not for the record's user")
        }
        if record.policy.sessionBound, form.value[SignedForm.Field.session]?.stringValue == nil {
            throw invalid("the policy bound sessions, and the form names none")
        }
        if record.policy.requireServerChallenge, form.challenge == nil {
            throw invalid("the policy required a server challenge, and the form answers none")
        }
        let age = record.verifiedAt.timeIntervalSince(form.timestamp)
        guard age <= Double(record.policy.formMaximumAge), -age <= Double(record.policy.formMaximumFutureSkew) else {
            throw invalid("the form's timestamp is outside the policy's window at the record's time")
        }
    }

    private static func checkDeviceSignatures(_ record: EvidenceRecord, anchors: [Certificate], receiptAnchors: [Certificate])
        async throws(EvidenceError)
    {
        let verifier: AppAttestVerifier
        do {
            verifier = try AppAttestVerifier(
                policy: AppAttestPolicy(
                    appIDs: [record.appID], environments: [record.environment], trustAnchors: anchors, receiptTrustAnchors: receiptAnchors,
                    requireValidReceipt: true
                )
            )
        } catch {
            throw .malformed("the record's app id makes no policy: \(error)")
        }
        let attestation: VerifiedAttestation
        do {
            attestation = try await verifier.verifyAttestation(
                record.keyAttestation.object,
                keyID: record.keyID,
                clientDataHash: record.keyAttestation.clientDataHash,
                at: record.keyAttestation.verifiedAt
            )
        } catch {
            let code = error.code.identifier
            throw EvidenceError(code: .keyAttestationInvalid, reason: "the key's attestation does not verify: \(error)", verifierCode: code)
        }
        guard let assertion = record.assertion else {
            guard record.keyAttestation.clientDataHash == record.formHash else {
                throw EvidenceError(code: .formNotSigned, reason: "the key's attestation was not made over the form's hash")
            }
            guard record.counter == 0 else { throw EvidenceError(code: .counterMismatch, reason: "an attestation record's counter is 0") }
            return
        }
        let verified: VerifiedAssertion
        do {
            verified = try verifier.verifyAssertion(
                assertion, publicKey: attestation.publicKey, clientDataHash: record.formHash, previousCounter: 0, appID: record.appID)
        } catch {
            let code = error.code.identifier
            throw EvidenceError(
                code: .formNotSigned, reason: "the assertion does not sign the form's hash with the attested key: \(error)", verifierCode: code)
        }
        guard verified.counter == record.counter else {
            throw EvidenceError(code: .counterMismatch, reason: "the assertion's counter is \(verified.counter), the record says \(record.counter)")
        }
    }

    /// Re-runs the WebAuthn verifier on the record's passkey: its registration at its recorded
    /// time under the recorded policy, then the assertion over the form's hash with the key the
    /// registration attested, for the registered credential and user, at the recorded previous
    /// sign count; then the record's claims against what the signed authenticator data says.
    /// - Returns: whether the registration's chain reached one of `anchors` (nil: no certificate).
    private static func checkPasskey(_ passkey: PasskeyEvidence, of record: EvidenceRecord, anchors: [Certificate]) async throws(EvidenceError)
        -> Bool?
    {
        guard passkey.registration.verifiedAt <= record.verifiedAt else {
            throw EvidenceError(code: .policyMismatch, reason: "the passkey's registration was verified after the form was accepted")
        }
        let verifier: WebAuthnVerifier
        do {
            verifier = try WebAuthnVerifier(policy: passkey.policy.verifierPolicy(anchors: anchors))
        } catch {
            throw .malformed("record.passkey.policy makes no verifier policy: \(error.reason)")
        }
        let registration: VerifiedRegistration
        do {
            registration = try await verifier.verifyRegistration(
                RegistrationResponse(
                    rawID: passkey.credentialID, clientDataJSON: passkey.registration.clientDataJSON,
                    attestationObject: passkey.registration.attestationObject),
                challenge: passkey.registration.challenge, at: passkey.registration.verifiedAt)
        } catch {
            throw EvidenceError(
                code: .passkeyRegistrationInvalid, reason: "the passkey's registration does not verify: \(error)", verifierCode: error.code.identifier
            )
        }
        guard passkey.assertion.previousSignCount >= registration.signCount else {
            throw EvidenceError(
                code: .counterMismatch,
                reason:
                    "the recorded previous sign count \(passkey.assertion.previousSignCount) is below the registration's \(registration.signCount)")
        }
        let assertion = passkey.assertion
        let verified: VerifiedAuthentication
        do {
            verified = try verifier.verifyAuthentication(
                AuthenticationResponse(
                    rawID: assertion.credentialID, clientDataJSON: assertion.clientDataJSON, authenticatorData: assertion.authenticatorData,
                    signature: assertion.signature, userHandle: assertion.userHandle),
                publicKey: registration.publicKey, challenge: record.formHash, previousSignCount: assertion.previousSignCount,
                credentialID: passkey.credentialID, userHandle: passkey.userHandle)
        } catch {
            throw EvidenceError(
                code: .passkeyAssertionInvalid, reason: "the passkey's assertion does not sign the form's hash: \(error)",
                verifierCode: error.code.identifier)
        }
        guard verified.signCount == assertion.signCount else {
            throw EvidenceError(
                code: .counterMismatch, reason: "the assertion's sign count is \(verified.signCount), the record says \(assertion.signCount)")
        }
        func claim(_ name: String, _ claimed: Bool, _ signed: Bool) throws(EvidenceError) {
            guard claimed == signed else {
                throw EvidenceError(
                    code: .passkeyClaimMismatch, reason: "the record says \(name) \(claimed), the signed authenticator data's flag says \(signed)")
            }
        }
        try claim("userVerified", assertion.userVerified, verified.userVerified)
        try claim("backupEligible", assertion.backupEligible, verified.backupEligible)
        try claim("backedUp", assertion.backedUp, verified.backedUp)
        guard verified.userVerified || !passkey.policy.requireUserVerification else {
            throw EvidenceError(
                code: .passkeyClaimMismatch, reason: "the record's policy required user verification, and the assertion's UV flag is off")
        }
        return registration.attestationAnchored
    }
}
