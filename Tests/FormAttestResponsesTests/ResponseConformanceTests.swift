//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import CanonicalJSON
import Crypto
import FormAttestFlows
import FormAttestForm
import FormAttestResponses
import FormAttestTestSupport
import Foundation
import Testing

/// Every response type of `FormAttestResponses` against its schema in schemas/openapi.yaml: a
/// sample of each (optional members present and absent) is encoded as the API and the CLI encode
/// it and validated by tests/interop/check_openapi.py; a type that names no schema, or a
/// type of the module this test has no sample of, fails.
struct ResponseConformanceTests {
    static let appID = "ABCDE12345.com.formattest.demo"
    /// 2025-06-15T12:00:00Z: inside the simulated CA's validity (the verifier is given this time).
    static let time = Date(timeIntervalSince1970: 1_749_988_800)

    /// One sample: the type's name, its schema, its RFC 8785 text.
    struct Sample {
        var type: String
        var schema: String
        var body: String

        init<T: APIResponse>(_ value: T) throws {
            self.type = String(describing: T.self)
            self.schema = T.schemaName
            self.body = String(decoding: try value.canonicalBytes(), as: UTF8.self)
        }
    }

    /// A verified macOS 27 attestation (signals and access control present), an assertion by
    /// the same key, and a plain iOS 14-26 attestation (neither).
    static func verified() async throws -> (
        mac: VerifiedAttestation, plain: VerifiedAttestation, assertion: VerifiedAssertion, key: P256.Signing.PublicKey
    ) {
        let authority = try SimulatedAttestationAuthority(seed: 5)
        let policy = AppAttestPolicy(
            appIDs: [Self.appID], environments: [.development, .production], trustAnchors: [authority.rootCertificate],
            receiptTrustAnchors: [authority.receiptAuthority.rootCertificate]
        )
        let verifier = try AppAttestVerifier(policy: policy)
        let hash = Array(SHA256.hash(data: Array("form".utf8)))
        let mac = SimulatedDevice(authority: authority, appID: Self.appID, seed: 9, profile: .macOS27())
        let macKey = mac.key(0)
        let macResult = try await verifier.verifyAttestation(
            try mac.attest(macKey, clientDataHash: hash, at: Self.time), keyID: macKey.keyID, clientDataHash: hash, at: Self.time
        )
        let plain = SimulatedDevice(authority: authority, appID: Self.appID, seed: 10)
        let plainKey = plain.key(0)
        let plainResult = try await verifier.verifyAttestation(
            try plain.attest(plainKey, clientDataHash: hash, at: Self.time), keyID: plainKey.keyID, clientDataHash: hash, at: Self.time
        )
        let assertion = try verifier.verifyAssertion(
            try mac.assert(macKey, clientDataHash: hash, counter: 1), publicKey: macResult.publicKey, clientDataHash: hash, previousCounter: 0
        )
        return (macResult, plainResult, assertion, macResult.publicKey)
    }

    /// A stored passkey, for the passkey answers' samples.
    static let passkey = StoredPasskey(
        credentialID: Array(repeating: 1, count: 16), username: "alice", userHandle: Array(repeating: 9, count: 32), publicKey: [0xA5],
        signCount: 3, backupEligible: true, backedUp: true, aaguid: Array(repeating: 0, count: 16), transports: ["internal", "hybrid"],
        format: "none", createdAt: Self.time, lastUsed: Self.time
    )
    static let confirmedPasskey = ConfirmedResponse.Passkey(
        credentialID: Array(repeating: 1, count: 16), signCount: 4, userVerified: true, backupEligible: true, backedUp: true)

