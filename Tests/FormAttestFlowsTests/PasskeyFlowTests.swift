//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttestSimulator
import Crypto
import FormAttestFlows
import FormAttestForm
import FormAttestTestSupport
import Foundation
import RFC3339
import Testing
import WebAuthn

/// Passkeys in the flows: registration with a one-time server challenge, forms confirmed by an App
/// Attest key, a passkey or both, and the factor policy. Each negative test changes one thing of
/// a request that is accepted.
struct PasskeyFlowTests {
    /// `*=app-attest,transfer=app-attest+passkey-uv`: the policy the issue names.
    static let transferPolicy = try! FactorPolicy(setting: "*=app-attest,transfer=app-attest+passkey-uv")

    static func harness(policy: FactorPolicy = .appAttestOnly, store: any AttestationStore = MemoryAttestationStore()) throws -> FlowHarness {
        var configuration = FlowConfiguration()
        configuration.factorPolicy = policy
        return try FlowHarness(store: store, configuration: configuration, webAuthn: try WebAuthnVerifier(policy: PasskeyDevice.policy()))
    }

    static func form(action: String? = "transfer", nonce: String = "n-1", user: String = "alice") -> [UInt8] {
        let actionField = action.map { #", "action": "\#($0)""# } ?? ""
        return Array(
            #"{"to": "bob", "amount": "10.00", "username": "\#(user)", "timestamp": "\#(RFC3339UTC.format(FlowHarness.now))", "nonce": "\#(nonce)"\#(actionField)}"#
                .utf8)
    }

    /// Registers `device` for `user` through the options and registration flows.
    @discardableResult
    static func register(_ device: PasskeyDevice, _ harness: FlowHarness, user: String = "alice") async throws -> FormFlows.PasskeyRegistrationOutcome
    {
        let options = try await harness.flows.passkeyRegistrationOptions(username: user, now: FlowHarness.now)
        return try await harness.flows.registerPasskey(
            .init(
                username: user, challenge: options.challenge.value, userHandle: options.userHandle,
                response: device.register(challenge: options.challenge.value)),
            now: FlowHarness.now)
    }

    /// An App Attest key registered for alice, its assertion over `form` with `counter`.
    static func appAttest(_ harness: FlowHarness, form: [UInt8], counter: UInt32 = 1, register: Bool = true) async throws
        -> FormFlows.AppAttestSignature
    {
        let key = harness.device.key(0)
        if register { try await harness.register(key) }
        let request = try harness.assertRequest(key: key, form: form, counter: counter)
        return FormFlows.AppAttestSignature(keyID: request.keyID, assertion: request.assertion)
    }

    @Test("a passkey is registered with a one-time passkey challenge and stored as verified; the challenge is spent")
    func registration() async throws {
        let harness = try Self.harness()
        var device = PasskeyDevice()
        device.signCount = 7
        let options = try await harness.flows.passkeyRegistrationOptions(username: "alice", now: FlowHarness.now)
        #expect(options.challenge.purpose == .passkey && options.relyingPartyID == PasskeyDevice.rpID && options.excludeCredentials.isEmpty)
        let response = device.register(challenge: options.challenge.value)
        let outcome = try await harness.flows.registerPasskey(
            .init(username: "alice", challenge: options.challenge.value, userHandle: options.userHandle, response: response), now: FlowHarness.now)
        let stored = try #require(try await harness.store.loadPasskey(credentialID: device.credentialID))
        #expect(stored == outcome.passkey)
        #expect(stored.username == "alice" && stored.userHandle == options.userHandle && stored.signCount == 7 && stored.format == "none")
        #expect(stored.transports == ["internal", "hybrid"])  // the unregistered name is not kept
        #expect(stored.registration != nil && stored.createdAt == FlowHarness.now)
        // The challenge is spent: the same response again is refused, and stores nothing new
        // (approved by the passkey alice now has, so that the challenge is what refuses it).
        var second = PasskeyDevice(id: 2)
        second.key = device.key
        let approval = device.sign(challenge: options.challenge.value)
        await expectFlowError("challenge_invalid", .policy) {
            try await harness.flows.registerPasskey(
                .init(
                    username: "alice", challenge: options.challenge.value, userHandle: options.userHandle,
                    response: second.register(challenge: options.challenge.value), approval: approval),
                now: FlowHarness.now)
        }
        #expect(try await harness.store.loadPasskey(credentialID: second.credentialID) == nil)
        // A second passkey of alice's gets the same user handle, and the first is excluded.
        let next = try await harness.flows.passkeyRegistrationOptions(username: "alice", now: FlowHarness.now)
        #expect(next.userHandle == options.userHandle && next.excludeCredentials == [device.credentialID])
    }

    @Test("a registration is refused, and stores nothing, with one thing changed")
    func registrationRefusals() async throws {
        let harness = try Self.harness()
        let device = PasskeyDevice()
        let options = try await harness.flows.passkeyRegistrationOptions(username: "alice", now: FlowHarness.now)
        let challenge = options.challenge.value
        // Another user's challenge.
        await expectFlowError("challenge_invalid", .policy) {
            try await harness.flows.registerPasskey(
                .init(username: "bob", challenge: challenge, userHandle: options.userHandle, response: device.register(challenge: challenge)),
                now: FlowHarness.now)
        }
        // A challenge the server never issued (the response signs it faithfully, with the handle
        // a first passkey has for it).
        let unissued = [UInt8](repeating: 0x5A, count: 32)
        await expectFlowError("challenge_invalid", .policy) {
            try await harness.flows.registerPasskey(
                .init(
                    username: "alice", challenge: unissued, userHandle: FormFlows.firstUserHandle(challenge: unissued),
                    response: device.register(challenge: unissued)),
                now: FlowHarness.now)
        }
        // The response answers another challenge than the one claimed.
        await expectFlowError("passkey_challenge_mismatch", .verificationFailed) {
            try await harness.flows.registerPasskey(
                .init(username: "alice", challenge: challenge, userHandle: options.userHandle, response: device.register(challenge: unissued)),
                now: FlowHarness.now)
        }
        // Another origin.
        var foreign = device
        foreign.origin = "https://evil.example"
        await expectFlowError("passkey_origin_not_allowed", .verificationFailed) {
            try await harness.flows.registerPasskey(
                .init(username: "alice", challenge: challenge, userHandle: options.userHandle, response: foreign.register(challenge: challenge)),
                now: FlowHarness.now)
        }
        // An empty user handle.
        await expectFlowError("invalid_request", .malformedInput) {
            try await harness.flows.registerPasskey(
                .init(username: "alice", challenge: challenge, userHandle: [], response: device.register(challenge: challenge)), now: FlowHarness.now)
        }
        #expect(try await harness.store.passkeys(username: "alice").isEmpty)
        #expect(try await harness.store.passkeys(username: "bob").isEmpty)
        // And the challenge is still good for the genuine request.
        _ = try await harness.flows.registerPasskey(
            .init(username: "alice", challenge: challenge, userHandle: options.userHandle, response: device.register(challenge: challenge)),
            now: FlowHarness.now)
        // The same credential again, with a fresh challenge (and its own approval): already registered.
        let again = try await harness.flows.passkeyRegistrationOptions(username: "alice", now: FlowHarness.now)
        var approver = device
        let approval = approver.sign(challenge: again.challenge.value)
        await expectFlowError("passkey_already_registered", .conflict) {
            try await harness.flows.registerPasskey(
                .init(
                    username: "alice", challenge: again.challenge.value, userHandle: again.userHandle,
                    response: device.register(challenge: again.challenge.value), approval: approval),
                now: FlowHarness.now)
        }
        // Alice's second passkey must use alice's user handle.
        let other = PasskeyDevice(id: 3)
        let third = try await harness.flows.passkeyRegistrationOptions(username: "alice", now: FlowHarness.now)
        await expectFlowError("invalid_request", .malformedInput) {
            try await harness.flows.registerPasskey(
                .init(
                    username: "alice", challenge: third.challenge.value, userHandle: [UInt8](repeating: 9, count: 32),
                    response: other.register(challenge: third.challenge.value)),
                now: FlowHarness.now)
        }
    }

    @Test("without passkey settings, passkey requests are refused with passkeys_disabled")
    func disabled() async throws {
        let harness = try FlowHarness()
        await expectFlowError("passkeys_disabled", .policy) {
            try await harness.flows.passkeyRegistrationOptions(username: "alice", now: FlowHarness.now)
        }
        var device = PasskeyDevice()
        let form = Self.form()
        let signature = try await Self.appAttest(harness, form: form)
        await expectFlowError("passkeys_disabled", .policy) {
            try await harness.flows.confirm(
                .init(username: "alice", appAttest: signature, passkey: device.sign(challenge: FlowHarness.hash(form)), form: form),
                now: FlowHarness.now)
        }
    }

    @Test("a form signed by both factors is accepted once; again with either factor it is a replay")
    func bothFactors() async throws {
        let harness = try Self.harness(policy: Self.transferPolicy)
        var device = PasskeyDevice()
        device.signCount = 1
        try await Self.register(device, harness)
        let form = Self.form()
        let hash = try FlowHarness.hash(form)
        let signature = try await Self.appAttest(harness, form: form)
        let passkeyAssertion = device.sign(challenge: hash)
        let outcome = try await harness.flows.confirm(
            .init(username: "alice", appAttest: signature, passkey: passkeyAssertion, form: form), now: FlowHarness.now)
        #expect(outcome.requirement == FactorRequirement(appAttest: true, passkey: true, userVerification: true))
        #expect(outcome.key?.counter == 1 && outcome.passkey?.signCount == 2 && outcome.passkeyAssertion?.userVerified == true)
        #expect(try await harness.store.loadPasskey(credentialID: device.credentialID)?.signCount == 2)
        #expect(try await harness.store.loadKey(keyID: signature.keyID)?.counter == 1)
        // The same form again: by both, by the key alone (which the policy would refuse as
        // passkey_required for a new form), by the key and a new passkey assertion.
        await expectFlowError("replay", .conflict) {
            try await harness.flows.confirm(
                .init(username: "alice", appAttest: signature, passkey: passkeyAssertion, form: form), now: FlowHarness.now)
        }
        let later = try await Self.appAttest(harness, form: form, counter: 2, register: false)
        await expectFlowError("replay", .conflict) {
            try await harness.flows.confirm(.init(username: "alice", appAttest: later, passkey: nil, form: form), now: FlowHarness.now)
        }
        let fresh = device.sign(challenge: hash)
        await expectFlowError("replay", .conflict) {
            try await harness.flows.confirm(.init(username: "alice", appAttest: later, passkey: fresh, form: form), now: FlowHarness.now)
        }
        #expect(try await harness.store.loadPasskey(credentialID: device.credentialID)?.signCount == 2)
        #expect(try await harness.store.loadKey(keyID: signature.keyID)?.counter == 1)
    }

    @Test("the factor policy: a transfer needs a passkey with UV; other forms need App Attest alone")
    func factorPolicy() async throws {
        let harness = try Self.harness(policy: Self.transferPolicy)
        var device = PasskeyDevice()
        try await Self.register(device, harness)
        let transfer = Self.form()
        let signature = try await Self.appAttest(harness, form: transfer)
        // App Attest alone: refused with its code, through confirm and through assert alike.
        await expectFlowError("passkey_required", .factorMissing) {
            try await harness.flows.confirm(.init(username: "alice", appAttest: signature, passkey: nil, form: transfer), now: FlowHarness.now)
        }
        await expectFlowError("passkey_required", .factorMissing) {
            try await harness.flows.assert(
                .init(username: "alice", keyID: signature.keyID, assertion: signature.assertion, form: transfer), now: FlowHarness.now)
        }
        // A passkey without UV.
        var unverified = device
        unverified.flags = 0x01
        await expectFlowError("user_verification_required", .factorMissing) {
            try await harness.flows.confirm(
                .init(username: "alice", appAttest: signature, passkey: unverified.sign(challenge: FlowHarness.hash(transfer)), form: transfer),
                now: FlowHarness.now)
        }
        // A passkey alone.
        await expectFlowError("app_attest_required", .factorMissing) {
            try await harness.flows.confirm(
                .init(username: "alice", appAttest: nil, passkey: device.sign(challenge: FlowHarness.hash(transfer)), form: transfer),
                now: FlowHarness.now)
        }
        // None of these stored anything: the form is still accepted with both, and only then a
        // missing factor is named a replay.
        #expect(try await harness.store.isFormHashRecorded(FlowHarness.hash(transfer), now: FlowHarness.now) == false)
        _ = try await harness.flows.confirm(
            .init(username: "alice", appAttest: signature, passkey: device.sign(challenge: FlowHarness.hash(transfer)), form: transfer),
            now: FlowHarness.now)
        await expectFlowError("replay", .conflict) {
            try await harness.flows.confirm(.init(username: "alice", appAttest: signature, passkey: nil, form: transfer), now: FlowHarness.now)
        }
        // Another action needs App Attest alone, through assert as before.
        let payment = Self.form(action: "payment", nonce: "n-2")
        let second = try await Self.appAttest(harness, form: payment, counter: 2, register: false)
        _ = try await harness.flows.assert(
            .init(username: "alice", keyID: second.keyID, assertion: second.assertion, form: payment), now: FlowHarness.now)
    }

    @Test(
        "a registration accepts its form too: under the transfer policy a key attested over a transfer is refused (passkey_required), nothing stored")
    func registrationFollowsThePolicy() async throws {
        let harness = try Self.harness(policy: Self.transferPolicy)
        let key = harness.device.key(0)
        let transfer = Self.form()
        await expectFlowError("passkey_required", .factorMissing) {
            try await harness.flows.attest(harness.attestRequest(key: key, form: transfer), now: FlowHarness.now)
        }
        #expect(try await harness.store.isFormHashRecorded(FlowHarness.hash(transfer), now: FlowHarness.now) == false)
        #expect(try await harness.store.loadKey(keyID: key.keyID) == nil)
        // The one thing changed: a form whose action App Attest alone satisfies registers the key.
        let order = Self.form(action: "standing-order", nonce: "n-3")
        _ = try await harness.flows.attest(harness.attestRequest(key: key, form: order), now: FlowHarness.now)
        #expect(try await harness.store.loadKey(keyID: key.keyID) != nil)
    }

    @Test("the default policy is App Attest alone: a passkey alone is refused, with it the form is accepted as before")
    func defaultPolicy() async throws {
        let harness = try Self.harness()
        var device = PasskeyDevice()
        try await Self.register(device, harness)
        let form = Self.form()
        await expectFlowError("app_attest_required", .factorMissing) {
            try await harness.flows.confirm(
                .init(username: "alice", appAttest: nil, passkey: device.sign(challenge: FlowHarness.hash(form)), form: form), now: FlowHarness.now)
        }
        let signature = try await Self.appAttest(harness, form: form)
        _ = try await harness.flows.assert(
            .init(username: "alice", keyID: signature.keyID, assertion: signature.assertion, form: form), now: FlowHarness.now)
        // A passkey-only policy accepts a synced passkey (count 0) for each form once.
        let passkeyOnly = try Self.harness(policy: try FactorPolicy(setting: "*=passkey"))
        var synced = PasskeyDevice(id: 4)
        synced.flags = 0x01 | 0x04 | 0x08 | 0x10
        try await Self.register(synced, passkeyOnly)
        let first = Self.form(nonce: "s-1")
        let outcome = try await passkeyOnly.flows.confirm(
            .init(username: "alice", appAttest: nil, passkey: synced.sign(challenge: FlowHarness.hash(first)), form: first), now: FlowHarness.now)
        #expect(outcome.key == nil && outcome.passkey?.signCount == 0 && outcome.passkey?.backedUp == true)
        let secondForm = Self.form(nonce: "s-2")
        _ = try await passkeyOnly.flows.confirm(
            .init(username: "alice", appAttest: nil, passkey: synced.sign(challenge: FlowHarness.hash(secondForm)), form: secondForm),
            now: FlowHarness.now)
        await expectFlowError("replay", .conflict) {
            try await passkeyOnly.flows.confirm(
                .init(username: "alice", appAttest: nil, passkey: synced.sign(challenge: FlowHarness.hash(first)), form: first), now: FlowHarness.now)
        }
    }

    @Test("a passkey assertion is refused, and nothing is stored, with one thing changed")
    func assertionRefusals() async throws {
        let harness = try Self.harness(policy: try FactorPolicy(setting: "*=passkey"))
        var device = PasskeyDevice()
        device.signCount = 5
        let registered = try await Self.register(device, harness)
        let form = Self.form()
        let hash = try FlowHarness.hash(form)
        func confirm(_ json: [UInt8], user: String = "alice", form: [UInt8] = form) async throws -> FormFlows.ConfirmOutcome {
            try await harness.flows.confirm(.init(username: user, appAttest: nil, passkey: json, form: form), now: FlowHarness.now)
        }
        // Over another form (the challenge is that form's hash).
        var copy = device
        await expectFlowError("passkey_challenge_mismatch", .verificationFailed) {
            try await confirm(copy.sign(challenge: FlowHarness.hash(Self.form(nonce: "other"))))
        }
        // Another user (bob signs alice's credential into his own form).
        copy = device
        await expectFlowError("passkey_mismatch", .keyMismatch) {
            try await confirm(copy.sign(challenge: FlowHarness.hash(Self.form(user: "bob"))), user: "bob", form: Self.form(user: "bob"))
        }
        // An unknown credential.
        var stranger = PasskeyDevice(id: 8)
        await expectFlowError("passkey_mismatch", .keyMismatch) { try await confirm(stranger.sign(challenge: hash)) }
        // Another key signs for the registered credential id.
        copy = device
        copy.key = P256.Signing.PrivateKey()
        await expectFlowError("passkey_signature_invalid", .verificationFailed) { try await confirm(copy.sign(challenge: hash)) }
        // A user handle that is not the credential's.
        copy = device
        copy.userHandle = [UInt8](repeating: 1, count: 32)
        await expectFlowError("passkey_user_handle_mismatch", .verificationFailed) { try await confirm(copy.sign(challenge: hash)) }
        // A count that does not increase (a cloned authenticator).
        copy = device
        copy.signCount = 4
        await expectFlowError("passkey_sign_count_not_increasing", .verificationFailed) { try await confirm(copy.sign(challenge: hash)) }
        // Another origin.
        copy = device
        copy.origin = "https://evil.example"
        await expectFlowError("passkey_origin_not_allowed", .verificationFailed) { try await confirm(copy.sign(challenge: hash)) }
        // Not a response at all.
        await expectFlowError("passkey_malformed_response", .malformedInput) { try await confirm(Array(#"{"id":"x"}"#.utf8)) }
        #expect(try await harness.store.isFormHashRecorded(hash, now: FlowHarness.now) == false)
        #expect(try await harness.store.loadPasskey(credentialID: device.credentialID)?.signCount == 5)
        // The genuine one, with its user handle returned: accepted.
        copy = device
        copy.userHandle = registered.passkey.userHandle
        let outcome = try await confirm(copy.sign(challenge: hash))
        #expect(outcome.passkey?.signCount == 6)
        // Revoked: refused.
        let store = try #require(harness.store as? MemoryAttestationStore)
        try await store.revokePasskey(credentialID: device.credentialID, at: FlowHarness.now)
        let next = Self.form(nonce: "n-2")
        copy = device
        copy.signCount = 10
        await expectFlowError("passkey_revoked", .keyMismatch) { try await confirm(copy.sign(challenge: FlowHarness.hash(next)), form: next) }
    }

    @Test(
        "with evidence records on, a passkey whose registration was not kept is refused (key_attestation_unverifiable) and nothing is stored; without them, or with it kept, it confirms"
    )
    func registrationKeptForEvidence() async throws {
        for evidence in [true, false] {
            var configuration = FlowConfiguration()
            configuration.factorPolicy = try FactorPolicy(setting: "*=passkey")
            configuration.requireVerifiableKeyAttestation = evidence
            let store = MemoryAttestationStore()
            let harness = try FlowHarness(store: store, configuration: configuration, webAuthn: try WebAuthnVerifier(policy: PasskeyDevice.policy()))
            // A passkey registered through the flow keeps its registration: it confirms, and the
            // outcome carries the assertion as received and the count it was checked against.
            var kept = PasskeyDevice()
            try await Self.register(kept, harness)
            let first = Self.form(nonce: "kept")
            let outcome = try await harness.flows.confirm(
                .init(username: "alice", appAttest: nil, passkey: kept.sign(challenge: try SignedForm(jsonBytes: first).clientDataHash), form: first),
                now: FlowHarness.now)
            #expect(outcome.passkeyResponse?.rawID == kept.credentialID && outcome.passkeyPreviousSignCount == 0)
            // Another passkey of alice's, stored without its registration (a store that lost it).
            var lost = PasskeyDevice(id: 2)
            lost.userHandle = nil
            var stored = try await Self.register(lost, try Self.harness()).passkey
            stored.userHandle = try #require(try await store.loadPasskey(credentialID: kept.credentialID)).userHandle
            stored.registration = nil
            try await store.commitPasskeyRegistration(PasskeyRegistrationCommit(passkey: stored, challenges: [], now: FlowHarness.now))
            let form = Self.form(nonce: "lost")
            let hash = try SignedForm(jsonBytes: form).clientDataHash
            let request = FormFlows.ConfirmRequest(username: "alice", appAttest: nil, passkey: lost.sign(challenge: hash), form: form)
            if evidence {
                await expectFlowError("key_attestation_unverifiable", .requiresReattestation) {
                    try await harness.flows.confirm(request, now: FlowHarness.now)
                }
                #expect(try await store.isFormHashRecorded(hash, now: FlowHarness.now) == false)
            } else {
                #expect(try await harness.flows.confirm(request, now: FlowHarness.now).passkey?.credentialID == lost.credentialID)
            }
        }
    }

    @Test(
        "the factor policy setting is parsed strictly and prints as it reads",
        arguments: ["", "transfer", "*=", "*=app-attest+fingerprint", "a=passkey,a=passkey", "=passkey"])
    func policySetting(setting: String) throws {
        #expect(throws: FlowError.self) { try FactorPolicy(setting: setting) }
        let policy = try FactorPolicy(setting: "transfer=app-attest+passkey-uv,*=app-attest,login=passkey")
        #expect(policy.description == "*=app-attest,login=passkey,transfer=app-attest+passkey-uv")
        #expect(try FactorPolicy(setting: policy.description) == policy)
        #expect(FactorPolicy.appAttestOnly.description == "*=app-attest")
    }

    // MARK: - The sixth red team's findings (docs/reliability.md)

    @Test("R6-F1: a user who has a passkey adds another only with its approval (an assertion with UV over the registration's challenge)")
    func approval() async throws {
        let store = MemoryAttestationStore()
        let harness = try Self.harness(store: store)
        var first = PasskeyDevice(id: 1)
        try await Self.register(first, harness)
        let second = PasskeyDevice(id: 2)
        func attempt(approval: (inout PasskeyDevice, [UInt8]) -> [UInt8]?) async throws(FlowError) -> FormFlows.PasskeyRegistrationOutcome {
            let options = try await harness.flows.passkeyRegistrationOptions(username: "alice", now: FlowHarness.now)
            let challenge = options.challenge.value
            return try await harness.flows.registerPasskey(
                .init(
                    username: "alice", challenge: challenge, userHandle: options.userHandle, response: second.register(challenge: challenge),
                    approval: approval(&first, challenge)),
                now: FlowHarness.now)
        }
        // Without an approval: what code holding the user's session alone could send.
        await expectFlowError("passkey_approval_required", .factorMissing) { try await attempt { _, _ in nil } }
        // An approval without user verification.
        await expectFlowError("user_verification_required", .factorMissing) {
            try await attempt { device, challenge in
                var unverified = device
                unverified.flags = 0x01
                return unverified.sign(challenge: challenge)
            }
        }
        // An approval over another challenge (a form's).
        await expectFlowError("passkey_challenge_mismatch", .verificationFailed) {
            let formHash = try FlowHarness.hash(Self.form())
            return try await attempt { device, _ in device.sign(challenge: formHash) }
        }
        // An approval by a credential that is not alice's (bob's passkey).
        var bobs = PasskeyDevice(id: 9)
        try await Self.register(bobs, harness, user: "bob")
        await expectFlowError("passkey_mismatch", .keyMismatch) { try await attempt { _, challenge in bobs.sign(challenge: challenge) } }
        // An approval by a software key claiming alice's credential id: the signature is not hers.
        await expectFlowError("passkey_signature_invalid", .verificationFailed) {
            try await attempt { device, challenge in
                var impostor = device
                impostor.key = P256.Signing.PrivateKey()
                return impostor.sign(challenge: challenge)
            }
        }
        #expect(try await harness.store.loadPasskey(credentialID: second.credentialID) == nil)
        // With her passkey's approval: registered.
        let outcome = try await attempt { device, challenge in device.sign(challenge: challenge) }
        #expect(outcome.passkey.credentialID == second.credentialID)
        // Revoked by an operator, her passkeys no longer stand in the way: a new one needs none.
        try await store.revokePasskey(credentialID: first.credentialID, at: FlowHarness.now)
        try await store.revokePasskey(credentialID: second.credentialID, at: FlowHarness.now)
        try await Self.register(PasskeyDevice(id: 3), harness)
    }

    @Test("R6-F4: a first passkey's user handle is the one the options made of its challenge; another (bob's) is refused")
    func firstUserHandle() async throws {
        let harness = try Self.harness()
        let bobs = try await Self.register(PasskeyDevice(id: 9), harness, user: "bob")
        let options = try await harness.flows.passkeyRegistrationOptions(username: "alice", now: FlowHarness.now)
        #expect(options.userHandle == FormFlows.firstUserHandle(challenge: options.challenge.value) && options.userHandle != bobs.passkey.userHandle)
        let device = PasskeyDevice()
        await expectFlowError("invalid_request", .malformedInput) {
            try await harness.flows.registerPasskey(
                .init(
                    username: "alice", challenge: options.challenge.value, userHandle: bobs.passkey.userHandle,
                    response: device.register(challenge: options.challenge.value)),
                now: FlowHarness.now)
        }
        #expect(try await harness.store.passkeys(username: "alice").isEmpty)
        // The options' own handle is accepted with the same challenge.
        let registered = try await harness.flows.registerPasskey(
            .init(
                username: "alice", challenge: options.challenge.value, userHandle: options.userHandle,
                response: device.register(challenge: options.challenge.value)),
            now: FlowHarness.now)
        #expect(registered.passkey.userHandle == options.userHandle)
    }

    @Test("R6-F9: transports are kept once each, registered names only, in the order first reported")
    func transportsOnce() async throws {
        let harness = try Self.harness()
        var device = PasskeyDevice()
        device.transports = Array(repeating: "usb", count: 4_000) + ["internal", "usb", "carrier-pigeon", "internal", "nfc"]
        let outcome = try await Self.register(device, harness)
        #expect(outcome.passkey.transports == ["usb", "internal", "nfc"])
        #expect(try await harness.store.loadPasskey(credentialID: device.credentialID)?.transports == ["usb", "internal", "nfc"])
    }

    @Test("R6-F7: with rules by action, a form whose action is missing or not a string needs every factor the policy names")
    func missingAction() throws {
        let policy = Self.transferPolicy
        let strictest = FactorRequirement(appAttest: true, passkey: true, userVerification: true)
        #expect(policy.strictest == strictest)
        // A transfer form without an action, then with `action` as each value.
        let base = String(decoding: Self.form(action: nil), as: UTF8.self)
        func form(action: String?) throws -> SignedForm {
            guard let action else { return try SignedForm(jsonBytes: Array(base.utf8)) }
            return try SignedForm(jsonBytes: Array((base.dropLast() + #", "action": \#(action)}"#).utf8))
        }
        for (action, expected) in [
            (nil, strictest),
            (#"["transfer"]"#, strictest),
            (#"{"type":"transfer"}"#, strictest),
            ("null", strictest),
            ("1", strictest),
            (#""transfer""#, strictest),
            (#""login""#, FactorRequirement.appAttest),
            (#""Transfer""#, FactorRequirement.appAttest),  // a string no rule names: the default
        ] as [(String?, FactorRequirement)] {
            #expect(policy.requirement(for: try form(action: action)) == expected, "\(action ?? "no action")")
        }
        // Without rules by action there is nothing to shed: the default for every form.
        let plain = try FactorPolicy(setting: "*=app-attest+passkey")
        #expect(plain.requirement(for: try form(action: nil)) == plain.defaultRequirement)
    }
}
