//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttestSimulator
import CanonicalJSON
import Crypto
import FormAttestEvidence
import FormAttestForm
import FormAttestTestSupport
import Foundation
import RFC3339
import SwiftASN1
import Testing
import TransparencyLog
import WebAuthn
import X509

/// Version-3 records: a form confirmed with a passkey, alone or beside an App Attest assertion.
/// The passkey is the software authenticator the flows' and the service's tests use; each negative
/// test changes one thing of a valid record and has the server sign it again, so that the refusal
/// is the passkey check's, not the server signature's.
struct PasskeyEvidenceTests {
    let base: EvidenceTests
    /// The registration's one-time challenge.
    static let registrationChallenge = [UInt8](repeating: 0x11, count: 32)
    static let userHandle: [UInt8] = [7, 7, 7, 7]

    init() throws {
        self.base = try EvidenceTests()
    }

    var now: Date { self.base.now }

    /// The passkey's part of a record over `form`: `device` registered an hour before, then signed
    /// the form. The claims are what the device's flags and counter say.
    func passkey(form: [UInt8], device: PasskeyDevice = PasskeyDevice(), requireUserVerification: Bool = true) throws -> PasskeyEvidence {
        var device = device
        device.userHandle = Self.userHandle
        let registration = try RegistrationResponse(json: device.register(challenge: Self.registrationChallenge))
        let previous = device.signCount
        let assertion = try AuthenticationResponse(json: device.sign(challenge: Array(SHA256.hash(data: form))))
        return PasskeyEvidence(
            credentialID: device.credentialID,
            userHandle: Self.userHandle,
            registration: PasskeyEvidence.Registration(
                clientDataJSON: registration.clientDataJSON, attestationObject: registration.attestationObject,
                challenge: Self.registrationChallenge, verifiedAt: self.now.addingTimeInterval(-3600)),
            assertion: PasskeyEvidence.Assertion(
                credentialID: assertion.rawID, clientDataJSON: assertion.clientDataJSON, authenticatorData: assertion.authenticatorData,
                signature: assertion.signature, userHandle: assertion.userHandle, previousSignCount: previous, signCount: device.signCount,
                userVerified: device.flags & 0x04 != 0, backupEligible: device.flags & 0x08 != 0, backedUp: device.flags & 0x10 != 0),
            policy: PasskeyEvidence.Policy(PasskeyDevice.policy(), requireUserVerification: requireUserVerification)
        )
    }

    /// A form signed by the passkey alone.
    func passkeyRecord(device: PasskeyDevice = PasskeyDevice(), requireUserVerification: Bool = true) throws -> EvidenceRecord {
        let form = try self.base.form()
        return EvidenceRecord(
            passkeyOnly: try self.passkey(form: form, device: device, requireUserVerification: requireUserVerification), verifiedAt: self.now,
            username: "alice", form: form, policy: try self.base.policy())
    }

    /// A form signed by an App Attest assertion and the passkey.
    func bothRecord() throws -> EvidenceRecord {
        var record = try self.base.assertionRecord()
        record.passkey = try self.passkey(form: record.form)
        return record
    }

    func verify(_ record: EvidenceRecord) async throws(EvidenceError) -> SignedEvidence.Verified {
        let signed: SignedEvidence.Signed
        do {
            signed = try SignedEvidence.sign(record, with: self.base.serverKey)
        } catch {
            throw EvidenceError(code: .malformedEnvelope, reason: "not signed: \(error)")
        }
        return try await self.base.verify(signed.bytes)
    }

    /// `record` changed by `change`, signed again, is refused with `code` (and the verifier's own
    /// code, when given).
    func expect(
        _ code: EvidenceError.Code, verifierCode: WebAuthnError.Code? = nil, _ record: EvidenceRecord, _ comment: Comment,
        change: (inout EvidenceRecord) throws -> Void, sourceLocation: SourceLocation = #_sourceLocation
    ) async rethrows {
        var changed = record
        try change(&changed)
        #expect(changed != record, "\(comment): nothing changed", sourceLocation: sourceLocation)
        do {
            _ = try await self.verify(changed)
            Issue.record("accepted: \(comment)", sourceLocation: sourceLocation)
        } catch {
            #expect(error.code == code, "\(comment): \(error)", sourceLocation: sourceLocation)
            if let verifierCode {
                #expect(error.verifierCode == verifierCode.identifier, "\(comment): \(error)", sourceLocation: sourceLocation)
            }
        }
    }

