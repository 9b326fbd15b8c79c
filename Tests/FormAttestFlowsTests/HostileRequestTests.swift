//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import FormAttestFlows
import FormAttestForm
import Foundation
import RFC3339
import SQLiteAttestStore
import Testing

/// What a hostile caller (not a forged device) tries against the flows: each rule holds after
/// registration, not only at it, and no answer tells a stranger more than it must.
struct HostileRequestTests {
    static let otherApp = "ABCDE12345.com.formattest.other"

    @Test("a key attested for one app cannot sign for another app the deployment also accepts")
    func keyIsBoundToItsApp() async throws {
        let harness = try FlowHarness(appIDs: [FlowHarness.appID, Self.otherApp])
        let key = harness.device.key(0)
        try await harness.register(key)
        let form = FlowHarness.form(nonce: "other-app")
        var options = SimulatedDevice.AssertionOptions()
        options.relyingPartyID = Self.otherApp
        let request = FormFlows.AssertRequest(
            username: "alice",
            keyID: key.keyID,
            assertion: try harness.device.assert(key, clientDataHash: FlowHarness.hash(form), counter: 1, options: options),
            form: form
        )
        await expectFlowError("app_id_mismatch", .verificationFailed) { try await harness.flows.assert(request, now: FlowHarness.now) }
        #expect(try await harness.store.loadKey(keyID: key.keyID)?.counter == 0)
        // The one change: signed for its own app, the same form is accepted.
        _ = try await harness.flows.assert(harness.assertRequest(key: key, form: form, counter: 1), now: FlowHarness.now)
    }

    @Test("the environment policy applies at every assertion: a development key is refused once the deployment accepts production only")
    func environmentAtEveryAssertion() async throws {
        let store = MemoryAttestationStore()
        let before = try FlowHarness(store: store, environments: [.development, .production], deviceEnvironment: .development)
        let key = before.device.key(0)
        try await before.register(key)
        _ = try await before.flows.assert(before.assertRequest(key: key, form: FlowHarness.form(nonce: "dev-1"), counter: 1), now: FlowHarness.now)
        // The service restarts with production only, on the same store.
        let after = try FlowHarness(store: store, environments: [.production], deviceEnvironment: .development)
        await expectFlowError("environment_not_allowed", .verificationFailed) {
            try await after.flows.assert(after.assertRequest(key: key, form: FlowHarness.form(nonce: "dev-2"), counter: 2), now: FlowHarness.now)
        }
        #expect(try await store.loadKey(keyID: key.keyID)?.counter == 1)
    }

    @Test("an unknown keyId and another user's keyId get the same answer, word for word")
    func noOwnershipOracle() async throws {
        let harness = try FlowHarness()
        try await harness.register(harness.device.key(0), user: "bob")
        func failure(_ key: SimulatedKey) async throws -> FlowError? {
            do {
                _ = try await harness.flows.assert(
                    harness.assertRequest(key: key, form: FlowHarness.form(user: "alice"), counter: 1), now: FlowHarness.now)
                return nil
            } catch let error as FlowError {
                return error
            }
        }
        let registered = try #require(try await failure(harness.device.key(0)))
        let unknown = try #require(try await failure(harness.device.key(7)))
        #expect(registered.code == .keyMismatch && registered.category == .keyMismatch)
        #expect(registered.code == unknown.code && registered.reason == unknown.reason && registered.category == unknown.category)
    }

    @Test("attest says a keyId is registered only after its attestation verified")
    func noRegistrationOracle() async throws {
        let harness = try FlowHarness()
        let key = harness.device.key(0)
        try await harness.register(key)
        let forged = FormFlows.AttestRequest(
            username: "mallory", keyID: key.keyID, attestationObject: [0xA1, 0x01], form: FlowHarness.form(user: "mallory", nonce: "m"))
        await expectFlowError("malformed_attestation", .malformedInput) { try await harness.flows.attest(forged, now: FlowHarness.now) }
        // The key's own device, with a genuine attestation: now it may learn it.
        await expectFlowError("key_already_registered", .conflict) {
            try await harness.flows.attest(harness.attestRequest(key: key, form: FlowHarness.form(nonce: "again")), now: FlowHarness.now)
        }
    }

    @Test(
        "usernames with control characters are refused at every entry, and write nothing",
        arguments: [
            "alice\u{0}evil", "alice\u{0}", "\u{0}", "bob\u{1}", "bob\u{1F}", "bob\u{7F}", "bob\u{85}", "bob\u{9F}", "a\nb", "a\rb", "a\tb", "",
            String(repeating: "a", count: 257),
        ])
    func controlCharacters(username: String) async throws {
        let store = try SQLiteAttestationStore(
            path: FileManager.default.temporaryDirectory.appendingPathComponent("hostile-\(UUID().uuidString).sqlite").path)
        let harness = try FlowHarness(store: store)
        let key = harness.device.key(0)
        let form = FlowHarness.form(user: "alice")
        let attest = FormFlows.AttestRequest(
            username: username, keyID: key.keyID,
            attestationObject: try harness.device.attest(key, clientDataHash: FlowHarness.hash(form), at: FlowHarness.now),
            form: form
        )
        await expectFlowError("invalid_request", .malformedInput) { try await harness.flows.attest(attest, now: FlowHarness.now) }
        #expect(try await store.loadKey(keyID: key.keyID) == nil)
        await expectFlowError("invalid_request", .malformedInput) {
            _ = try await harness.flows.issueChallenge(purpose: .form, username: username, now: FlowHarness.now)
        }
        try await harness.register(key)
        await expectFlowError("invalid_request", .malformedInput) {
            try await harness.flows.assert(
                harness.assertRequest(key: key, form: FlowHarness.form(nonce: "x"), counter: 1, user: username), now: FlowHarness.now)
        }
        #expect(try await store.loadKey(keyID: key.keyID)?.counter == 0)
    }

