//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import CanonicalJSON
import Crypto
import FormAttestEvidence
import FormAttestForm
import FormAttestTestSupport
import FormAttestTokens
import Foundation
import RFC3339
import Testing
import X509

/// Records made on the simulated device at the real now (certificates are issued around it), and
/// one assembled from a real device's recorded attestation and assertion.
struct EvidenceTests {
    static let appID = "ABCDE12345.com.formattest.demo"

    let authority: SimulatedAttestationAuthority
    let device: SimulatedDevice
    let serverKey = P256.Signing.PrivateKey()
    /// Whole milliseconds, as records keep times.
    let now = RFC3339UTC.parse(RFC3339UTC.format(Date()))!

    init() throws {
        self.authority = try SimulatedAttestationAuthority(seed: 7)
        self.device = SimulatedDevice(authority: self.authority, appID: Self.appID, environment: .production, seed: 5)
    }

    var signers: [String: SignedEvidence.SignerKey] { [SigningKeys.thumbprint(self.serverKey.publicKey): self.serverKey.publicKey] }
    var anchors: [Certificate] { [self.authority.rootCertificate] }

    func policy(appIDs: [String] = [Self.appID], environments: [AppAttestEnvironment] = [.production]) throws -> EvidenceRecord.Policy {
        EvidenceRecord.Policy(
            appIDs: appIDs, environments: environments, trustAnchorKeyDigests: [EvidenceRecord.Policy.keyDigest(of: self.authority.rootCertificate)],
            formMaximumAge: 300, formMaximumFutureSkew: 60, requireServerChallenge: false, sessionBound: false
        )
    }

