//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import Crypto
import FormAttestFlows
import FormAttestForm
import Foundation
import SQLiteAttestStore
import Testing

struct AttestFlowTests {
    @Test("local challenge: a key is registered while signing a form, and stored as specified")
    func registers() async throws {
        let harness = try FlowHarness()
        let key = harness.device.key(0)
        let form = FlowHarness.form()
        var request = try harness.attestRequest(key: key, form: form)
        request.claimedClientDataHash = try FlowHarness.hash(form)
        let outcome = try await harness.flows.attest(request, now: FlowHarness.now)
        #expect(outcome.counter == 0)
        #expect(outcome.form.clientDataHash == (try FlowHarness.hash(form)))
        let stored = try #require(try await harness.store.loadKey(keyID: key.keyID))
        #expect(stored.username == "alice")
        #expect(stored.counter == 0)
        #expect(stored.appID == FlowHarness.appID)
        #expect(stored.environment == .production)
        #expect(stored.publicKey == Array(key.publicKey.x963Representation))
        // The receipt is kept with the key (for risk-metric refreshes), and it verified.
        #expect(stored.receipt == outcome.attestation.receipt)
        let receipt = try #require(outcome.attestation.receiptCheck.verified)
        #expect(receipt.payload.type == .attest)
        #expect(receipt.payload.clientHash == (try FlowHarness.hash(form)))
        #expect(stored.createdAt == FlowHarness.now)
        #expect(outcome.nextChallenge == nil)
    }

    @Test("a receipt for another key: reported by default, rejected with nothing stored when receipts are required")
    func receiptPolicy() async throws {
        for required in [false, true] {
            let harness = try FlowHarness(requireValidReceipt: required)
            let key = harness.device.key(0)
            let form = FlowHarness.form()
            // A genuine receipt, signed by the simulated receipt CA, but for another key's certificate.
            let otherAttestation = try harness.device.attest(
                harness.device.key(1), clientDataHash: FlowHarness.hash(form), at: FlowHarness.now)
            let otherReceipt = try AttestationObject(cborEncoded: otherAttestation).statement.receipt
            var options = SimulatedDevice.AttestationOptions()
            options.receipt = otherReceipt
            let request = try harness.attestRequest(key: key, form: form, options: options)
            if required {
                await expectFlowError("receipt_certificate_mismatch", .verificationFailed) {
                    try await harness.flows.attest(request, now: FlowHarness.now)
                }
                #expect(try await harness.store.loadKey(keyID: key.keyID) == nil)
                #expect(try await harness.store.isFormHashRecorded(FlowHarness.hash(form), now: FlowHarness.now) == false)
            } else {
                let outcome = try await harness.flows.attest(request, now: FlowHarness.now)
                #expect(outcome.attestation.receiptCheck.error?.code == .receiptCertificateMismatch)
                #expect(try await harness.store.loadKey(keyID: key.keyID) != nil)
            }
        }
    }

    @Test("a claimed clientDataHash other than the form's is rejected")
    func claimedHashMismatch() async throws {
        let harness = try FlowHarness()
        var request = try harness.attestRequest(key: harness.device.key(0), form: FlowHarness.form())
        request.claimedClientDataHash = [UInt8](repeating: 0, count: 32)
        await expectFlowError("client_data_hash_mismatch", .verificationFailed) { try await harness.flows.attest(request, now: FlowHarness.now) }
        #expect(try await harness.store.loadKey(keyID: harness.device.key(0).keyID) == nil)
    }

    @Test("timestamps outside the window are rejected", arguments: [-301.0, 31.0])
    func window(offset: TimeInterval) async throws {
        let harness = try FlowHarness()
        let form = FlowHarness.form(at: FlowHarness.now.addingTimeInterval(offset))
        await expectFlowError("timestamp_outside_window", .policy) {
            try await harness.flows.attest(harness.attestRequest(key: harness.device.key(0), form: form), now: FlowHarness.now)
        }
    }

    @Test("the form's username must be the request's")
    func binding() async throws {
        let harness = try FlowHarness()
        let form = FlowHarness.form(user: "alice")
        await expectFlowError("binding_mismatch", .policy) {
            try await harness.flows.attest(harness.attestRequest(key: harness.device.key(0), form: form, user: "mallory"), now: FlowHarness.now)
        }
    }