    // MARK: - Accepted

    @Test("a form signed by a passkey alone, and by App Attest and a passkey together, verifies offline as version 3 and reads back equal")
    func passkeyRecordsVerify() async throws {
        let alone = try self.passkeyRecord()
        let verifiedAlone = try await self.verify(alone)
        #expect(verifiedAlone.record == alone)
        #expect(verifiedAlone.record.kind == .passkey && !verifiedAlone.record.signedByAppAttest)
        #expect(verifiedAlone.passkeyAttestationAnchored == nil, "a none attestation has no certificate")
        let payload = alone.json
        #expect(payload["version"] == .number(3))
        #expect(payload["amr"] == .array(["hwk", "user", "mfa"].map { .string(JSONString($0)) }))
        for member in ["keyId", "appId", "environment", "counter", "keyAttestation", "keyRegistration", "assertion"] {
            #expect(payload[member] == nil, "a passkey alone writes no \(member)")
        }

        let both = try self.bothRecord()
        let verifiedBoth = try await self.verify(both)
        #expect(verifiedBoth.record == both && verifiedBoth.record.kind == .assertion)
        #expect(both.json["amr"] == .array(["hwk", "user", "mfa"].map { .string(JSONString($0)) }))
        #expect(both.json["keyAttestation"] != nil && both.json["passkey"] != nil && both.json["counter"] == .number(7))

        // A synced passkey (BE and BS) states swk; without UV, no mfa.
        var synced = PasskeyDevice()
        synced.flags = 0x01 | 0x08 | 0x10
        let syncedRecord = try self.passkeyRecord(device: synced, requireUserVerification: false)
        #expect(syncedRecord.methodReferences == ["swk", "user"])
        #expect(try await self.verify(syncedRecord).record == syncedRecord)
    }

    @Test("a record without a passkey is still written and read as version 1 (and 2): no amr, no passkey member")
    func olderVersionsUnchanged() async throws {
        let record = try self.base.assertionRecord()
        #expect(record.version == 1 && record.json["version"] == .number(1))
        #expect(record.json["amr"] == nil && record.json["passkey"] == nil)
        #expect(try await self.verify(record).record == record)
        var referencing = record
        referencing.format = .referencingRegistration
        #expect(referencing.version == 2 && referencing.json["keyRegistration"] != nil)
        // With a passkey added, the same record is version 3 and still references its key's registration.
        referencing.passkey = try self.passkey(form: record.form)
        #expect(referencing.json["version"] == .number(3) && referencing.json["keyRegistration"] != nil && referencing.json["keyAttestation"] == nil)
        let payload = referencing.json.canonicalBytes
        #expect(try EvidenceRecord.registrationID(inPayload: payload) == KeyRegistration(of: referencing).id)
        let registration = KeyRegistration(of: referencing).bytes
        let verified = try await SignedEvidence.verify(
            try SignedEvidence.sign(referencing, with: self.base.serverKey).bytes, signers: self.base.signers, trustAnchors: self.base.anchors,
            receiptTrustAnchors: [self.base.authority.receiptAuthority.rootCertificate], registrations: { _ in registration })
        #expect(verified.record == referencing)
        #expect(try EvidenceRecord.registrationID(inPayload: try self.passkeyRecord().json.canonicalBytes) == nil)
    }

    // MARK: - The registration

    @Test("the passkey's registration is checked again: its challenge, origin and rpId, its time, its attestation object")
    func registrationChecks() async throws {
        let record = try self.passkeyRecord()
        await self.expect(.passkeyRegistrationInvalid, verifierCode: .challengeMismatch, record, "another registration challenge") {
            $0.passkey!.registration.challenge[0] ^= 1
        }
        await self.expect(.passkeyRegistrationInvalid, verifierCode: .originNotAllowed, record, "another origin in the policy") {
            $0.passkey!.policy.origins = ["https://other.example"]
        }
        await self.expect(.passkeyRegistrationInvalid, verifierCode: .rpIDMismatch, record, "another rpId in the policy") {
            $0.passkey!.policy.relyingPartyID = "other.example"
        }
        await self.expect(.passkeyRegistrationInvalid, verifierCode: .algorithmNotAllowed, record, "ES256 not among the policy's algorithms") {
            $0.passkey!.policy.algorithms = [COSEAlgorithm.edDSA.rawValue]
        }
        await self.expect(.passkeyRegistrationInvalid, verifierCode: .credentialIDMismatch, record, "another registered credential id") {
            $0.passkey!.credentialID[0] ^= 1
        }
        await self.expect(.passkeyRegistrationInvalid, verifierCode: .typeMismatch, record, "the assertion's clientDataJSON as the registration's") {
            $0.passkey!.registration.clientDataJSON = $0.passkey!.assertion.clientDataJSON
        }
        await self.expect(.passkeyRegistrationInvalid, verifierCode: .malformedAttestation, record, "the attestation object cut short") {
            $0.passkey!.registration.attestationObject.removeLast()
        }
        await self.expect(.policyMismatch, record, "the registration verified after the form was accepted") {
            $0.passkey!.registration.verifiedAt = $0.verifiedAt.addingTimeInterval(0.001)
        }
    }

