//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import CanonicalJSON
import FormAttestEvidence
import FormAttestForm
import FormAttestServer
import FormAttestTokens
import Foundation
import RFC3339
import Testing

/// Evidence records over the API, in process: archived when the archive takes them, returned in
/// the answer when it cannot (the form stays accepted), and absent from refusals.
struct EvidenceRouteTests {
    @Test("each accepted form's record is archived and verifies; when the archive fails the answer carries it and the form stays accepted")
    func archiveAndFallback() async throws {
        let archive = FileManager.default.temporaryDirectory.appendingPathComponent("evidence-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: archive, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(at: archive) }
        var harness = try ServiceHarness()
        harness.configuration.policy.requireValidReceipt = true
        harness.configuration.evidence = EvidenceConfiguration(archiveDirectory: archive.path)
        let signers = try SignedEvidence.signers(jwks: harness.keys.jwks.canonicalBytes)
        let anchors = [harness.authority.rootCertificate]
        let receiptAnchors = [harness.authority.receiptAuthority.rootCertificate]
        try await harness.run { client in
            let (keyID, registered) = try await ServiceHarness.register(client, form: ServiceHarness.form())
            try #require(registered.status == 200)
            let registeredID = try #require(registered.json?["evidenceId"]?.stringValue)
            #expect(registered.json?["evidenceArchived"] == .bool(true))
            #expect(registered.json?["evidence"] == nil, "not asked for in the answer")
            let file = try Array(Data(contentsOf: archive.appendingPathComponent("\(registeredID).json")))
            let first = try await SignedEvidence.verify(file, signers: signers, trustAnchors: anchors, receiptTrustAnchors: receiptAnchors)
            #expect(first.id == registeredID)
            #expect(first.record.kind == .attestation)

            let form = ServiceHarness.form(amount: "99.00")
            let assertion = try await ServiceHarness.assertion(client, keyID: keyID, form: form)
            let request: [(String, JSONValue)] = [
                ("username", .string(JSONString("alice"))), ("keyId", .string(JSONString(keyID))), ("assertion", .string(JSONString(assertion))),
                ("form", form),
            ]
            let asserted = try await client.post("/api/appattest/assert", request)
            try #require(asserted.status == 200)
            let assertedID = try #require(asserted.json?["evidenceId"]?.stringValue)
            let second = try await SignedEvidence.verify(
                try Array(Data(contentsOf: archive.appendingPathComponent("\(assertedID).json"))), signers: signers, trustAnchors: anchors,
                receiptTrustAnchors: receiptAnchors
            )
            #expect(second.record.kind == .assertion)
            #expect(second.record.counter == 1)
            // The key's attestation came back from the store, as registered.
            #expect(second.record.keyAttestation == first.record.keyAttestation)

            // A replay is refused and names no record.
            let replay = try await client.post("/api/appattest/assert", request)
            #expect(replay.status == 409)
            #expect(replay.json?["evidenceId"] == nil)
            #expect(try FileManager.default.contentsOfDirectory(atPath: archive.path).count == 2)

            // The archive gone: the next form is still accepted, and its record travels in the answer.
            try FileManager.default.removeItem(at: archive)
            let later = ServiceHarness.form(amount: "5.00")
            let next = try await client.post(
                "/api/appattest/assert",
                [
                    ("username", .string(JSONString("alice"))), ("keyId", .string(JSONString(keyID))),
                    ("assertion", .string(JSONString(try await ServiceHarness.assertion(client, keyID: keyID, form: later)))), ("form", later),
                ]
            )
            try #require(next.status == 200)
            #expect(next.json?["evidenceArchived"] == .bool(false))
            let inline = try #require(next.json?["evidence"])
            let third = try await SignedEvidence.verify(
                inline.canonicalBytes, signers: signers, trustAnchors: anchors, receiptTrustAnchors: receiptAnchors)
            #expect(third.id == next.json?["evidenceId"]?.stringValue)
            #expect(third.record.counter == 2)
        }
    }

    @Test("evidence without valid receipts required is refused at startup: a client could break its receipt so that no record of its key verifies")
    func receiptsRequired() async throws {
        var harness = try ServiceHarness()
        harness.configuration.evidence = EvidenceConfiguration(inAnswer: true)
        await #expect(throws: EvidenceConfiguration.ReceiptsNotRequired.self) { try await harness.run { _ in } }
    }

    @Test("with evidence on, an attestation whose receipt was changed is refused (401 receipt_*) and recorded nowhere")
    func brokenReceiptRefused() async throws {
        var harness = try ServiceHarness()
        harness.configuration.policy.requireValidReceipt = true
        harness.configuration.evidence = EvidenceConfiguration(inAnswer: true)
        let verifier = try AppAttestVerifier(policy: harness.configuration.policy)
        try await harness.run { client in
            let form = ServiceHarness.form()
            let simulated = try await client.post("/api/dev/simulate", [("action", .string(JSONString("attest"))), ("form", form)])
            let keyID = try #require(simulated.json?["keyId"]?.stringValue)
            let encoded = try #require(simulated.json?["attestationObject"]?.stringValue)
            var object = try #require(Base64URL.decode(encoded))
            let keyBytes = try #require(Base64URL.decode(keyID))
            let verified = try await verifier.verifyAttestation(
                object, keyID: keyBytes, clientDataHash: try SignedForm(value: form).clientDataHash, at: Date()
            )
            let receipt = try #require(object.firstRange(of: verified.receipt))
            object[receipt.lowerBound + receipt.count / 2] ^= 0x01
            let answer = try await client.post(
                "/api/appattest/attest",
                [
                    ("username", .string(JSONString("alice"))), ("keyId", .string(JSONString(keyID))),
                    ("attestationObject", .string(JSONString(Base64URL.encode(object)))), ("form", form),
                ]
            )
            #expect(answer.status == 401, "\(answer.json.map { String(decoding: $0.canonicalBytes, as: UTF8.self) } ?? "")")
            #expect(answer.errorCode?.hasPrefix("receipt_") == true, "\(String(describing: answer.errorCode))")
            #expect(answer.json?["evidenceId"] == nil)
        }
    }

    @Test(
        "a form judged at a sub-millisecond clock is judged at the millisecond its record states: at the window's edge it is refused, or its record verifies"
    )
    func windowEdge() async throws {
        let second = Date().timeIntervalSince1970.rounded(.down)
        var harness = try ServiceHarness()
        harness.configuration.policy.requireValidReceipt = true
        harness.configuration.evidence = EvidenceConfiguration(inAnswer: true)
        harness.configuration.now = { Date(timeIntervalSince1970: second + 0.0007) }
        let signers = try SignedEvidence.signers(jwks: harness.keys.jwks.canonicalBytes)
        let anchors = [harness.authority.rootCertificate]
        let receiptAnchors = [harness.authority.receiptAuthority.rootCertificate]
        try await harness.run { client in
            var accepted = 0
            var refused = 0
            // Ages from 299.9996 s to 300.0002 s and future skews from 29.9998 s to 30.0004 s, as
            // the clock reads them (0.7 ms past the second).
            let stamps = [100_000, 300_000, 500_000, 700_000, 900_000, 1_100_000].flatMap { fraction in
                [Self.stamp(second - 300, nanoseconds: fraction), Self.stamp(second + 30, nanoseconds: fraction)]
            }
            for timestamp in stamps {
                var form = ServiceHarness.form()
                form = EvidenceRouteTests.replacing(form, "timestamp", with: .string(JSONString(timestamp)))
                let (_, answer) = try await ServiceHarness.register(client, form: form)
                if answer.status == 200 {
                    accepted += 1
                    let evidence = try #require(answer.json?["evidence"])
                    do {
                        _ = try await SignedEvidence.verify(
                            evidence.canonicalBytes, signers: signers, trustAnchors: anchors, receiptTrustAnchors: receiptAnchors)
                    } catch {
                        Issue.record("a form accepted with timestamp \(timestamp) has a record that does not verify: \(error)")
                    }
                } else {
                    refused += 1
                    #expect(answer.status == 422, "\(timestamp): \(answer.status) \(String(describing: answer.errorCode))")
                }
            }
            #expect(accepted > 0 && refused > 0, "accepted \(accepted), refused \(refused): the stamps do not straddle the window's edges")
        }
    }

    /// `at` (a whole second) plus `nanoseconds`, in RFC 3339 with nine fraction digits.
    static func stamp(_ at: Double, nanoseconds: Int) -> String {
        let whole = RFC3339UTC.format(Date(timeIntervalSince1970: at), fractionDigits: 0).dropLast()
        return whole + "." + String(repeating: "0", count: 9 - String(nanoseconds).count) + String(nanoseconds) + "Z"
    }

    static func replacing(_ value: JSONValue, _ name: String, with replacement: JSONValue) -> JSONValue {
        guard case .object(let object) = value else { return value }
        return .object(JSONObject(constantMembers: object.members.map { ($0.name.string, $0.name.string == name ? replacement : $0.value) }))
    }
}