    @Test("forms with duplicate names or lone surrogates are rejected, never merged")
    func strictForm() async throws {
        let harness = try FlowHarness()
        for form in [
            #"{"timestamp":"2026-11-22T10:00:00Z","username":"alice","to":"bob","to":"mallory"}"#,
            #"{"timestamp":"2026-11-22T10:00:00Z","username":"alice","to":"\udc00"}"#,
        ] {
            let request = FormFlows.AttestRequest(
                username: "alice", keyID: harness.device.key(0).keyID, attestationObject: [0xA0], form: Array(form.utf8))
            await expectFlowError("invalid_form_json", .malformedInput) { try await harness.flows.attest(request, now: FlowHarness.now) }
        }
    }

    @Test("a form used once cannot register a second key")
    func replay() async throws {
        let harness = try FlowHarness()
        let form = FlowHarness.form()
        _ = try await harness.flows.attest(harness.attestRequest(key: harness.device.key(0), form: form), now: FlowHarness.now)
        await expectFlowError("replay", .conflict) {
            try await harness.flows.attest(harness.attestRequest(key: harness.device.key(1), form: form), now: FlowHarness.now)
        }
        #expect(try await harness.store.loadKey(keyID: harness.device.key(1).keyID) == nil)
    }

    @Test("a keyId already registered is rejected")
    func keyAlreadyRegistered() async throws {
        let harness = try FlowHarness()
        try await harness.register(harness.device.key(0))
        await expectFlowError("key_already_registered", .conflict) {
            try await harness.flows.attest(
                harness.attestRequest(key: harness.device.key(0), form: FlowHarness.form(nonce: "again")), now: FlowHarness.now)
        }
    }

    @Test("a failed verification writes nothing: the same form still registers a genuine key afterwards")
    func failedVerificationWritesNothing() async throws {
        let harness = try FlowHarness()
        let form = FlowHarness.form()
        var options = SimulatedDevice.AttestationOptions()
        options.relyingPartyID = "ABCDE12345.com.other"
        await expectFlowError("app_id_mismatch", .verificationFailed) {
            try await harness.flows.attest(harness.attestRequest(key: harness.device.key(0), form: form, options: options), now: FlowHarness.now)
        }
        #expect(try await harness.store.loadKey(keyID: harness.device.key(0).keyID) == nil)
        _ = try await harness.flows.attest(harness.attestRequest(key: harness.device.key(0), form: form), now: FlowHarness.now)
    }

    @Test("a malformed attestation is malformed input, not a verification failure")
    func malformedAttestation() async throws {
        let harness = try FlowHarness()
        let request = FormFlows.AttestRequest(
            username: "alice", keyID: harness.device.key(0).keyID, attestationObject: [0xA1, 0x01], form: FlowHarness.form())
        await expectFlowError("malformed_attestation", .malformedInput) { try await harness.flows.attest(request, now: FlowHarness.now) }
    }
}

struct AssertFlowTests {
    @Test("assertions advance the counter, each form once")
    func signs() async throws {
        let harness = try FlowHarness()
        let key = harness.device.key(0)
        try await harness.register(key)
        for counter in UInt32(1)...3 {
            let form = FlowHarness.form(amount: "\(counter).00", nonce: "pay-\(counter)")
            let outcome = try await harness.flows.assert(harness.assertRequest(key: key, form: form, counter: counter), now: FlowHarness.now)
            #expect(outcome.assertion.counter == counter)
            #expect(outcome.key.counter == counter)
        }
        #expect(try await harness.store.loadKey(keyID: key.keyID)?.counter == 3)
    }

    @Test("an unknown keyId is key_mismatch: the client must attest")
    func unknownKey() async throws {
        let harness = try FlowHarness()
        await expectFlowError("key_mismatch", .keyMismatch) {
            try await harness.flows.assert(
                harness.assertRequest(key: harness.device.key(0), form: FlowHarness.form(), counter: 1), now: FlowHarness.now)
        }
    }

    @Test("a key registered by another user is key_mismatch")
    func otherUsersKey() async throws {
        let harness = try FlowHarness()
        try await harness.register(harness.device.key(0), user: "bob")
        await expectFlowError("key_mismatch", .keyMismatch) {
            try await harness.flows.assert(
                harness.assertRequest(key: harness.device.key(0), form: FlowHarness.form(user: "alice"), counter: 1), now: FlowHarness.now)
        }
        #expect(try await harness.store.loadKey(keyID: harness.device.key(0).keyID)?.counter == 0)
    }

