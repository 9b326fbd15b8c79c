//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import FormAttestFlows
import FormAttestForm
import Foundation
import Testing

/// The counter rule (issue 31, class 12): a late counter from delivery order never retires an
/// honest key; one counter signed over two forms (a clone) still does.
struct CounterRuleTests {
    @Test("tolerant (the default): two forms delivered in the opposite order: the late one is refused, the key is kept")
    func reorderKeepsKey() async throws {
        let harness = try FlowHarness()
        #expect(harness.flows.configuration.counterRule == .tolerant)
        let key = harness.device.key(0)
        try await harness.register(key)
        // The device signs n+1 then n+2; they arrive n+2 first.
        let first = try harness.assertRequest(key: key, form: FlowHarness.form(nonce: "first"), counter: 1)
        let second = try harness.assertRequest(key: key, form: FlowHarness.form(nonce: "second"), counter: 2)
        _ = try await harness.flows.assert(second, now: FlowHarness.now)
        await expectFlowError("counter_out_of_order", .conflict) { try await harness.flows.assert(first, now: FlowHarness.now) }
        // Refused again if resent (never accepted, never a replay), and nothing changed.
        await expectFlowError("counter_out_of_order", .conflict) { try await harness.flows.assert(first, now: FlowHarness.now) }
        let stored = try #require(try await harness.store.loadKey(keyID: key.keyID))
        #expect(stored.reattestationRequired == false)
        #expect(stored.counter == 2)
        #expect(stored.counterFormHash == (try FlowHarness.hash(FlowHarness.form(nonce: "second"))))
        // The same form signed again (the app's retry) is accepted.
        _ = try await harness.flows.assert(harness.assertRequest(key: key, form: FlowHarness.form(nonce: "first"), counter: 3), now: FlowHarness.now)
        #expect(try await harness.store.loadKey(keyID: key.keyID)?.counter == 3)
    }

    @Test("tolerant: the stored counter signed again over another form retires the key (a clone)")
    func sameCounterOtherFormRetires() async throws {
        let harness = try FlowHarness()
        let key = harness.device.key(0)
        try await harness.register(key)
        _ = try await harness.flows.assert(
            harness.assertRequest(key: key, form: FlowHarness.form(nonce: "device-a"), counter: 2), now: FlowHarness.now)
        await expectFlowError("requires_reattestation", .requiresReattestation) {
            try await harness.flows.assert(
                harness.assertRequest(key: key, form: FlowHarness.form(nonce: "device-b"), counter: 2), now: FlowHarness.now)
        }
        #expect(try await harness.store.loadKey(keyID: key.keyID)?.reattestationRequired == true)
        await expectFlowError("requires_reattestation", .requiresReattestation) {
            try await harness.flows.assert(harness.assertRequest(key: key, form: FlowHarness.form(nonce: "later"), counter: 3), now: FlowHarness.now)
        }
    }