    /// A certificate for `key`, valid over `validity`, issued by `issuer` (itself when nil).
    static func certificate(
        for key: P256.Signing.PublicKey, name: String, issuer: (key: P256.Signing.PrivateKey, name: DistinguishedName), authority: Bool,
        validity: ClosedRange<Date>
    ) throws -> Certificate {
        try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(key), notValidBefore: validity.lowerBound, notValidAfter: validity.upperBound,
            issuer: issuer.name, subject: try DistinguishedName { CommonName(name) }, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(authority ? BasicConstraints.isCertificateAuthority(maxPathLength: nil) : BasicConstraints.notCertificateAuthority)
            },
            issuerPrivateKey: .init(issuer.key))
    }

    @Test(
        "the registration's chain (fido-u2f): anchored to a passkey root given, refused when it reaches none given, verified but not anchored without one, at its recorded time"
    )
    func attestationChain() async throws {
        // Times from the real now: the certificates are valid from two hours before it.
        let validity = self.now.addingTimeInterval(-7200)...self.now.addingTimeInterval(86_400)
        let rootKey = P256.Signing.PrivateKey()
        let rootName = try DistinguishedName { CommonName("Passkey vendor test root") }
        let root = try Self.certificate(
            for: rootKey.publicKey, name: "Passkey vendor test root", issuer: (rootKey, rootName), authority: true, validity: validity)
        let attestationKey = P256.Signing.PrivateKey()
        let leaf = try Self.certificate(
            for: attestationKey.publicKey, name: "Passkey vendor test authenticator", issuer: (rootKey, rootName), authority: false,
            validity: validity)
        var serializer = DER.Serializer()
        try serializer.serialize(leaf)
        var device = PasskeyDevice()
        device.u2fAttestation = (attestationKey, serializer.serializedBytes)
        let record = try self.passkeyRecord(device: device)
        let signed = try SignedEvidence.sign(record, with: self.base.serverKey)
        func verify(_ bytes: [UInt8], anchors: [Certificate]) async throws(EvidenceError) -> SignedEvidence.Verified {
            try await SignedEvidence.verify(bytes, signers: self.base.signers, trustAnchors: [], passkeyTrustAnchors: anchors)
        }
        #expect(try await verify(signed.bytes, anchors: [root]).passkeyAttestationAnchored == true)
        #expect(try await verify(signed.bytes, anchors: []).passkeyAttestationAnchored == false)
        let otherKey = P256.Signing.PrivateKey()
        let otherName = try DistinguishedName { CommonName("Another vendor root") }
        let other = try Self.certificate(
            for: otherKey.publicKey, name: "Another vendor root", issuer: (otherKey, otherName), authority: true, validity: validity)
        do {
            _ = try await verify(signed.bytes, anchors: [other])
            Issue.record("accepted with a root the chain does not reach")
        } catch {
            #expect(
                error.code == .passkeyRegistrationInvalid && error.verifierCode == WebAuthnError.Code.certificateChainInvalid.identifier, "\(error)")
        }
        // The chain is checked at the registration's recorded time: three hours before now, the
        // certificates were not yet valid.
        var early = record
        early.passkey!.registration.verifiedAt = self.now.addingTimeInterval(-3 * 3600)
        let earlyBytes = try SignedEvidence.sign(early, with: self.base.serverKey).bytes
        do {
            _ = try await verify(earlyBytes, anchors: [root])
            Issue.record("accepted at a time before its certificates")
        } catch {
            #expect(
                error.code == .passkeyRegistrationInvalid && error.verifierCode == WebAuthnError.Code.certificateNotYetValid.identifier, "\(error)")
        }
    }

    // MARK: - The assertion

    @Test("the form's assertion is checked again: the form's hash, the registered credential and key, the user handle, the signature")
    func assertionChecks() async throws {
        let record = try self.passkeyRecord()
        try await self.expect(.passkeyAssertionInvalid, verifierCode: .challengeMismatch, record, "another form (the amount)") {
            $0.form = try self.base.form(amount: "10000.00")
        }
        await self.expect(
            .passkeyAssertionInvalid, verifierCode: .credentialIDMismatch, record, "the assertion's credential is not the registered one"
        ) {
            $0.passkey!.assertion.credentialID[0] ^= 1
        }
        await self.expect(.passkeyAssertionInvalid, verifierCode: .userHandleMismatch, record, "another user handle for the credential") {
            $0.passkey!.userHandle = [8, 8, 8, 8]
        }
        await self.expect(.passkeyAssertionInvalid, verifierCode: .signatureInvalid, record, "a byte of the signature") {
            $0.passkey!.assertion.signature[10] ^= 1
        }
        await self.expect(
            .passkeyAssertionInvalid, verifierCode: .signatureInvalid, record, "a byte of the assertion's authenticator data (its count)"
        ) {
            $0.passkey!.assertion.authenticatorData[36] ^= 1
        }
        await self.expect(.passkeyAssertionInvalid, verifierCode: .typeMismatch, record, "the registration's clientDataJSON as the assertion's") {
            $0.passkey!.assertion.clientDataJSON = $0.passkey!.registration.clientDataJSON
        }
        // The key is the registration's: another credential's registration (same id) does not verify the assertion.
        let other = try self.passkey(form: record.form, device: PasskeyDevice())
        await self.expect(
            .passkeyAssertionInvalid, verifierCode: .signatureInvalid, record, "another key's registration under the same credential id"
        ) {
            $0.passkey!.registration = other.registration
        }
        // And a passkey beside App Attest is checked the same way.
        let both = try self.bothRecord()
        await self.expect(.passkeyAssertionInvalid, verifierCode: .signatureInvalid, both, "a byte of the signature, both factors") {
            $0.passkey!.assertion.signature[10] ^= 1
        }
        await self.expect(.formNotSigned, both, "the App Attest assertion, both factors") { $0.assertion![12] ^= 1 }
    }

    @Test("the sign count: the recorded previous count is the rule's, the recorded count the signed one, and not below the registration's")
    func signCountChecks() async throws {
        var device = PasskeyDevice()
        device.signCount = 5
        let record = try self.passkeyRecord(device: device)
        #expect(record.passkey?.assertion.previousSignCount == 5 && record.passkey?.assertion.signCount == 6)
        #expect(try await self.verify(record).record == record)
        await self.expect(.passkeyAssertionInvalid, verifierCode: .signCountNotIncreasing, record, "the previous count at the signed one") {
            $0.passkey!.assertion.previousSignCount = 6
        }
        await self.expect(.counterMismatch, record, "a previous count below the registration's") { $0.passkey!.assertion.previousSignCount = 4 }
        await self.expect(.counterMismatch, record, "another sign count claimed") { $0.passkey!.assertion.signCount = 7 }
    }

    // MARK: - The claims

    @Test("the record's claims must be what the signed flags say: UV, BE, BS; and UV when its policy required it")
    func claimChecks() async throws {
        var presentOnly = PasskeyDevice()
        presentOnly.flags = 0x01
        let record = try self.passkeyRecord(device: presentOnly, requireUserVerification: false)
        #expect(try await self.verify(record).record == record)
        await self.expect(.passkeyClaimMismatch, record, "the record says UV, the flag is off") { $0.passkey!.assertion.userVerified = true }
        await self.expect(.passkeyClaimMismatch, record, "the record says BE, the flag is off") { $0.passkey!.assertion.backupEligible = true }
        var eligible = PasskeyDevice()
        eligible.flags = 0x01 | 0x08
        let eligibleRecord = try self.passkeyRecord(device: eligible, requireUserVerification: false)
        #expect(try await self.verify(eligibleRecord).record == eligibleRecord)
        await self.expect(.passkeyClaimMismatch, eligibleRecord, "the record says BS, the flag is off (BE on)") {
            $0.passkey!.assertion.backedUp = true
        }
        await self.expect(.passkeyClaimMismatch, record, "the policy required UV, the flag is off") {
            $0.passkey!.policy.requireUserVerification = true
        }
        let verified = try self.passkeyRecord()
        await self.expect(.passkeyClaimMismatch, verified, "the record says no UV, the flag is on") { $0.passkey!.assertion.userVerified = false }
    }

    // MARK: - Reading

    @Test("a version-3 record is read strictly: amr as its claims make it, its kinds, no App Attest member for a passkey alone, sorted policy lists")
    func strictReading() async throws {
        let record = try self.passkeyRecord()
        let signed = try SignedEvidence.sign(record, with: self.base.serverKey)
        let envelope = try CanonicalJSON.parse(signed.bytes)
        let payload = record.json
        func refused(_ changed: JSONValue, _ comment: Comment) async throws {
            #expect(changed != payload, "\(comment): nothing changed")
            await self.base.expect(.malformedRecord, try self.base.resigned(envelope, payload: changed.canonicalBytes), comment)
        }
        func replacing(_ path: [String], _ value: JSONValue) -> JSONValue { EvidenceTests.replacing(payload, at: path[...], with: { _ in value }) }
        try await refused(replacing(["amr"], .array(["hwk", "user"].map { .string(JSONString($0)) })), "amr without mfa, the record claims UV")
        try await refused(replacing(["version"], .number(1)), "a passkey record as version 1")
        try await refused(replacing(["kind"], .string(JSONString("pooled"))), "kind pooled in version 3")
        try await refused(
            replacing(["passkey", "policy", "origins"], .array(["https://z.example", PasskeyDevice.origin].map { .string(JSONString($0)) })),
            "origins not sorted")
        guard case .object(let object) = payload else {
            Issue.record("a record is an object")
            return
        }
        let withKey = JSONValue.object(try JSONObject(object.members.map { ($0.name.string, $0.value) } + [("keyId", .string(JSONString("AAAA")))]))
        try await refused(withKey, "a keyId in a record of a passkey alone")
        let withoutPasskey = JSONValue.object(
            try JSONObject(object.members.filter { $0.name.string != "passkey" }.map { ($0.name.string, $0.value) }))
        try await refused(withoutPasskey, "version 3 without its passkey")
        // The unchanged payload, signed the same way, verifies.
        #expect(try await self.base.verify(try self.base.resigned(envelope, payload: payload.canonicalBytes)).record == record)
    }

    @Test(
        "version-3 records in evidence bundles: a passkey alone verifies with no registration, both factors with the key's; a registration beside a passkey alone is refused"
    )
    func bundles() async throws {
        let logs = EvidenceBundleTests()
        let logKey = try NoteVerifier(keyString: logs.logSigner.verifierKey)
        func verify(_ record: EvidenceRecord, registration: [UInt8]?) async throws(EvidenceError) -> EvidenceBundle.Verified {
            let payload = record.json.canonicalBytes
            do {
                let log = try logs.log(with: payload)
                let envelope = try SignedEvidence.sign(record, with: self.base.serverKey).bytes
                return try await EvidenceBundle(
                    checkpoint: log.checkpoint, index: 2, inclusionProof: try log.proof(2), record: .envelope(envelope), registration: registration
                ).verify(
                    logKey: logKey, signers: self.base.signers, trustAnchors: self.base.anchors,
                    receiptTrustAnchors: [self.base.authority.receiptAuthority.rootCertificate])
            } catch let error as EvidenceError {
                throw error
            } catch {
                throw EvidenceError(code: .malformedBundle, reason: "the test's log: \(error)")
            }
        }
        let alone = try self.passkeyRecord()
        #expect(try await verify(alone, registration: nil).evidence.record == alone)
        var both = try self.bothRecord()
        both.format = .referencingRegistration
        let registration = KeyRegistration(of: both).bytes
        #expect(try await verify(both, registration: registration).evidence.record == both)
        await #expect(throws: EvidenceError(code: .registrationMissing, reason: "")) { _ = try await verify(both, registration: nil) }
        await #expect(throws: EvidenceError(code: .malformedBundle, reason: "")) { _ = try await verify(alone, registration: registration) }
    }

    @Test("a passkey record states no app id or environment: a verifier that expects one refuses it")
    func expectations() async throws {
        let signed = try SignedEvidence.sign(try self.passkeyRecord(), with: self.base.serverKey)
        _ = try await SignedEvidence.verify(signed.bytes, signers: self.base.signers, trustAnchors: [])
        await #expect(throws: EvidenceError(code: .policyMismatch, reason: "")) {
            _ = try await SignedEvidence.verify(
                signed.bytes, signers: self.base.signers, trustAnchors: [], expecting: SignedEvidence.Expectations(appIDs: [EvidenceTests.appID]))
        }
    }
}