    @Test("the same signed form twice: the second is a replay, even with a higher counter")
    func replay() async throws {
        let harness = try FlowHarness()
        let key = harness.device.key(0)
        try await harness.register(key)
        let form = FlowHarness.form(nonce: "pay")
        _ = try await harness.flows.assert(harness.assertRequest(key: key, form: form, counter: 1), now: FlowHarness.now)
        await expectFlowError("replay", .conflict) {
            try await harness.flows.assert(harness.assertRequest(key: key, form: form, counter: 2), now: FlowHarness.now)
        }
        #expect(try await harness.store.loadKey(keyID: key.keyID)?.counter == 1)
    }

    @Test("the same signed form resent after it was accepted is a replay, not a reason to re-attest")
    func resentForm() async throws {
        let harness = try FlowHarness()
        let key = harness.device.key(0)
        try await harness.register(key)
        let request = try harness.assertRequest(key: key, form: FlowHarness.form(nonce: "retry"), counter: 1)
        _ = try await harness.flows.assert(request, now: FlowHarness.now)
        await expectFlowError("replay", .conflict) { try await harness.flows.assert(request, now: FlowHarness.now) }
    }

    @Test("strict counter rule: a validly signed counter that went backwards retires the key: a higher counter later is refused too")
    func counterBackwards() async throws {
        var configuration = FlowConfiguration()
        configuration.counterRule = .strict
        let harness = try FlowHarness(configuration: configuration)
        let key = harness.device.key(0)
        try await harness.register(key)
        _ = try await harness.flows.assert(harness.assertRequest(key: key, form: FlowHarness.form(nonce: "a"), counter: 5), now: FlowHarness.now)
        await expectFlowError("requires_reattestation", .requiresReattestation) {
            try await harness.flows.assert(harness.assertRequest(key: key, form: FlowHarness.form(nonce: "b"), counter: 4), now: FlowHarness.now)
        }
        #expect(try await harness.store.loadKey(keyID: key.keyID)?.reattestationRequired == true)
        // Counter 6 would have been accepted before; the key is not trusted again.
        await expectFlowError("requires_reattestation", .requiresReattestation) {
            try await harness.flows.assert(harness.assertRequest(key: key, form: FlowHarness.form(nonce: "c"), counter: 6), now: FlowHarness.now)
        }
        #expect(try await harness.store.loadKey(keyID: key.keyID)?.counter == 5)
        // A new attestation (a new key) restores trust.
        let fresh = harness.device.key(1)
        try await harness.register(fresh, nonce: "new-key")
        _ = try await harness.flows.assert(harness.assertRequest(key: fresh, form: FlowHarness.form(nonce: "d"), counter: 1), now: FlowHarness.now)
    }

    @Test("a counter that went backwards but with a bad signature retires nothing (only the key's holder can)")
    func counterBackwardsForged() async throws {
        let harness = try FlowHarness()
        let key = harness.device.key(0)
        try await harness.register(key)
        _ = try await harness.flows.assert(harness.assertRequest(key: key, form: FlowHarness.form(nonce: "a"), counter: 5), now: FlowHarness.now)
        var options = SimulatedDevice.AssertionOptions()
        options.signingKey = harness.device.key(1).privateKey
        let form = FlowHarness.form(nonce: "b")
        let forged = FormFlows.AssertRequest(
            username: "alice",
            keyID: key.keyID,
            assertion: try harness.device.assert(key, clientDataHash: FlowHarness.hash(form), counter: 1, options: options),
            form: form
        )
        await expectFlowError("signature_invalid", .verificationFailed) { try await harness.flows.assert(forged, now: FlowHarness.now) }
        #expect(try await harness.store.loadKey(keyID: key.keyID)?.reattestationRequired == false)
        _ = try await harness.flows.assert(harness.assertRequest(key: key, form: FlowHarness.form(nonce: "c"), counter: 6), now: FlowHarness.now)
    }

    @Test("a key older than the configured age requires re-attestation")
    func oldKey() async throws {
        let harness = try FlowHarness(configuration: FlowConfiguration(maximumKeyAge: 86_400))
        let key = harness.device.key(0)
        try await harness.register(key)
        let later = FlowHarness.now.addingTimeInterval(86_401)
        await expectFlowError("requires_reattestation", .requiresReattestation) {
            try await harness.flows.assert(harness.assertRequest(key: key, form: FlowHarness.form(at: later), counter: 1), now: later)
        }
    }

