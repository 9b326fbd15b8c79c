//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestFlows
import Foundation
import Testing

/// The contract's retention checks (issue 31, R5-F7): keys and passkeys revoked at or before the
/// cutoff go, with their registrations, in bounded steps; nothing else does.
extension StoreContract {
    static func revokedKeyRetention(_ make: Factory) async throws {
        let store = try await make()
        let cutoff = t0.addingTimeInterval(-10 * hour)
        // Alice: key 1 revoked before the cutoff, key 2 at it, key 3 after it, key 4 active, key 5
        // marked for re-attestation (not revoked), all registered long before; bob's key 6 revoked
        // before the cutoff.
        var states: [UInt8: (revoked: Date?, reattest: Bool)] = [
            1: (cutoff.addingTimeInterval(-hour), false), 2: (cutoff, false), 3: (cutoff.addingTimeInterval(1), false),
            4: (nil, false), 5: (nil, true),
        ]
        states[6] = (cutoff.addingTimeInterval(-2 * hour), false)
        for id in UInt8(1)...6 {
            var stored = key(id, user: id == 6 ? "bob" : "alice")
            stored.createdAt = t0.addingTimeInterval(-100 * hour + Double(id))
            stored.lastUsed = stored.createdAt
            stored.revokedAt = states[id]?.revoked
            stored.reattestationRequired = states[id]?.reattest ?? false
            try await store.insertKey(stored)
        }
        #expect(try await store.countKeys(username: "alice", .all) == 5)

        // Nothing revoked at or before an earlier cutoff: nothing goes.
        let none = try await store.purgeRevoked(before: cutoff.addingTimeInterval(-3 * hour), limit: 100)
        #expect(none.deleted == 0 && none.complete)
        #expect(try await store.countKeys(username: "alice", .all) == 5)

        let step = try await store.purgeRevoked(before: cutoff, limit: 100)
        #expect(step.deleted == 3 && step.complete, "\(step)")
        for id in [UInt8(1), 2, 6] {
            #expect(try await store.loadKey(keyID: key(id).keyID) == nil, "key \(id) revoked at or before the cutoff is gone")
        }
        #expect(try await store.loadKey(keyID: key(3).keyID)?.revokedAt == cutoff.addingTimeInterval(1), "revoked after the cutoff: kept")
        #expect(try await store.loadKey(keyID: key(3).keyID)?.receipt == key(3).receipt, "kept with its registration")
        #expect(try await store.loadKey(keyID: key(4).keyID)?.revokedAt == nil, "an active key is never purged")
        #expect(try await store.loadKey(keyID: key(5).keyID)?.reattestationRequired == true, "marked for re-attestation, not revoked: kept")
        #expect(try await store.keys(username: "alice").map(\.keyID) == [3, 4, 5].map { key($0).keyID })
        #expect(try await store.countKeys(username: "alice", .all) == 3)
        #expect(try await store.countKeys(username: "alice", .active) == 1)
        #expect(try await store.countKeys(username: "bob", .all) == 0)
        #expect(try await store.keys(username: "alice", after: nil, limit: 10).count == 3)

        // A purged key is unknown to every operation, as one never registered.
        await expect(.unknownKey) { try await store.revokeKey(keyID: key(1).keyID, at: t0) }
        await expect(.unknownKey) { try await store.requireReattestation(keyID: key(1).keyID) }
        await expect(.unknownKey) {
            try await store.commitAssertion(
                AssertionCommit(
                    keyID: key(1).keyID, counter: 1, replay: ReplayRecord(formHash: hash(1), expiresAt: t0.addingTimeInterval(hour)), challenges: [],
                    now: t0))
        }
        #expect(try await store.isFormHashRecorded(hash(1), now: t0) == false, "the refused assertion wrote nothing")

        // The same keyId can be registered again only as a new key (a new attestation), which
        // starts from its own state; nothing of the purged one comes back.
        var again = key(1)
        again.createdAt = t0
        again.lastUsed = t0
        try await store.insertKey(again)
        #expect(try await store.loadKey(keyID: key(1).keyID) == again)

        // The pass is idempotent: a second one finds nothing.
        let second = try await store.purgeRevoked(before: cutoff, limit: 100)
        #expect(second.deleted == 0 && second.complete)
    }

