//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttestSimulator
import CanonicalJSON
import FormAttestEvidence
import FormAttestServer
import FormAttestTokens
import Foundation
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
                ("username", .string(JSONString("alice"))), ("keyId", .string(JSONString(keyID))), ("assertion", .string(JSONString(assertion))), ("form", form),
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
            let third = try await SignedEvidence.verify(inline.canonicalBytes, signers: signers, trustAnchors: anchors, receiptTrustAnchors: receiptAnchors)
            #expect(third.id == next.json?["evidenceId"]?.stringValue)
            #expect(third.record.counter == 2)
        }
    }
}