    @Test("a signature over another form is rejected and writes nothing")
    func wrongForm() async throws {
        let harness = try FlowHarness()
        let key = harness.device.key(0)
        try await harness.register(key)
        var request = try harness.assertRequest(key: key, form: FlowHarness.form(amount: "10.00"), counter: 1)
        request.form = FlowHarness.form(amount: "9999.00")
        await expectFlowError("signature_invalid", .verificationFailed) { try await harness.flows.assert(request, now: FlowHarness.now) }
        #expect(try await harness.store.loadKey(keyID: key.keyID)?.counter == 0)
        // The genuine form was not recorded as used by the failed attempt.
        _ = try await harness.flows.assert(
            harness.assertRequest(key: key, form: FlowHarness.form(amount: "9999.00"), counter: 1), now: FlowHarness.now)
    }

    @Test("an unavailable store fails closed with store_unavailable and changes nothing")
    func storeDown() async throws {
        let store = MemoryAttestationStore()
        let harness = try FlowHarness(store: store)
        let key = harness.device.key(0)
        try await harness.register(key)
        await store.setUnavailable(true)
        await expectFlowError("store_unavailable", .storeUnavailable) {
            try await harness.flows.assert(harness.assertRequest(key: key, form: FlowHarness.form(nonce: "x"), counter: 1), now: FlowHarness.now)
        }
        await store.setUnavailable(false)
        #expect(try await store.loadKey(keyID: key.keyID)?.counter == 0)
        _ = try await harness.flows.assert(harness.assertRequest(key: key, form: FlowHarness.form(nonce: "x"), counter: 1), now: FlowHarness.now)
    }

    @Test("concurrent submissions of one signed form through the flows: exactly one accepted (SQLite)")
    func concurrentSubmissions() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("flows-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let harness = try FlowHarness(store: try SQLiteAttestationStore(path: directory.appendingPathComponent("s.sqlite").path))
        let key = harness.device.key(0)
        try await harness.register(key)
        let request = try harness.assertRequest(key: key, form: FlowHarness.form(nonce: "once"), counter: 1)
        let accepted = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<16 {
                group.addTask { (try? await harness.flows.assert(request, now: FlowHarness.now)) != nil }
            }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(accepted == 1)
    }
}

struct ChallengeFlowTests {
    static func challengeText(_ challenge: IssuedChallenge) -> String { Base64URL.encode(challenge.value) }

    @Test("a server challenge is answered once, by the right user, before it expires")
    func serverChallenge() async throws {
        let harness = try FlowHarness()
        let key = harness.device.key(0)
        let challenge = try await harness.flows.issueChallenge(purpose: .form, username: "alice", now: FlowHarness.now)
        #expect(challenge.value.count == 32)
        #expect(challenge.expiresAt == FlowHarness.now.addingTimeInterval(120))
        let form = FlowHarness.form(nonce: "c1", challenge: Self.challengeText(challenge))
        _ = try await harness.flows.attest(harness.attestRequest(key: key, form: form), now: FlowHarness.now)
        // Used: another form answering the same challenge is refused.
        await expectFlowError("challenge_invalid", .policy) {
            try await harness.flows.assert(
                harness.assertRequest(key: key, form: FlowHarness.form(nonce: "c2", challenge: Self.challengeText(challenge)), counter: 1),
                now: FlowHarness.now)
        }
    }

    @Test("a challenge for another user, another purpose, expired, or unknown is refused")
    func wrongChallenge() async throws {
        let harness = try FlowHarness()
        let key = harness.device.key(0)
        try await harness.register(key)
        let bobs = try await harness.flows.issueChallenge(purpose: .form, username: "bob", now: FlowHarness.now)
        let pool = try await harness.flows.issueChallenge(purpose: .pool, username: "alice", now: FlowHarness.now)
        let old = try await harness.flows.issueChallenge(purpose: .form, username: "alice", now: FlowHarness.now.addingTimeInterval(-121))
        for (index, text) in [
            Self.challengeText(bobs), Self.challengeText(pool), Self.challengeText(old), Base64URL.encode([UInt8](repeating: 9, count: 32)),
        ].enumerated() {
            await expectFlowError("challenge_invalid", .policy) {
                try await harness.flows.assert(
                    harness.assertRequest(key: key, form: FlowHarness.form(nonce: "w\(index)", challenge: text), counter: UInt32(index + 1)),
                    now: FlowHarness.now)
            }
        }
        #expect(try await harness.store.loadKey(keyID: key.keyID)?.counter == 0)
    }