    static func samples() async throws -> [Sample] {
        var revokedPasskey = Self.passkey
        revokedPasskey.credentialID = Array(repeating: 2, count: 1_023)
        revokedPasskey.revokedAt = Self.time
        let (mac, plain, assertion, publicKey) = try await Self.verified()
        let challenge = IssuedChallenge(
            value: Array(repeating: 1, count: 32), purpose: .form, username: "alice", issuedAt: Self.time,
            expiresAt: Self.time.addingTimeInterval(300)
        )
        let formats = JSONValue.object(JSONObject(constantMembers: [("serverAttestation", .string(JSONString("aGVhZA.cGF5bG9hZA.c2ln")))]))
        let evidence = EvidenceFields(
            id: Base64URL.encode(Array(repeating: 2, count: 32)), archived: false,
            envelope: .object(
                JSONObject(constantMembers: [
                    ("protected", .string(JSONString("cHJvdGVjdGVk"))), ("payload", .string(JSONString("cGF5bG9hZA"))),
                    ("signature", .string(JSONString("c2lnbmF0dXJl"))),
                ])
            )
        )
        let fido2 = JSONValue.object(
            JSONObject(constantMembers: [
                ("fido2Wrapper", .object(JSONObject(constantMembers: []))), ("serverAttestation", .string(JSONString("aGVhZA.cGF5bG9hZA.c2ln"))),
            ])
        )
        var revoked = StoredKey(
            keyID: mac.keyID, username: "alice", publicKey: Array(mac.publicKey.x963Representation), counter: 3, appID: Self.appID,
            environment: .development, receipt: [], createdAt: Self.time, lastUsed: Self.time
        )
        revoked.revokedAt = Self.time
        let active = StoredKey(
            keyID: plain.keyID, username: "alice", publicKey: Array(plain.publicKey.x963Representation), counter: 0, appID: Self.appID,
            environment: .production, receipt: [], createdAt: Self.time, lastUsed: Self.time
        )
        var report = VerificationReport(mac)
        report.clientData = CheckedClientData(.hash(Array(repeating: 3, count: 32)))
        let error = AppAttestError(code: .nonceMismatch, reason: "the nonce differs")
        return [
            try Sample(ChallengeResponse(challenge)),
            try Sample(ErrorResponse(code: "replay", message: "this form was accepted already")),
            try Sample(ErrorResponse(code: "challenge_invalid", message: "expired", nextChallenge: challenge)),
            try Sample(HealthResponse(storeAvailable: true)),
            try Sample(HealthResponse(storeAvailable: false)),
            try Sample(SignalsResponse(try #require(mac.extensions))),
            try Sample(ReceiptCheckResponse(mac.receiptCheck.summary)),
            try Sample(
                RegisteredResponse(
                    mac, counter: 0, formHash: Array(repeating: 4, count: 32), formats: fido2, recentRegistrations: 2, evidence: evidence,
                    nextChallenge: ChallengeResponse(challenge)
                )
            ),
            try Sample(
                RegisteredResponse(
                    plain, counter: 0, formHash: Array(repeating: 4, count: 32), formats: fido2, recentRegistrations: nil, evidence: nil,
                    nextChallenge: nil)
            ),
            try Sample(
                AssertedResponse(
                    keyID: mac.keyID, counter: 1, formHash: Array(repeating: 5, count: 32), formats: formats, extensions: assertion.extensions,
                    evidence: evidence, nextChallenge: ChallengeResponse(challenge)
                )
            ),
            try Sample(
                AssertedResponse(
                    keyID: plain.keyID, counter: 7, formHash: Array(repeating: 5, count: 32), formats: formats, extensions: nil, evidence: nil,
                    nextChallenge: nil
                )
            ),
            try Sample(SimulatedResponse(keyID: mac.keyID, clientDataHash: Array(repeating: 6, count: 32), attestationObject: [1, 2, 3])),
            try Sample(SimulatedResponse(keyID: mac.keyID, clientDataHash: Array(repeating: 6, count: 32), assertion: [4, 5, 6])),
            try Sample(KeyListingResponse(username: "alice", keys: [revoked, active], now: Self.time)),
            try Sample(KeyListingResponse(username: "bob", keys: [], now: Self.time)),
            try Sample(
                KeyListingResponse(username: "alice", page: [revoked], activeKeys: 1, recentRegistrations: 2, totalKeys: 2, next: revoked.keyID)),
            try Sample(KeyListingResponse(username: "alice", page: [], activeKeys: 0, recentRegistrations: 0, totalKeys: 0, next: nil)),
            try Sample(RevocationResponse(keyID: mac.keyID, revokedAt: Self.time)),
            try Sample(report),
            try Sample(VerificationReport(plain)),
            try Sample(VerificationReport(assertion, publicKey: publicKey)),
            try Sample(Rejection(error: error, clientData: CheckedClientData(.hash(Array(repeating: 3, count: 32))))),
            try Sample(Rejection(code: "invalid_request", message: "no such file")),
            try Sample(
                PasskeyOptionsResponse(
                    challenge: IssuedChallenge(
                        value: Array(repeating: 8, count: 32), purpose: .passkey, username: "alice", issuedAt: Self.time,
                        expiresAt: Self.time.addingTimeInterval(120)),
                    userHandle: Array(repeating: 9, count: 32), relyingPartyID: "bank.example", excludeCredentials: [Array(repeating: 1, count: 16)])
            ),
            try Sample(
                PasskeyRegisteredResponse(
                    passkey: Self.passkey, aaguid: "00000000-0000-0000-0000-000000000000", userVerified: true, attestationAnchored: nil)),
            try Sample(
                PasskeyRegisteredResponse(
                    passkey: Self.passkey, aaguid: "adce0002-35bc-c60a-648b-0b25f1f05503", userVerified: false, attestationAnchored: true)),
            try Sample(
                ConfirmedResponse(
                    formHash: Array(repeating: 5, count: 32), key: revoked, passkey: Self.confirmedPasskey, formats: formats,
                    nextChallenge: ChallengeResponse(challenge))
            ),
            try Sample(
                ConfirmedResponse(
                    formHash: Array(repeating: 5, count: 32), key: nil, passkey: Self.confirmedPasskey, formats: nil, nextChallenge: nil)),
            try Sample(
                PasskeyListingResponse(
                    username: "alice", page: [Self.passkey, revokedPasskey], activePasskeys: 1, recentRegistrations: 2, totalPasskeys: 3,
                    next: revokedPasskey.credentialID)),
            try Sample(PasskeyListingResponse(username: "bob", page: [], activePasskeys: 0, recentRegistrations: 0, totalPasskeys: 0, next: nil)),
            try Sample(PasskeyRevocationResponse(credentialID: revokedPasskey.credentialID, revokedAt: Self.time)),
            // A passkey-confirmed form's evidence record: the answer carries its id, archive state, log index and the record.
            try Sample(
                ConfirmedResponse(
                    formHash: Array(repeating: 5, count: 32), key: nil, passkey: Self.confirmedPasskey, formats: nil,
                    evidence: EvidenceFields(id: evidence.id, archived: false, envelope: evidence.envelope, logIndex: 7), nextChallenge: nil)
            ),
        ]
    }

    /// The names of the module's types that conform to `APIResponse`, read from its sources.
    static func declaredResponseTypes() throws -> Set<String> {
        let directory = repositoryDirectory.appendingPathComponent("Sources/FormAttestResponses")
        var names: Set<String> = []
        for file in try FileManager.default.contentsOfDirectory(atPath: directory.path) where file.hasSuffix(".swift") {
            let text = try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
            for match in text.matches(of: /struct (\w+): APIResponse\b/) { names.insert(String(match.1)) }
        }
        return names
    }

    @Test("every response type has a sample, and every sample matches the schema its type names in the OpenAPI document")
    func everyResponseTypeMatchesTheDocument() async throws {
        let samples = try await Self.samples()
        let declared = try Self.declaredResponseTypes()
        #expect(declared.count >= 12, "\(declared)")
        #expect(declared == Set(samples.map(\.type)), "types without a sample: \(declared.subtracting(samples.map(\.type)).sorted())")
        let result = try await Self.check(samples)
        #expect(result.status == 0, "\(result.output)")
        #expect(result.output.contains("\(samples.count) passed, 0 failed"), "\(result.output)")
    }

    @Test("the check fails for a type whose schema is missing from the document, and for a member the schema does not allow")
    func theCheckCanFail() async throws {
        var missing = try Sample(HealthResponse(storeAvailable: true))
        missing.schema = "NoSuchSchema"
        var extra = try Sample(RevocationResponse(keyID: Array(repeating: 1, count: 32), revokedAt: Self.time))
        extra.body = String(extra.body.dropLast()) + #","unexpected":true}"#
        var wrongKeyId = try Sample(RevocationResponse(keyID: Array(repeating: 1, count: 32), revokedAt: Self.time))
        wrongKeyId.body = wrongKeyId.body.replacingOccurrences(
            of: Base64URL.encode(Array(repeating: 1, count: 32)), with: "0101010101010101010101010101010101010101010101010101010101010101")
        for sample in [missing, extra, wrongKeyId] {
            let result = try await Self.check([sample])
            #expect(result.status != 0, "\(sample.body): \(result.output)")
            #expect(result.output.contains("0 passed, 1 failed"), "\(result.output)")
        }
    }

    @Test("a response is RFC 8785: the bytes are their own canonical form, and the API's bytes are unchanged for a challenge")
    func canonicalBytes() async throws {
        for sample in try await Self.samples() {
            #expect(try CanonicalJSON.canonicalize(Array(sample.body.utf8)) == Array(sample.body.utf8), "\(sample.type)")
        }
        let challenge = IssuedChallenge(
            value: Array(repeating: 255, count: 32), purpose: .pool, username: nil, issuedAt: Self.time, expiresAt: Self.time.addingTimeInterval(300)
        )
        let text = String(decoding: try ChallengeResponse(challenge).canonicalBytes(), as: UTF8.self)
        #expect(text == #"{"challenge":"__________________________________________8","expiresAt":"2025-06-15T12:05:00.000Z","purpose":"pool"}"#)
    }

    @Test("the responses built member by member equal their Encodable encoding, each optional member present and absent")
    func membersEqualTheEncodableEncoding() async throws {
        let (mac, plain, assertion, _) = try await Self.verified()
        let challenge = ChallengeResponse(
            IssuedChallenge(
                value: Array(repeating: 7, count: 32), purpose: .form, username: "alice", issuedAt: Self.time,
                expiresAt: Self.time.addingTimeInterval(300))
        )
        #expect(challenge.jsonValue() == (try JSONValueEncoder().encode(challenge)))
        let formats = JSONValue.object(JSONObject(constantMembers: [("serverAttestation", .string(JSONString("aGVhZA.cGF5bG9hZA.c2ln")))]))
        let envelope = JSONValue.object(JSONObject(constantMembers: [("payload", .string(JSONString("cGF5bG9hZA")))]))
        let answers = [
            AssertedResponse(
                keyID: plain.keyID, counter: 7, formHash: Array(repeating: 5, count: 32), formats: formats, extensions: nil, evidence: nil,
                nextChallenge: nil),
            AssertedResponse(
                keyID: mac.keyID, counter: UInt32.max, formHash: Array(repeating: 5, count: 32), formats: formats, extensions: assertion.extensions,
                evidence: EvidenceFields(id: "aWQ", archived: true, envelope: envelope), nextChallenge: challenge
            ),
            AssertedResponse(
                keyID: mac.keyID, counter: 0, formHash: [], formats: .object(JSONObject(constantMembers: [])), extensions: nil,
                evidence: EvidenceFields(id: "aWQ", archived: nil, envelope: nil), nextChallenge: nil
            ),
        ]
        #expect(answers[1].extensions != nil)
        for answer in answers {
            let built = try answer.jsonValue()
            let encoded = try JSONValueEncoder().encode(answer)
            #expect(
                built == encoded,
                "\(String(decoding: built.canonicalBytes, as: UTF8.self)) != \(String(decoding: encoded.canonicalBytes, as: UTF8.self))")
        }
    }

    static func check(_ samples: [Sample]) async throws -> (status: Int32, output: String) {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("responses-\(UUID().uuidString).jsonl")
        defer { try? FileManager.default.removeItem(at: file) }
        let lines = try samples.map { sample in
            String(
                decoding: try JSONSerialization.data(
                    withJSONObject: ["type": sample.type, "schema": sample.schema, "body": sample.body], options: [.sortedKeys]), as: UTF8.self)
        }
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: file)
        return try await PythonCheck(venv: ".venv-interop", overrideVariable: "FORMATTEST_INTEROP_PYTHON").run(
            "e2e/interop/check_openapi.py",
            [repositoryDirectory.appendingPathComponent("schemas/openapi.yaml").path, file.path]
        )
    }
}