    func form(amount: String = "10.00", user: String? = "alice", at time: Date? = nil, extra: String = "") throws -> [UInt8] {
        let username = user.map { #", "username": "\#($0)""# } ?? ""
        let text = #"{"to": "bob", "amount": "\#(amount)"\#(username), "timestamp": "\#(RFC3339UTC.format(time ?? self.now))"\#(extra)}"#
        return try SignedForm(jsonBytes: Array(text.utf8)).canonicalBytes
    }

    /// A registering form: the key's attestation is over the form's hash.
    func attestationRecord() throws -> EvidenceRecord {
        let form = try self.form()
        let hash = Array(SHA256.hash(data: form))
        let key = self.device.key(1)
        let attestation = try self.device.attest(key, clientDataHash: hash, at: self.now)
        return EvidenceRecord(
            kind: .attestation, verifiedAt: self.now, username: "alice", form: form, keyID: key.keyID, appID: Self.appID, environment: .production,
            counter: 0, keyAttestation: .init(object: attestation, clientDataHash: hash, verifiedAt: self.now), assertion: nil,
            policy: try self.policy()
        )
    }

    /// A form signed by an assertion of a key registered an hour before (over another form).
    func assertionRecord(kind: EvidenceRecord.Kind = .assertion) throws -> EvidenceRecord {
        let registeredAt = self.now.addingTimeInterval(-3600)
        let registering =
            kind == .pooled ? [UInt8](repeating: 0x5A, count: 32) : Array(SHA256.hash(data: try self.form(amount: "1.00", at: registeredAt)))
        let key = self.device.key(2)
        let attestation = try self.device.attest(key, clientDataHash: registering, at: registeredAt)
        let form = try self.form()
        let assertion = try self.device.assert(key, clientDataHash: Array(SHA256.hash(data: form)), counter: 7)
        return EvidenceRecord(
            kind: kind, verifiedAt: self.now, username: "alice", form: form, keyID: key.keyID, appID: Self.appID, environment: .production,
            counter: 7, keyAttestation: .init(object: attestation, clientDataHash: registering, verifiedAt: registeredAt), assertion: assertion,
            policy: try self.policy()
        )
    }

    func verify(_ bytes: [UInt8], clientData: SignedEvidence.ClientData = .form) async throws(EvidenceError) -> SignedEvidence.Verified {
        try await SignedEvidence.verify(
            bytes, signers: self.signers, trustAnchors: self.anchors, receiptTrustAnchors: [self.authority.receiptAuthority.rootCertificate],
            clientData: clientData
        )
    }

    func expect(_ code: EvidenceError.Code, _ bytes: [UInt8], _ comment: Comment, sourceLocation: SourceLocation = #_sourceLocation) async {
        do {
            _ = try await self.verify(bytes)
            Issue.record("accepted: \(comment)", sourceLocation: sourceLocation)
        } catch {
            #expect(error.code == code, "\(comment): \(error)", sourceLocation: sourceLocation)
        }
    }

    // MARK: - Accepted

    @Test("a record of each kind verifies offline and reads back equal; its id is its payload's digest, whatever the signature")
    func eachKindVerifies() async throws {
        for record in [try self.attestationRecord(), try self.assertionRecord(), try self.assertionRecord(kind: .pooled)] {
            let signed = try SignedEvidence.sign(record, with: self.serverKey)
            let verified = try await self.verify(signed.bytes)
            #expect(verified.record == record)
            #expect(verified.id == signed.id)
            #expect(verified.signer == SigningKeys.thumbprint(self.serverKey.publicKey))
            #expect(verified.formChecked)
            #expect(signed.id == Base64URL.encode(SHA256.hash(data: record.json.canonicalBytes)))
            // ECDSA signatures differ each time; the id does not.
            let again = try SignedEvidence.sign(record, with: self.serverKey)
            #expect(again.bytes != signed.bytes)
            #expect(again.id == signed.id)
        }
    }

    // MARK: - Every byte, every field

    @Test("flipping one byte of a record's file is refused: every byte of its first and last 512, and every 11th between")
    func bytesOfTheFile() async throws {
        let signed = try SignedEvidence.sign(try self.assertionRecord(), with: self.serverKey)
        var accepted: [Int] = []
        // Every byte would take minutes in a debug build; the per-field tests cover each field.
        let positions = signed.bytes.indices.filter { $0 < 512 || $0 >= signed.bytes.count - 512 || $0 % 11 == 0 }
        for index in positions {
            var bytes = signed.bytes
            bytes[index] ^= 0x01
            if (try? await self.verify(bytes)) != nil { accepted.append(index) }
        }
        #expect(accepted.isEmpty, "accepted with a byte changed at \(accepted)")
        #expect(signed.bytes.count > 5_000)
    }

    @Test("one byte changed in any field of the record, the server's signature kept: refused as unsigned")
    func everyFieldUnderTheServerSignature() async throws {
        for record in [try self.attestationRecord(), try self.assertionRecord()] {
            let signed = try SignedEvidence.sign(record, with: self.serverKey)
            let envelope = try CanonicalJSON.parse(signed.bytes)
            let payload = try CanonicalJSON.parse(Base64URL.decode(try #require(envelope["payload"]?.stringValue))!)
            let paths = Self.leafPaths(payload)
            #expect(paths.count >= 20)
            for path in paths {
                let changed = Self.replacing(payload, at: path[...], with: Self.oneByteChanged)
                #expect(changed != payload, "\(path)")
                let bytes = Self.envelope(envelope, payload: changed.canonicalBytes)
                await self.expect(.serverSignatureInvalid, bytes, "\(path.joined(separator: "."))")
            }
        }
    }

    @Test("the device's part holds without the server: a record changed and signed again by the server's own key is refused at the device step")
    func deviceBoundFieldsResigned() async throws {
        let record = try self.assertionRecord()
        var cases: [(String, EvidenceError.Code, EvidenceRecord)] = []
        func changed(_ name: String, _ code: EvidenceError.Code, _ change: (inout EvidenceRecord) throws -> Void) rethrows {
            var copy = record
            try change(&copy)
            cases.append((name, code, copy))
        }
        try changed("form (amount)", .formNotSigned) { $0.form = try self.form(amount: "10000.00") }
        changed("keyId", .keyAttestationInvalid) { $0.keyID[0] ^= 1 }
        changed("appId, in the policy", .keyAttestationInvalid) {
            $0.appID = "ABCDE12345.com.formattest.other"
            $0.policy.appIDs.append($0.appID)
        }
        changed("appId, outside the policy", .policyMismatch) { $0.appID = "ABCDE12345.com.formattest.other" }
        changed("environment", .keyAttestationInvalid) {
            $0.environment = .development
            $0.policy.environments = [.development, .production]
        }
        changed("counter", .counterMismatch) { $0.counter += 1 }
        // A byte of the credential certificate (signed by Apple's CA), and of the receipt (the part
        // the certificate's nonce does not cover, signed by Apple on its own).
        changed("key attestation object: credential certificate", .keyAttestationInvalid) { $0.keyAttestation.object[300] ^= 1 }
        changed("key attestation object: receipt", .keyAttestationInvalid) { $0.keyAttestation.object[$0.keyAttestation.object.count - 300] ^= 1 }
        changed("key attestation clientDataHash", .keyAttestationInvalid) { $0.keyAttestation.clientDataHash[0] ^= 1 }
        changed("key attestation time, before its certificate", .keyAttestationInvalid) {
            $0.keyAttestation.verifiedAt = $0.keyAttestation.verifiedAt.addingTimeInterval(-400 * 86_400)
        }
        changed("key attestation time, after the form", .policyMismatch) { $0.keyAttestation.verifiedAt = $0.verifiedAt.addingTimeInterval(1) }
        changed("assertion", .formNotSigned) { $0.assertion![12] ^= 1 }
        changed("kind: attestation", .formNotSigned) {
            $0.kind = .attestation
            $0.assertion = nil
            $0.counter = 0
        }
        changed("username", .formInvalid) { $0.username = "mallory" }
        try changed("a form without a username", .formInvalid) { $0.form = try self.form(user: nil) }
        changed("sessions bound, the form names none", .formInvalid) { $0.policy.sessionBound = true }
        changed("server challenge required, the form answers none", .formInvalid) { $0.policy.requireServerChallenge = true }
        changed("verifiedAt, a day later", .formInvalid) { $0.verifiedAt = $0.verifiedAt.addingTimeInterval(86_400) }
        changed("trust anchors", .policyMismatch) { $0.policy.trustAnchorKeyDigests = [[UInt8](repeating: 1, count: 32)] }
        for (name, code, changedRecord) in cases {
            #expect(changedRecord != record, "\(name)")
            await self.expect(code, try SignedEvidence.sign(changedRecord, with: self.serverKey).bytes, "\(name)")
        }
        // With the session and challenge the policy asks for, the form's signature is what fails
        // (the device signed the form without them), not the policy.
        try changed("a session and challenge added to the form", .formNotSigned) {
            $0.form = try self.form(extra: #", "session": "s-1", "challenge": "AAAA""#)
            $0.policy.sessionBound = true
            $0.policy.requireServerChallenge = true
        }
        // The unchanged record, signed the same way, verifies: each refusal above is its change's.
        #expect(try await self.verify(try SignedEvidence.sign(record, with: self.serverKey).bytes).record == record)
    }

    @Test("the envelope and payload are read strictly: signer, header, canonical form, unknown members, base64url spelling")
    func strictReading() async throws {
        let record = try self.assertionRecord()
        let signed = try SignedEvidence.sign(record, with: self.serverKey)
        let envelope = try CanonicalJSON.parse(signed.bytes)
        let payload = record.json

        // Another server's key, or a JWKS entry whose kid is not its key's thumbprint.
        let other = P256.Signing.PrivateKey()
        await #expect(throws: EvidenceError(code: .unknownSigner, reason: "")) {
            _ = try await SignedEvidence.verify(
                signed.bytes, signers: [SigningKeys.thumbprint(other.publicKey): other.publicKey], trustAnchors: self.anchors)
        }
        let borrowed = try JSONObject([
            ("kty", .string(JSONString("EC"))), ("crv", .string(JSONString("P-256"))),
            ("kid", .string(JSONString(SigningKeys.thumbprint(self.serverKey.publicKey)))),
            ("x", .string(JSONString(Base64URL.encode(other.publicKey.x963Representation[1..<33])))),
            ("y", .string(JSONString(Base64URL.encode(other.publicKey.x963Representation[33..<65])))),
        ])
        let jwks = JSONValue.object(JSONObject(constantMembers: [("keys", .array([.object(borrowed)]))])).canonicalBytes
        #expect(try SignedEvidence.signers(jwks: jwks).isEmpty)
        let published = try SignedEvidence.signers(jwks: SigningKeys(current: self.serverKey).jwks.canonicalBytes)
        #expect(published.keys.sorted() == [SigningKeys.thumbprint(self.serverKey.publicKey)])

        // A payload signed as it is, but not in its canonical form (whitespace), or with a member
        // this version does not define, or a binary field spelled in padded base64.
        let spaced = Array(String(decoding: payload.canonicalBytes, as: UTF8.self).replacingOccurrences(of: ",\"", with: ", \"").utf8)
        await self.expect(.malformedRecord, try self.resigned(envelope, payload: spaced), "whitespace in the payload")
        guard case .object(let object) = payload else {
            Issue.record("a record is an object")
            return
        }
        let extra = JSONValue.object(try JSONObject(object.members.map { ($0.name.string, $0.value) } + [("note", .string(JSONString("x")))]))
        await self.expect(.malformedRecord, try self.resigned(envelope, payload: extra.canonicalBytes), "an unknown member")
        let padded = Self.replacing(payload, at: ["keyId"], with: { _ in .string(JSONString(Data(record.keyID).base64EncodedString())) })
        await self.expect(.malformedRecord, try self.resigned(envelope, payload: padded.canonicalBytes), "standard base64 key id")
        // Not JSON, or not a flattened JWS.
        await self.expect(.malformedEnvelope, Array("not json".utf8), "not JSON")
        await self.expect(.malformedEnvelope, Array(#"{"payload":"e30"}"#.utf8), "no signature")
    }

    @Test("the verifier's own expectations: an app id or environment it does not accept is refused, whatever the record's policy says")
    func expectations() async throws {
        let signed = try SignedEvidence.sign(try self.assertionRecord(), with: self.serverKey)
        func verify(_ expectations: SignedEvidence.Expectations) async throws(EvidenceError) {
            _ = try await SignedEvidence.verify(
                signed.bytes, signers: self.signers, trustAnchors: self.anchors,
                receiptTrustAnchors: [self.authority.receiptAuthority.rootCertificate],
                expecting: expectations
            )
        }
        try await verify(SignedEvidence.Expectations(appIDs: [Self.appID], environments: [.production]))
        await #expect(throws: EvidenceError(code: .policyMismatch, reason: "")) {
            try await verify(SignedEvidence.Expectations(appIDs: ["ABCDE12345.com.other"]))
        }
        await #expect(throws: EvidenceError(code: .policyMismatch, reason: "")) {
            try await verify(SignedEvidence.Expectations(environments: [.development]))
        }
    }

    // MARK: - A real device

    @Test("a record assembled from a real device's recorded attestation and assertion verifies against Apple's root at the recorded times")
    func realRecordedAssertion() async throws {
        let sample = try RealSample.named("veehaitch_ios_14_2")
        let attestation = try #require(sample.attestation)
        let keyID = try #require(sample.keyID)
        let attestedAt = try #require(sample.validAt)
        let assertion = try #require(sample.assertions.first)
        let clientData = Array(try #require(assertion.clientData).utf8)
        #expect(Array(SHA256.hash(data: clientData)) == assertion.clientDataHash)
        let environment = try #require(sample.environment)
        let record = EvidenceRecord(
            kind: .assertion, verifiedAt: attestedAt.addingTimeInterval(3), username: "veehaitch", form: clientData, keyID: keyID,
            appID: sample.appID,
            environment: environment, counter: try #require(assertion.expectedCounter),
            keyAttestation: .init(object: attestation, clientDataHash: try #require(sample.clientDataHash), verifiedAt: attestedAt),
            assertion: assertion.assertion,
            policy: EvidenceRecord.Policy(
                appIDs: [sample.appID], environments: [environment],
                trustAnchorKeyDigests: [EvidenceRecord.Policy.keyDigest(of: AppleAppAttestationRoot.certificate)],
                formMaximumAge: 300, formMaximumFutureSkew: 60, requireServerChallenge: false, sessionBound: false
            )
        )
        let signed = try SignedEvidence.sign(record, with: self.serverKey)
        let apple = [AppleAppAttestationRoot.certificate]
        // Its client data ("wurzelpfropf") is not a form: the device's part verifies on its own.
        let verified = try await SignedEvidence.verify(signed.bytes, signers: self.signers, trustAnchors: apple, clientData: .opaque)
        #expect(verified.record == record)
        #expect(!verified.formChecked)
        await #expect(throws: EvidenceError(code: .formInvalid, reason: "")) {
            _ = try await SignedEvidence.verify(signed.bytes, signers: self.signers, trustAnchors: apple)
        }
        // One byte of the real assertion or attestation changed (and signed again) is refused.
        var forged = record
        forged.assertion![forged.assertion!.count - 1] ^= 1
        await #expect(throws: EvidenceError(code: .formNotSigned, reason: "")) {
            _ = try await SignedEvidence.verify(
                try SignedEvidence.sign(forged, with: self.serverKey).bytes, signers: self.signers, trustAnchors: apple, clientData: .opaque)
        }
        forged = record
        forged.keyAttestation.verifiedAt = attestedAt.addingTimeInterval(-3 * 86_400)
        forged.verifiedAt = forged.keyAttestation.verifiedAt
        await #expect(throws: EvidenceError(code: .keyAttestationInvalid, reason: "")) {
            _ = try await SignedEvidence.verify(
                try SignedEvidence.sign(forged, with: self.serverKey).bytes, signers: self.signers, trustAnchors: apple, clientData: .opaque)
        }
        // Not against the simulator's root: only anchors the record's policy names are used.
        await #expect(throws: EvidenceError(code: .policyMismatch, reason: "")) {
            _ = try await SignedEvidence.verify(signed.bytes, signers: self.signers, trustAnchors: self.anchors, clientData: .opaque)
        }
    }

    // MARK: - Helpers

    /// The envelope with another payload and the original header and signature.
    static func envelope(_ envelope: JSONValue, payload: [UInt8]) -> [UInt8] {
        Self.replacing(envelope, at: ["payload"], with: { _ in .string(JSONString(Base64URL.encode(payload))) }).canonicalBytes
    }

    /// `payload` (any bytes) signed by the server key, as the signer would.
    func resigned(_ envelope: JSONValue, payload: [UInt8]) throws -> [UInt8] {
        let protected = try #require(envelope["protected"]?.stringValue)
        let encoded = Base64URL.encode(payload)
        let signature = try self.serverKey.signature(for: Array("\(protected).\(encoded)".utf8))
        return JSONValue.object(
            JSONObject(constantMembers: [
                ("payload", .string(JSONString(encoded))), ("protected", .string(JSONString(protected))),
                ("signature", .string(JSONString(Base64URL.encode(signature.rawRepresentation)))),
            ])
        ).canonicalBytes
    }

    /// The path of every leaf (string, number, boolean) of a JSON value; array items by index.
    static func leafPaths(_ value: JSONValue, _ prefix: [String] = []) -> [[String]] {
        switch value {
        case .object(let object): return object.members.flatMap { Self.leafPaths($0.value, prefix + [$0.name.string]) }
        case .array(let items): return items.indices.flatMap { Self.leafPaths(items[$0], prefix + [String($0)]) }
        default: return [prefix]
        }
    }

    static func replacing(_ value: JSONValue, at path: ArraySlice<String>, with change: (JSONValue) -> JSONValue) -> JSONValue {
        guard let head = path.first else { return change(value) }
        switch value {
        case .object(let object):
            let members = object.members.map { member in
                (
                    name: member.name.string,
                    value: member.name.string == head ? Self.replacing(member.value, at: path.dropFirst(), with: change) : member.value
                )
            }
            return .object(JSONObject(constantMembers: members))
        case .array(var items):
            let index = Int(head)!
            items[index] = Self.replacing(items[index], at: path.dropFirst(), with: change)
            return .array(items)
        default:
            return value
        }
    }

    /// One byte of a leaf changed: a string's first character, a number's last digit, a boolean.
    static func oneByteChanged(_ value: JSONValue) -> JSONValue {
        switch value {
        case .string(let string):
            var bytes = string.utf8
            bytes[0] = bytes[0] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
            return .string(JSONString(String(decoding: bytes, as: UTF8.self)))
        case .number(let number): return .number(number == 9 ? 8 : number + 1)
        case .bool(let flag): return .bool(!flag)
        default: return value
        }
    }
}