    @Test("requireServerChallenge refuses forms without one")
    func required() async throws {
        let harness = try FlowHarness(configuration: FlowConfiguration(requireServerChallenge: true))
        await expectFlowError("challenge_required", .policy) { try await harness.register(harness.device.key(0)) }
    }

    @Test("rotation returns a fresh challenge with every answer and every error")
    func rotation() async throws {
        let harness = try FlowHarness(configuration: FlowConfiguration(rotateChallenges: true))
        let outcome = try await harness.register(harness.device.key(0))
        let next = try #require(outcome.nextChallenge)
        #expect(next.purpose == .form)
        #expect(next.username == "alice")
        do {
            _ = try await harness.register(harness.device.key(0), nonce: "again")
            Issue.record("a second registration of one key succeeded")
        } catch let error as FlowError {
            #expect(error.code == .keyAlreadyRegistered)
            #expect(error.nextChallenge != nil)
            #expect(error.nextChallenge?.value != next.value)
        }
    }
}

struct PooledFlowTests {
    @Test("an extension registers a pooled key and signs a form in one call; the pool challenge works once")
    func pooled() async throws {
        let harness = try FlowHarness()
        let poolChallenge = try await harness.flows.issueChallenge(purpose: .pool, username: nil, now: FlowHarness.now)
        #expect(poolChallenge.expiresAt == FlowHarness.now.addingTimeInterval(30 * 86_400))
        // The main app attests a key over the pool challenge, days before the extension uses it.
        let key = harness.device.key(0)
        let attestation = try harness.device.attest(key, clientDataHash: poolChallenge.value, at: FlowHarness.now)
        let form = FlowHarness.form(nonce: "ext")
        let request = FormFlows.PooledRequest(
            username: "alice",
            keyID: key.keyID,
            attestationObject: attestation,
            poolChallenge: poolChallenge.value,
            assertion: try harness.device.assert(key, clientDataHash: FlowHarness.hash(form), counter: 1),
            form: form
        )
        let outcome = try await harness.flows.registerPooled(request, now: FlowHarness.now)
        #expect(outcome.counter == 1)
        #expect(try await harness.store.loadKey(keyID: key.keyID)?.counter == 1)

        // The pool challenge is spent: another key attested over it is refused.
        let other = harness.device.key(1)
        let form2 = FlowHarness.form(nonce: "ext2")
        let second = FormFlows.PooledRequest(
            username: "alice",
            keyID: other.keyID,
            attestationObject: try harness.device.attest(other, clientDataHash: poolChallenge.value, at: FlowHarness.now),
            poolChallenge: poolChallenge.value,
            assertion: try harness.device.assert(other, clientDataHash: FlowHarness.hash(form2), counter: 1),
            form: form2
        )
        await expectFlowError("challenge_invalid", .policy) { try await harness.flows.registerPooled(second, now: FlowHarness.now) }
        #expect(try await harness.store.loadKey(keyID: other.keyID) == nil)
    }

    @Test("a pooled registration whose assertion fails writes nothing and leaves the pool challenge usable")
    func pooledFailure() async throws {
        let harness = try FlowHarness()
        let poolChallenge = try await harness.flows.issueChallenge(purpose: .pool, username: nil, now: FlowHarness.now)
        let key = harness.device.key(0)
        let form = FlowHarness.form(nonce: "ext")
        var request = FormFlows.PooledRequest(
            username: "alice",
            keyID: key.keyID,
            attestationObject: try harness.device.attest(key, clientDataHash: poolChallenge.value, at: FlowHarness.now),
            poolChallenge: poolChallenge.value,
            assertion: try harness.device.assert(harness.device.key(1), clientDataHash: FlowHarness.hash(form), counter: 1),
            form: form
        )
        await expectFlowError("signature_invalid", .verificationFailed) { try await harness.flows.registerPooled(request, now: FlowHarness.now) }
        request.assertion = try harness.device.assert(key, clientDataHash: FlowHarness.hash(form), counter: 1)
        _ = try await harness.flows.registerPooled(request, now: FlowHarness.now)
    }
}