    @Test("usernames that differ only in Unicode normalization are different users (SQLite)")
    func normalization() async throws {
        let store = try SQLiteAttestationStore(
            path: FileManager.default.temporaryDirectory.appendingPathComponent("hostile-\(UUID().uuidString).sqlite").path)
        let harness = try FlowHarness(store: store)
        let key = harness.device.key(0)
        try await harness.register(key, user: "jos\u{E9}")
        await expectFlowError("key_mismatch", .keyMismatch) {
            try await harness.flows.assert(
                harness.assertRequest(key: key, form: FlowHarness.form(user: "jose\u{301}", nonce: "n"), counter: 1, user: "jose\u{301}"),
                now: FlowHarness.now)
        }
        _ = try await harness.flows.assert(
            harness.assertRequest(key: key, form: FlowHarness.form(user: "jos\u{E9}", nonce: "n"), counter: 1, user: "jos\u{E9}"),
            now: FlowHarness.now)
    }

    @Test(
        "a number the canonical form would change is refused before anything is verified",
        arguments: [
            "9007199254740993", "-9007199254740993", "9007199254740994", "1e300", "0.30000000000000000001", "1.00000000000000000001", "1e-400",
            "123456789012345678901234567890",
        ])
    func inexactNumbers(amount: String) async throws {
        let harness = try FlowHarness()
        let key = harness.device.key(0)
        try await harness.register(key)
        await expectFlowError("form_inexact_number", .malformedInput) {
            try await harness.flows.assert(
                FormFlows.AssertRequest(
                    username: "alice", keyID: key.keyID, assertion: [0xA0], form: FlowHarness.form(amount: amount, nonce: amount)),
                now: FlowHarness.now
            )
        }
    }

    @Test(
        "numbers that survive RFC 8785 exactly are signed and accepted",
        arguments: [
            "9007199254740992", "-9007199254740992", "1234.50", "1.2345e3", "0.1", "-0", "5e-324", "100E-2", "0.000001",
        ])
    func exactNumbers(amount: String) async throws {
        let harness = try FlowHarness()
        let key = harness.device.key(0)
        try await harness.register(key)
        _ = try await harness.flows.assert(
            harness.assertRequest(key: key, form: FlowHarness.form(amount: amount, nonce: amount), counter: 1), now: FlowHarness.now)
    }

    @Test(
        "form timestamps outside the strict RFC 3339 grammar are form_invalid_field, never a crash",
        arguments: [
            "2026-11-22T10:00:00.0000000000000000000000000000000000000001Z", "2026-11-22T10:00:00+01:00Z", "2026-11-22T10:00:00+01:00",
            "\u{FF12}\u{FF10}\u{FF12}\u{FF16}-11-22T10:00:00Z", " 2026-11-22T10:00:00Z", "02026-11-22T10:00:00Z", "2026-11-22T10:00:00.1234567890Z",
        ])
    func timestamps(timestamp: String) async throws {
        let harness = try FlowHarness()
        let form = Array(#"{"timestamp":"\#(timestamp)","username":"alice","nonce":"t"}"#.utf8)
        await expectFlowError("form_invalid_field", .malformedInput) {
            try await harness.flows.assert(
                FormFlows.AssertRequest(username: "alice", keyID: [1], assertion: [0xA0], form: form), now: FlowHarness.now)
        }
    }

    @Test("a pooled registration reports the pool challenge as what its attestation covered")
    func pooledAttestedOver() async throws {
        let harness = try FlowHarness()
        let poolChallenge = try await harness.flows.issueChallenge(purpose: .pool, username: nil, now: FlowHarness.now)
        let key = harness.device.key(0)
        let form = FlowHarness.form(nonce: "ext")
        let outcome = try await harness.flows.registerPooled(
            FormFlows.PooledRequest(
                username: "alice", keyID: key.keyID,
                attestationObject: try harness.device.attest(key, clientDataHash: poolChallenge.value, at: FlowHarness.now),
                poolChallenge: poolChallenge.value,
                assertion: try harness.device.assert(key, clientDataHash: FlowHarness.hash(form), counter: 1),
                form: form
            ),
            now: FlowHarness.now
        )
        #expect(outcome.attestedClientDataHash == poolChallenge.value)
        #expect(outcome.form.clientDataHash == (try FlowHarness.hash(form)))
        // And an attestation over a form: the form's own hash.
        let direct = try await harness.register(harness.device.key(1), nonce: "direct")
        #expect(direct.attestedClientDataHash == direct.form.clientDataHash)
    }
}
