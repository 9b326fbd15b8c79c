//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestFlows
import Foundation
import Testing

/// The contract's passkey checks: the same guarantees as the App Attest keys', on every store.
extension StoreContract {
    static func passkey(_ id: UInt8, user: String = "alice", signCount: UInt32 = 0, withRegistration: Bool = true) -> StoredPasskey {
        StoredPasskey(
            credentialID: [UInt8](repeating: id, count: 16 + Int(id % 7)),
            username: user,
            userHandle: [UInt8](repeating: 0xCC, count: 32),
            publicKey: [0xA5, 0x01, 0x02, 0x03, 0x26] + [UInt8](repeating: id, count: 70),
            signCount: signCount,
            backupEligible: id.isMultiple(of: 2),
            backedUp: id.isMultiple(of: 4),
            aaguid: [UInt8](repeating: 0xAD, count: 16),
            transports: id.isMultiple(of: 3) ? [] : ["internal", "hybrid"],
            format: "packed",
            createdAt: t0,
            lastUsed: t0,
            registration: withRegistration
                ? PasskeyRegistrationRecord(
                    attestationObject: [UInt8](repeating: 0xA3, count: 3_000) + [id], clientDataJSON: Array(#"{"type":"webauthn.create"}"#.utf8))
                : nil
        )
    }

    static func register(_ store: any StepwiseAttestationStore, _ passkey: StoredPasskey, limit: Int? = nil, now: Date? = nil) async throws {
        try await store.commitPasskeyRegistration(
            PasskeyRegistrationCommit(passkey: passkey, challenges: [], now: now ?? t0, maximumActiveCredentials: limit))
    }

    static func replay(_ id: UInt8) -> ReplayRecord { ReplayRecord(formHash: hash(id), expiresAt: t0.addingTimeInterval(3 * hour)) }

    static func use(_ id: UInt8, from previous: UInt32, to count: UInt32, backedUp: Bool = false) -> PasskeyUse {
        PasskeyUse(credentialID: passkey(id).credentialID, previousSignCount: previous, signCount: count, backedUp: backedUp)
    }

    static func passkeyLifecycle(_ make: Factory) async throws {
        let store = try await make()
        #expect(try await store.loadPasskey(credentialID: passkey(1).credentialID) == nil)
        // Alice: passkeys 1…5 registered at t0-50 … t0-10; two at t0 (the credential id orders
        // them); bob's; a user whose name differs by normalization.
        for id in UInt8(1)...5 {
            var stored = passkey(id, withRegistration: id != 3)
            stored.createdAt = t0.addingTimeInterval(Double(id) * 10 - 60)
            try await register(store, stored)
        }
        try await register(store, passkey(0x30))
        try await register(store, passkey(0x20))
        try await register(store, passkey(7, user: "bob"))
        try await register(store, passkey(8, user: "jose\u{301}"))
        var first = passkey(1)
        first.createdAt = t0.addingTimeInterval(-50)
        #expect(try await store.loadPasskey(credentialID: first.credentialID) == first)
        #expect(try await store.loadPasskey(credentialID: passkey(3).credentialID)?.registration == nil)
        #expect(try await store.loadPasskey(credentialID: passkey(6).credentialID) == nil)
        // A credential id is registered once, whoever asks.
        await expect(.duplicateKey) { try await register(store, passkey(1, user: "mallory")) }
        #expect(try await store.loadPasskey(credentialID: first.credentialID)?.username == "alice")

        let order = [UInt8(1), 2, 3, 4, 5, 0x20, 0x30].map { passkey($0).credentialID }
        #expect(try await store.passkeys(username: "alice").map(\.credentialID) == order)
        #expect(try await store.passkeys(username: "jos\u{E9}").isEmpty)  // no normalization
        #expect(try await store.countPasskeys(username: "alice", .all) == 7)
        #expect(try await store.countPasskeys(username: "jos\u{E9}", .all) == 0)
        // 4 (at the bound), 5 and the twins.
        #expect(try await store.countPasskeys(username: "alice", .createdSince(t0.addingTimeInterval(-20))) == 4)

        await expect(.unknownKey) { try await store.revokePasskey(credentialID: passkey(9).credentialID, at: t0) }
        try await store.revokePasskey(credentialID: passkey(2).credentialID, at: t0.addingTimeInterval(5))
        try await store.revokePasskey(credentialID: passkey(2).credentialID, at: t0.addingTimeInterval(50))  // the first time stays
        #expect(try await store.loadPasskey(credentialID: passkey(2).credentialID)?.revokedAt == t0.addingTimeInterval(5))
        #expect(try await store.countPasskeys(username: "alice", .active) == 6)
        #expect(try await store.countPasskeys(username: "alice", .all) == 7)
        // Keys are counted apart: a passkey is not an App Attest key.
        #expect(try await store.countKeys(username: "alice", .all) == 0)

        // What a registration reads, without a blob: the active ids in order, and the handle of
        // the user's first passkey, revoked or not (r5 F8).
        let credentials = try await store.passkeyCredentials(username: "alice")
        #expect(credentials.activeCredentialIDs == order.filter { $0 != passkey(2).credentialID })
        #expect(credentials.userHandle == passkey(1).userHandle)
        #expect(try await store.passkeyCredentials(username: "jos\u{E9}") == PasskeyCredentials(userHandle: nil, activeCredentialIDs: []))
        #expect(try await store.passkeyCredentials(username: "bob").activeCredentialIDs == [passkey(7, user: "bob").credentialID])
        var older = passkey(0x41, user: "carol")
        older.userHandle = [UInt8](repeating: 0x01, count: 16)
        older.createdAt = t0.addingTimeInterval(-100)
        var newer = passkey(0x40, user: "carol")
        newer.userHandle = [UInt8](repeating: 0x02, count: 16)
        try await register(store, newer)
        try await register(store, older)
        try await store.revokePasskey(credentialID: older.credentialID, at: t0)
        #expect(
            try await store.passkeyCredentials(username: "carol")
                == PasskeyCredentials(userHandle: older.userHandle, activeCredentialIDs: [newer.credentialID]))

        var listed: [[UInt8]] = []
        var position: KeyPosition?
        for _ in 0..<10 {
            let page = try await store.passkeys(username: "alice", after: position, limit: 3)
            #expect(page.count <= 3)
            listed += page.map(\.credentialID)
            guard let last = page.last, page.count == 3 else { break }
            position = KeyPosition(last)
        }
        #expect(listed == order)
        #expect(try await store.passkeys(username: "alice", after: nil, limit: 0).isEmpty)
        #expect(try await store.passkeys(username: "bob", after: nil, limit: 5) == [passkey(7, user: "bob")])
    }

    /// A first passkey (registered without approval) is stored only if, at its commit, the user
    /// has no active passkey and none of another user handle (red team r14 F1: two first
    /// registrations raced past the flows' check and both stored).
    static func firstPasskey(_ make: Factory) async throws {
        let store = try await make()
        let now = t0.addingTimeInterval(1)
        func commit(_ passkey: StoredPasskey, first: Bool = true, challenges: [ChallengeClaim] = []) async throws {
            try await store.commitPasskeyRegistration(
                PasskeyRegistrationCommit(passkey: passkey, challenges: challenges, now: now, firstPasskey: first))
        }
        try await store.issueChallenge(challenge(1, purpose: .passkey))
        let claim = ChallengeClaim(value: challenge(1).value, purpose: .passkey, username: "alice")
        // Another first passkey of alice's was stored since this one was checked: refused, nothing written.
        try await commit(passkey(1))
        await expect(.passkeyExists) { try await commit(passkey(2), challenges: [claim]) }
        #expect(try await store.loadPasskey(credentialID: passkey(2).credentialID) == nil)
        try await store.consumeChallenge(claim, now: now)  // still unused
        // An approved registration is stored beside the active one; bob's first is his own.
        try await commit(passkey(3), first: false)
        try await commit(passkey(4, user: "bob"))
        // Every passkey of alice's revoked: a first one again, of her handle, is stored; one of
        // another handle is not.
        try await store.revokePasskey(credentialID: passkey(1).credentialID, at: now)
        try await store.revokePasskey(credentialID: passkey(3).credentialID, at: now)
        var otherHandle = passkey(5)
        otherHandle.userHandle = [UInt8](repeating: 0xDD, count: 32)
        await expect(.passkeyExists) { try await commit(otherHandle) }
        try await commit(passkey(6))
        #expect(try await store.passkeyCredentials(username: "alice").activeCredentialIDs == [passkey(6).credentialID])
        // Eight first registrations of carol's at once: at most one is stored (one on a store that
        // serializes its commits; none is also fail-closed where each finds the other).
        let stored = await withTaskGroup(of: Bool.self) { group in
            for id in UInt8(20)..<28 { group.addTask { (try? await commit(passkey(id, user: "carol"))) != nil } }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(stored <= 1, "\(stored) first passkeys stored at once")
        #expect(try await store.passkeyCredentials(username: "carol").activeCredentialIDs.count == stored)
    }

    static func passkeyRegistration(_ make: Factory) async throws {
        let store = try await make()
        let now = t0.addingTimeInterval(1)
        try await store.issueChallenge(challenge(1, purpose: .passkey))
        let claim = ChallengeClaim(value: challenge(1).value, purpose: .passkey, username: "alice")
        // A challenge for another purpose, or an unknown one: nothing is written.
        try await store.issueChallenge(challenge(2, purpose: .form))
        await expect(.challengeInvalid) {
            try await store.commitPasskeyRegistration(
                PasskeyRegistrationCommit(
                    passkey: passkey(1), challenges: [ChallengeClaim(value: challenge(2).value, purpose: .passkey, username: "alice")], now: now))
        }
        await expect(.challengeInvalid) {
            try await store.commitPasskeyRegistration(
                PasskeyRegistrationCommit(
                    passkey: passkey(1), challenges: [claim, ChallengeClaim(value: challenge(9).value, purpose: .passkey, username: "alice")],
                    now: now))
        }
        #expect(try await store.loadPasskey(credentialID: passkey(1).credentialID) == nil)
        // Bob cannot answer alice's challenge.
        await expect(.challengeInvalid) {
            try await store.commitPasskeyRegistration(
                PasskeyRegistrationCommit(
                    passkey: passkey(1, user: "bob"), challenges: [ChallengeClaim(value: challenge(1).value, purpose: .passkey, username: "bob")],
                    now: now))
        }
        // A duplicate credential: the challenge stays unused.
        try await register(store, passkey(5))
        await expect(.duplicateKey) {
            try await store.commitPasskeyRegistration(PasskeyRegistrationCommit(passkey: passkey(5), challenges: [claim], now: now))
        }
        // The good one consumes the challenge, once.
        try await store.commitPasskeyRegistration(PasskeyRegistrationCommit(passkey: passkey(1), challenges: [claim], now: now))
        #expect(try await store.loadPasskey(credentialID: passkey(1).credentialID) == passkey(1))
        await expect(.challengeInvalid) { try await store.consumeChallenge(claim, now: now) }

        // The per-user limit: alice's passkeys 1 and 5 (used at t0), then 11…13 used at t0+1…t0+3,
        // bob's, and one of alice's revoked.
        for id in UInt8(11)...13 {
            var stored = passkey(id)
            stored.lastUsed = t0.addingTimeInterval(Double(id - 10))
            try await register(store, stored)
        }
        try await register(store, passkey(14, user: "bob"))
        var revoked = passkey(15)
        revoked.revokedAt = t0
        try await register(store, revoked)
        let later = t0.addingTimeInterval(100)
        var fresh = passkey(16)
        fresh.createdAt = later
        fresh.lastUsed = later
        try await register(store, fresh, limit: 3, now: later)
        var states: [UInt8: Date?] = [:]
        for id in [UInt8(1), 5, 11, 12, 13, 14, 15, 16] {
            states[id] = try await store.loadPasskey(credentialID: passkey(id).credentialID)?.revokedAt
        }
        // 16 (new), 13 and 12 (most recently used) stay; 11, 5 and 1 go.
        #expect(states[16] == .some(nil) && states[13] == .some(nil) && states[12] == .some(nil), "\(states)")
        #expect(states[11] == .some(later) && states[5] == .some(later) && states[1] == .some(later), "\(states)")
        #expect(states[14] == .some(nil), "another user's passkey is untouched")
        #expect(states[15] == .some(t0), "an already revoked passkey keeps its time")
        #expect(try await store.countPasskeys(username: "alice", .active) == 3)
    }

    static func passkeyAssertionAtomicity(_ make: Factory) async throws {
        let store = try await make()
        let now = t0.addingTimeInterval(1)
        try await register(store, passkey(1, signCount: 5))
        try await store.issueChallenge(challenge(1))
        let claim = ChallengeClaim(value: challenge(1).value, purpose: .form, username: "alice")

        // Verified against a count that is no longer stored: nothing is written.
        await expect(.staleCounter) {
            try await store.commitAssertion(AssertionCommit(passkey: use(1, from: 4, to: 6), replay: replay(1), challenges: [claim], now: now))
        }
        await expect(.unknownKey) {
            try await store.commitAssertion(AssertionCommit(passkey: use(9, from: 0, to: 1), replay: replay(1), challenges: [claim], now: now))
        }
        // A commit that names no signature at all is refused.
        await expect(.unknownKey) {
            try await store.commitAssertion(AssertionCommit(keyID: nil, counter: 0, replay: replay(1), challenges: [claim], now: now))
        }
        #expect(try await store.loadPasskey(credentialID: passkey(1).credentialID) == passkey(1, signCount: 5))
        #expect(try await store.isFormHashRecorded(hash(1), now: now) == false)
        // Revoked after the flows loaded it (red team r6, F5): the commit's compare-and-set refuses
        // it, with the count it was verified against, and writes nothing.
        try await register(store, passkey(0x52, signCount: 5))
        try await store.revokePasskey(credentialID: passkey(0x52).credentialID, at: now)
        await expect(.revoked) {
            try await store.commitAssertion(AssertionCommit(passkey: use(0x52, from: 5, to: 6), replay: replay(0x52), challenges: [claim], now: now))
        }
        #expect(try await store.loadPasskey(credentialID: passkey(0x52).credentialID)?.signCount == 5)
        #expect(try await store.isFormHashRecorded(hash(0x52), now: now) == false)

        try await store.commitAssertion(
            AssertionCommit(passkey: use(1, from: 5, to: 6, backedUp: true), replay: replay(1), challenges: [claim], now: now))
        var expected = passkey(1, signCount: 6)
        expected.backedUp = true
        expected.lastUsed = now
        #expect(try await store.loadPasskey(credentialID: passkey(1).credentialID) == expected)
        #expect(try await store.isFormHashRecorded(hash(1), now: now))
        await expect(.challengeInvalid) { try await store.consumeChallenge(claim, now: now) }
        // The same form again, with a count that would be fine: a replay, and the count stays.
        await expect(.replay) {
            try await store.commitAssertion(AssertionCommit(passkey: use(1, from: 6, to: 7), replay: replay(1), challenges: [], now: now))
        }
        #expect(try await store.loadPasskey(credentialID: passkey(1).credentialID)?.signCount == 6)

        // An authenticator without a counter (a synced passkey) reports 0 every time: each form once.
        try await register(store, passkey(2))
        try await store.commitAssertion(AssertionCommit(passkey: use(2, from: 0, to: 0), replay: replay(2), challenges: [], now: now))
        try await store.commitAssertion(AssertionCommit(passkey: use(2, from: 0, to: 0), replay: replay(3), challenges: [], now: now))
        await expect(.replay) {
            try await store.commitAssertion(AssertionCommit(passkey: use(2, from: 0, to: 0), replay: replay(3), challenges: [], now: now))
        }
    }

    static func passkeyWithKeyAtomicity(_ make: Factory) async throws {
        let store = try await make()
        let now = t0.addingTimeInterval(1)
        try await store.insertKey(key(1, counter: 5))
        try await register(store, passkey(1, signCount: 3))

        // The key's counter is stale: the passkey's count stays, and no replay record is left.
        await expect(.staleCounter) {
            try await store.commitAssertion(
                AssertionCommit(keyID: key(1).keyID, counter: 5, replay: replay(1), challenges: [], now: now, passkey: use(1, from: 3, to: 4)))
        }
        #expect(try await store.loadPasskey(credentialID: passkey(1).credentialID) == passkey(1, signCount: 3))
        // The passkey's count moved: the key's counter stays.
        await expect(.staleCounter) {
            try await store.commitAssertion(
                AssertionCommit(keyID: key(1).keyID, counter: 6, replay: replay(1), challenges: [], now: now, passkey: use(1, from: 2, to: 4)))
        }
        // An unknown passkey beside a good key: the key's counter stays.
        await expect(.unknownKey) {
            try await store.commitAssertion(
                AssertionCommit(keyID: key(1).keyID, counter: 6, replay: replay(1), challenges: [], now: now, passkey: use(9, from: 0, to: 1)))
        }
        #expect(try await store.loadKey(keyID: key(1).keyID) == key(1, counter: 5))
        #expect(try await store.isFormHashRecorded(hash(1), now: now) == false)

        // Both good: both move, with the one replay record.
        try await store.commitAssertion(
            AssertionCommit(keyID: key(1).keyID, counter: 6, replay: replay(1), challenges: [], now: now, passkey: use(1, from: 3, to: 4)))
        #expect(try await store.loadKey(keyID: key(1).keyID)?.counter == 6)
        #expect(try await store.loadKey(keyID: key(1).keyID)?.counterFormHash == hash(1))
        #expect(try await store.loadPasskey(credentialID: passkey(1).credentialID)?.signCount == 4)
        // The form again, by either factor alone: a replay.
        await expect(.replay) {
            try await store.commitAssertion(AssertionCommit(keyID: key(1).keyID, counter: 7, replay: replay(1), challenges: [], now: now))
        }
        await expect(.replay) {
            try await store.commitAssertion(AssertionCommit(passkey: use(1, from: 4, to: 5), replay: replay(1), challenges: [], now: now))
        }
        #expect(try await store.loadKey(keyID: key(1).keyID)?.counter == 6)
        #expect(try await store.loadPasskey(credentialID: passkey(1).credentialID)?.signCount == 4)
    }

    static func concurrentPasskeyForm(_ make: Factory) async throws {
        let store = try await make()
        try await store.insertKey(key(1))
        // A synced passkey (count 0 stays 0): only the form's one replay record can refuse the others.
        try await register(store, passkey(1))
        let accepted = try await withThrowingTaskGroup(of: Bool.self) { group in
            for index in 0..<50 {
                group.addTask {
                    let counter = UInt32(index + 1)
                    let commit: AssertionCommit
                    switch index % 3 {
                    case 0: commit = AssertionCommit(keyID: key(1).keyID, counter: counter, replay: replay(1), challenges: [], now: t0)
                    case 1: commit = AssertionCommit(passkey: use(1, from: 0, to: 0), replay: replay(1), challenges: [], now: t0)
                    default:
                        commit = AssertionCommit(
                            keyID: key(1).keyID, counter: counter, replay: replay(1), challenges: [], now: t0, passkey: use(1, from: 0, to: 0))
                    }
                    do {
                        try await store.commitAssertion(commit)
                        return true
                    } catch let error as StoreError where error.code == .replay || error.code == .staleCounter {
                        return false
                    }
                }
            }
            return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(accepted == 1)
    }

    static func concurrentPasskeyCounts(_ make: Factory) async throws {
        let store = try await make()
        try await register(store, passkey(1, signCount: 3))
        // A cloned authenticator: many assertions, each over its own form, all from count 3.
        let winners = try await withThrowingTaskGroup(of: UInt32?.self) { group in
            for index in 0..<concurrency {
                group.addTask {
                    let count = UInt32(4 + index)
                    do {
                        try await store.commitAssertion(
                            AssertionCommit(passkey: use(1, from: 3, to: count), replay: replay(UInt8(index + 100)), challenges: [], now: t0))
                        return count
                    } catch let error as StoreError where error.code == .staleCounter {
                        return nil
                    }
                }
            }
            return try await group.reduce(into: [UInt32]()) { if let won = $1 { $0.append(won) } }
        }
        #expect(winners.count == 1, "\(winners)")
        #expect(try await store.loadPasskey(credentialID: passkey(1).credentialID)?.signCount == winners.first)
        // The losers left no replay record: their forms may be signed again.
        for index in 0..<concurrency where UInt32(4 + index) != winners.first {
            #expect(try await store.isFormHashRecorded(hash(UInt8(index + 100)), now: t0) == false)
        }
    }
}