    static func revokedKeyRetentionSteps(_ make: Factory) async throws {
        let store = try await make()
        let cutoff = t0.addingTimeInterval(-10 * hour)
        // Nine keys revoked before the cutoff, oldest revocation first by id; one revoked after it.
        for id in UInt8(1)...10 {
            var stored = key(id)
            stored.createdAt = t0.addingTimeInterval(-100 * hour)
            stored.lastUsed = stored.createdAt
            stored.revokedAt = id == 10 ? cutoff.addingTimeInterval(60) : cutoff.addingTimeInterval(-Double(20 - id) * 60)
            try await store.insertKey(stored)
        }
        // Steps of 4: 4, 4, then 1 (short: complete). The oldest revocations go first.
        let first = try await store.purgeRevoked(before: cutoff, limit: 4)
        #expect(first.deleted == 4 && !first.complete, "\(first)")
        for id in UInt8(1)...4 { #expect(try await store.loadKey(keyID: key(id).keyID) == nil, "key \(id): oldest revocations first") }
        #expect(try await store.loadKey(keyID: key(5).keyID) != nil)
        let second = try await store.purgeRevoked(before: cutoff, limit: 4)
        #expect(second.deleted == 4 && !second.complete, "\(second)")
        let third = try await store.purgeRevoked(before: cutoff, limit: 4)
        #expect(third.deleted == 1 && third.complete, "\(third)")
        #expect(try await store.keys(username: "alice").map(\.keyID) == [key(10).keyID])
        // The expiry purge and the retention are apart: neither touches the other's records.
        try await store.issueChallenge(challenge(1, lifetime: hour))
        var revoked = key(11)
        revoked.revokedAt = cutoff.addingTimeInterval(-hour)
        try await store.insertKey(revoked)
        #expect(try await store.purgeExpired(now: t0.addingTimeInterval(2 * hour), limit: 100).deleted == 1)
        #expect(try await store.loadKey(keyID: key(11).keyID) != nil, "the expiry purge leaves revoked keys alone")
        try await store.issueChallenge(challenge(2, lifetime: hour))
        #expect(try await store.purgeRevoked(before: cutoff, limit: 100).deleted == 1)
        await expect(.challengeInvalid) {
            try await store.consumeChallenge(ChallengeClaim(value: challenge(1).value, purpose: .form, username: "alice"), now: t0)
        }
        // The retention leaves challenges alone: challenge 2 is still there and unused.
        try await store.consumeChallenge(ChallengeClaim(value: challenge(2).value, purpose: .form, username: "alice"), now: t0)
    }

    static func revokedPasskeyRetention(_ make: Factory) async throws {
        let store = try await make()
        let cutoff = t0.addingTimeInterval(-10 * hour)
        // Alice: passkey 1 revoked before the cutoff, 2 after it, 3 active; bob's 4 revoked before.
        let revocations: [UInt8: Date?] = [
            1: cutoff.addingTimeInterval(-hour), 2: cutoff.addingTimeInterval(1), 3: nil, 4: cutoff.addingTimeInterval(-hour),
        ]
        for id in UInt8(1)...4 {
            var stored = passkey(id, user: id == 4 ? "bob" : "alice")
            stored.createdAt = t0.addingTimeInterval(-100 * hour + Double(id))
            try await register(store, stored)
            if let revokedAt = revocations[id] ?? nil { try await store.revokePasskey(credentialID: stored.credentialID, at: revokedAt) }
        }
        // A key revoked before the cutoff too: one step takes keys and passkeys together.
        var revokedKey = key(9)
        revokedKey.revokedAt = cutoff.addingTimeInterval(-hour)
        try await store.insertKey(revokedKey)

        let first = try await store.purgeRevoked(before: cutoff, limit: 2)
        #expect(first.deleted == 2 && !first.complete, "\(first)")
        let second = try await store.purgeRevoked(before: cutoff, limit: 2)
        #expect(second.deleted == 1 && second.complete, "\(second)")
        #expect(try await store.loadKey(keyID: key(9).keyID) == nil)
        #expect(try await store.loadPasskey(credentialID: passkey(1).credentialID) == nil)
        #expect(try await store.loadPasskey(credentialID: passkey(4).credentialID) == nil)
        #expect(
            try await store.loadPasskey(credentialID: passkey(2).credentialID)?.registration == passkey(2).registration, "kept with its registration")
        #expect(try await store.loadPasskey(credentialID: passkey(3).credentialID)?.revokedAt == nil, "an active passkey is never purged")
        #expect(try await store.passkeys(username: "alice").map(\.credentialID) == [2, 3].map { passkey($0).credentialID })
        #expect(try await store.countPasskeys(username: "alice", .all) == 2)
        #expect(try await store.countPasskeys(username: "bob", .all) == 0)
        #expect(try await store.passkeyCredentials(username: "alice").activeCredentialIDs == [passkey(3).credentialID])
        // A purged passkey is unknown, as one never registered.
        await expect(.unknownKey) { try await store.revokePasskey(credentialID: passkey(1).credentialID, at: t0) }
        await expect(.unknownKey) {
            try await store.commitAssertion(
                AssertionCommit(passkey: use(1, from: 0, to: 1), replay: replay(1), challenges: [], now: t0))
        }
        #expect(try await store.isFormHashRecorded(hash(1), now: t0) == false, "the refused assertion wrote nothing")
    }
}