    @Test("tolerant: counter 0 over another form than the registering one retires the key")
    func counterZeroOtherForm() async throws {
        let harness = try FlowHarness()
        let key = harness.device.key(0)
        try await harness.register(key)
        #expect(
            try await harness.store.loadKey(keyID: key.keyID)?.counterFormHash
                == (try FlowHarness.hash(FlowHarness.form(nonce: "register", action: "register-device"))))
        await expectFlowError("requires_reattestation", .requiresReattestation) {
            try await harness.flows.assert(harness.assertRequest(key: key, form: FlowHarness.form(nonce: "zero"), counter: 0), now: FlowHarness.now)
        }
    }

    @Test("tolerant: the stored counter over the form that set it is a replay, and retires nothing")
    func sameCounterSameForm() async throws {
        let harness = try FlowHarness()
        let key = harness.device.key(0)
        try await harness.register(key)
        let request = try harness.assertRequest(key: key, form: FlowHarness.form(nonce: "once"), counter: 2)
        _ = try await harness.flows.assert(request, now: FlowHarness.now)
        await expectFlowError("replay", .conflict) { try await harness.flows.assert(request, now: FlowHarness.now) }
        #expect(try await harness.store.loadKey(keyID: key.keyID)?.reattestationRequired == false)
    }

    @Test("tolerant: when the store does not know the form that set the counter, nothing is proven: 409, the key kept")
    func unknownCounterForm() async throws {
        let store = MemoryAttestationStore()
        let harness = try FlowHarness(store: store)
        let key = harness.device.key(0)
        try await harness.register(key)
        // A counter moved without a form (a key stored before FormAttest kept the hash).
        #expect(try await store.advanceCounter(keyID: key.keyID, to: 2, lastUsed: FlowHarness.now))
        #expect(try await store.loadKey(keyID: key.keyID)?.counterFormHash == nil)
        await expectFlowError("counter_out_of_order", .conflict) {
            try await harness.flows.assert(harness.assertRequest(key: key, form: FlowHarness.form(nonce: "x"), counter: 2), now: FlowHarness.now)
        }
        #expect(try await store.loadKey(keyID: key.keyID)?.reattestationRequired == false)
    }

    @Test("strict: the same reordered delivery retires the key")
    func strictReorderRetires() async throws {
        var configuration = FlowConfiguration()
        configuration.counterRule = .strict
        let harness = try FlowHarness(configuration: configuration)
        let key = harness.device.key(0)
        try await harness.register(key)
        _ = try await harness.flows.assert(harness.assertRequest(key: key, form: FlowHarness.form(nonce: "second"), counter: 2), now: FlowHarness.now)
        await expectFlowError("requires_reattestation", .requiresReattestation) {
            try await harness.flows.assert(harness.assertRequest(key: key, form: FlowHarness.form(nonce: "first"), counter: 1), now: FlowHarness.now)
        }
        #expect(try await harness.store.loadKey(keyID: key.keyID)?.reattestationRequired == true)
    }

    @Test(
        "racing instances, either rule: a counter stored meanwhile over another form retires the key; a higher one is a race (409), the key kept (r14 F3: strict kept the clone's key)",
        arguments: [CounterRule.tolerant, .strict])
    func commitRace(rule: CounterRule) async throws {
        for (storedMeanwhile, expected) in [(UInt32(3), "requires_reattestation"), (4, "counter_out_of_order")] {
            let memory = MemoryAttestationStore()
            let store = StaleReadStore(memory)
            var configuration = FlowConfiguration()
            configuration.counterRule = rule
            let harness = try FlowHarness(store: store, configuration: configuration)
            let key = harness.device.key(0)
            try await harness.register(key)
            // This instance read the key at counter 2; another instance then accepted `storedMeanwhile`.
            _ = try await harness.flows.assert(
                harness.assertRequest(key: key, form: FlowHarness.form(nonce: "two"), counter: 2), now: FlowHarness.now)
            await store.freeze(try #require(try await memory.loadKey(keyID: key.keyID)))
            try await memory.commitAssertion(
                AssertionCommit(
                    keyID: key.keyID, counter: storedMeanwhile,
                    replay: ReplayRecord(
                        formHash: try FlowHarness.hash(FlowHarness.form(nonce: "other")), expiresAt: FlowHarness.now.addingTimeInterval(600)),
                    challenges: [], now: FlowHarness.now
                )
            )
            await expectFlowError(expected) {
                try await harness.flows.assert(
                    harness.assertRequest(key: key, form: FlowHarness.form(nonce: "three"), counter: 3), now: FlowHarness.now)
            }
            #expect(try await memory.loadKey(keyID: key.keyID)?.reattestationRequired == (expected == "requires_reattestation"))
        }
    }
}

/// A store whose first key read after ``freeze(_:)`` returns the frozen key (what an instance
/// read before another one committed); every later read is the store's.
actor StaleReadStore: AttestationStore {
    let base: MemoryAttestationStore
    private var frozen: StoredKey?

    init(_ base: MemoryAttestationStore) { self.base = base }

    func freeze(_ key: StoredKey) { self.frozen = key }

    func loadKey(keyID: [UInt8]) async throws(StoreError) -> StoredKey? {
        if let frozen, frozen.keyID == keyID {
            self.frozen = nil
            return frozen
        }
        return try await self.base.loadKey(keyID: keyID)
    }

    func requireReattestation(keyID: [UInt8]) async throws(StoreError) { try await self.base.requireReattestation(keyID: keyID) }
    func keys(username: String) async throws(StoreError) -> [StoredKey] { try await self.base.keys(username: username) }
    func countKeys(username: String, _ filter: KeyCountFilter) async throws(StoreError) -> Int {
        try await self.base.countKeys(username: username, filter)
    }
    func replaceReceipt(keyID: [UInt8], previous: [UInt8], with receipt: [UInt8]) async throws(StoreError) -> Bool {
        try await self.base.replaceReceipt(keyID: keyID, previous: previous, with: receipt)
    }
    func issueChallenge(_ challenge: IssuedChallenge) async throws(StoreError) { try await self.base.issueChallenge(challenge) }
    func isFormHashRecorded(_ formHash: [UInt8], now: Date) async throws(StoreError) -> Bool {
        try await self.base.isFormHashRecorded(formHash, now: now)
    }
    func commitRegistration(_ commit: RegistrationCommit) async throws(StoreError) { try await self.base.commitRegistration(commit) }
    func commitAssertion(_ commit: AssertionCommit) async throws(StoreError) { try await self.base.commitAssertion(commit) }
    func loadPasskey(credentialID: [UInt8]) async throws(StoreError) -> StoredPasskey? { try await self.base.loadPasskey(credentialID: credentialID) }
    func passkeys(username: String) async throws(StoreError) -> [StoredPasskey] { try await self.base.passkeys(username: username) }
    func passkeyCredentials(username: String) async throws(StoreError) -> PasskeyCredentials {
        try await self.base.passkeyCredentials(username: username)
    }
    func countPasskeys(username: String, _ filter: KeyCountFilter) async throws(StoreError) -> Int {
        try await self.base.countPasskeys(username: username, filter)
    }
    func commitPasskeyRegistration(_ commit: PasskeyRegistrationCommit) async throws(StoreError) {
        try await self.base.commitPasskeyRegistration(commit)
    }
}
