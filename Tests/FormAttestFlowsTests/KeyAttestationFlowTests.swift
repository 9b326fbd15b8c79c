//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttestSimulator
import FormAttestFlows
import Foundation
import SQLiteAttestStore
import Testing

/// Each registration keeps the attestation that registered the key, exactly as the device sent
/// it, with the clientDataHash it was made over: what an evidence record of a later assertion
/// carries. It survives reopening the SQLite file and the key's later assertions.
struct KeyAttestationFlowTests {
    @Test("attest keeps the attestation object and the form's hash; an assertion leaves them; SQLite reopened reads them back")
    func attestKeepsIt() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("flows-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("s.sqlite").path
        let harness = try FlowHarness(store: try SQLiteAttestationStore(path: path))
        let key = harness.device.key(0)
        let form = FlowHarness.form(nonce: "keep")
        let request = try harness.attestRequest(key: key, form: form)
        _ = try await harness.flows.attest(request, now: FlowHarness.now)
        _ = try await harness.flows.assert(harness.assertRequest(key: key, form: FlowHarness.form(nonce: "next"), counter: 1), now: FlowHarness.now)
        let expected = KeyAttestation(object: request.attestationObject, clientDataHash: try FlowHarness.hash(form))
        #expect(try await harness.store.loadKey(keyID: key.keyID)?.attestation == expected)
        #expect(try await SQLiteAttestationStore(path: path).loadKey(keyID: key.keyID)?.attestation == expected)
    }

    @Test("a pooled registration keeps its attestation with the pool challenge it was made over")
    func pooledKeepsTheChallenge() async throws {
        let harness = try FlowHarness()
        let challenge = try await harness.flows.issueChallenge(purpose: .pool, username: "alice", now: FlowHarness.now)
        let key = harness.device.key(3)
        let form = FlowHarness.form(nonce: "pooled")
        let attestation = try harness.device.attest(key, clientDataHash: challenge.value, at: FlowHarness.now)
        let request = FormFlows.PooledRequest(
            username: "alice", keyID: key.keyID, attestationObject: attestation, poolChallenge: challenge.value,
            assertion: try harness.device.assert(key, clientDataHash: try FlowHarness.hash(form), counter: 1), form: form
        )
        _ = try await harness.flows.registerPooled(request, now: FlowHarness.now)
        #expect(
            try await harness.store.loadKey(keyID: key.keyID)?.attestation == KeyAttestation(object: attestation, clientDataHash: challenge.value))
    }

    @Test("a pooled key's assertion must name the key's own app id, not another app id of the deployment (app_id_mismatch)")
    func pooledAssertionAppID() async throws {
        let other = "ABCDE12345.com.example.other"
        let harness = try FlowHarness(appIDs: [FlowHarness.appID, other])
        let challenge = try await harness.flows.issueChallenge(purpose: .pool, username: "alice", now: FlowHarness.now)
        let key = harness.device.key(4)
        let form = FlowHarness.form(nonce: "pooled-other")
        var options = SimulatedDevice.AssertionOptions()
        options.relyingPartyID = other
        let request = FormFlows.PooledRequest(
            username: "alice", keyID: key.keyID,
            attestationObject: try harness.device.attest(key, clientDataHash: challenge.value, at: FlowHarness.now),
            poolChallenge: challenge.value,
            assertion: try harness.device.assert(key, clientDataHash: try FlowHarness.hash(form), counter: 1, options: options), form: form
        )
        await expectFlowError("app_id_mismatch") { try await harness.flows.registerPooled(request, now: FlowHarness.now) }
        #expect(try await harness.store.loadKey(keyID: key.keyID) == nil)
    }
}
