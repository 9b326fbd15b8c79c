//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
public import FormAttestFlows
import Foundation
public import Testing

/// The contract every store must pass, on the widest protocol, ``StepwiseAttestationStore``. Each check takes a fresh, empty store.
///
/// Test targets call these from their own `@Test`s, one per store: the memory store, SQLite,
/// and MongoDB run exactly the same checks.
public enum StoreContract {
    public typealias Factory = @Sendable () async throws -> any StepwiseAttestationStore

    /// The check's start: the real clock's second at which ``run(_:_:)`` began the check.
    ///
    /// Records the contract writes meet real clocks (MongoDB's TTL monitor deletes documents whose
    /// `expiresAt` is past by the wall clock), so every time here is derived from the real now, in
    /// whole seconds (MongoDB keeps milliseconds), and every record expires at least an hour after
    /// it: the injected `now:` values move through the checks' windows, the wall clock never does.
    @TaskLocal static var t0 = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))

    /// The unit of the contract's windows: an hour, far longer than any check runs.
    static let hour: TimeInterval = 3600

    static func key(_ id: UInt8, user: String = "alice", counter: UInt32 = 0) -> StoredKey {
        StoredKey(
            keyID: [UInt8](repeating: id, count: 32),
            username: user,
            publicKey: [0x04] + [UInt8](repeating: id, count: 64),
            counter: counter,
            appID: "ABCDE12345.com.example",
            environment: .production,
            receipt: [1, 2, 3],
            createdAt: t0,
            lastUsed: t0
        )
    }

    static func challenge(_ id: UInt8, purpose: ChallengePurpose = .form, user: String? = "alice", lifetime: TimeInterval = 2 * hour)
        -> IssuedChallenge
    {
        IssuedChallenge(
            value: [UInt8](repeating: id, count: 32),
            purpose: purpose,
            username: user,
            issuedAt: t0,
            expiresAt: t0.addingTimeInterval(lifetime)
        )
    }

    static func hash(_ id: UInt8) -> [UInt8] { [UInt8](repeating: id, count: 31) + [0xFE] }

    /// Expects `body` to throw a ``StoreError`` with `code`.
    public static func expect(_ code: StoreError.Code, _ body: () async throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) async {
        do {
            try await body()
            Issue.record("expected \(code), nothing was thrown", sourceLocation: sourceLocation)
        } catch let error as StoreError {
            #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("expected \(code), got \(error)", sourceLocation: sourceLocation)
        }
    }

    /// Every check, in order.
    public static let all: [(name: String, check: @Sendable (Factory) async throws -> Void)] = [
        ("keys are unique and round-trip", keys),
        ("the counter advances by compare-and-set only", counterCAS),
        ("a receipt is replaced by compare-and-set only", receiptCAS),
        ("a key marked for re-attestation stays marked, alone", reattestation),
        ("keys are listed by user, byte for byte; revocation keeps its first time", keysByUserAndRevocation),
        ("a registration beyond the per-user limit revokes the least recently used others", keyLimit),
        ("a user's keys are counted by filter and listed a page at a time, byte for byte", countsAndPages),
        ("rate-limit windows count every request exactly once, concurrently too", rateLimitWindows),
        ("challenges are consumed once, unexpired, by purpose and user", challenges),
        ("form hashes are recorded once until they expire", replays),
        ("commitRegistration is all or nothing", registrationAtomicity),
        ("commitAssertion is all or nothing", assertionAtomicity),
        ("the last signals round-trip and move with the counter, all or nothing", lastSignals),
        ("the form that set the counter round-trips and moves with it, all or nothing", counterFormHash),
        ("a key's registering attestation round-trips and outlives every update", keyAttestation),
        ("reads ignore expired records; purge deletes only them", expiry),
        ("purge works in bounded steps and never touches a live record", boundedPurge),
        ("a purge step takes the oldest expiries first", boundedPurgeOrder),
        (
            "keys revoked at or before the retention's cutoff go with their registrations; later, active and re-attesting ones stay",
            revokedKeyRetention
        ),
        ("the retention's purge works in bounded steps, oldest revocation first, apart from the expiry purge", revokedKeyRetentionSteps),
        ("passkeys revoked at or before the cutoff go with their registrations, in the same steps as keys", revokedPasskeyRetention),
        ("N concurrent submissions of one form: exactly one accepted", concurrentSameForm),
        ("concurrent distinct counters: the maximum wins, none accepted twice", concurrentCounters),
        ("a challenge consumed concurrently has exactly one winner", concurrentChallenge),
        ("shutdown lets running calls end, is idempotent, and every later call fails with store_unavailable", shutdown),
        ("passkeys are unique, round-trip, and are listed, counted, paged and revoked by user, byte for byte", passkeyLifecycle),
        ("a first passkey is stored only while the user has no active passkey and none of another handle, concurrently too", firstPasskey),
        ("a passkey registration is all or nothing; beyond the per-user limit it revokes the least recently used others", passkeyRegistration),
        ("a passkey's sign count moves by compare-and-set with the form's replay record, all or nothing", passkeyAssertionAtomicity),
        ("a form signed by a key and a passkey: both move or neither does", passkeyWithKeyAtomicity),
        ("50 concurrent confirmations of one form, by key, passkey or both: exactly one accepted", concurrentPasskeyForm),
        ("concurrent assertions of one passkey verified against one sign count: exactly one committed", concurrentPasskeyCounts),
    ]

    static func keys(_ make: Factory) async throws {
        let store = try await make()
        #expect(try await store.loadKey(keyID: key(1).keyID) == nil)
        try await store.insertKey(key(1))
        #expect(try await store.loadKey(keyID: key(1).keyID) == key(1))
        await expect(.duplicateKey) { try await store.insertKey(key(1, user: "mallory")) }
        #expect(try await store.loadKey(keyID: key(1).keyID)?.username == "alice")
    }

    static func counterCAS(_ make: Factory) async throws {
        let store = try await make()
        try await store.insertKey(key(1))
        #expect(try await store.advanceCounter(keyID: key(1).keyID, to: 5, lastUsed: t0.addingTimeInterval(1)))
        #expect(try await store.advanceCounter(keyID: key(1).keyID, to: 5, lastUsed: t0) == false)
        #expect(try await store.advanceCounter(keyID: key(1).keyID, to: 4, lastUsed: t0) == false)
        #expect(try await store.advanceCounter(keyID: key(1).keyID, to: 6, lastUsed: t0.addingTimeInterval(2)))
        let stored = try await store.loadKey(keyID: key(1).keyID)
        #expect(stored?.counter == 6)
        #expect(stored?.lastUsed == t0.addingTimeInterval(2))
        await expect(.unknownKey) { _ = try await store.advanceCounter(keyID: key(9).keyID, to: 1, lastUsed: t0) }
    }

    static func receiptCAS(_ make: Factory) async throws {
        let store = try await make()
        await expect(.unknownKey) { _ = try await store.replaceReceipt(keyID: key(9).keyID, previous: [1, 2, 3], with: [4]) }
        try await store.insertKey(key(1))
        #expect(try await store.replaceReceipt(keyID: key(1).keyID, previous: [1, 2, 3], with: [4, 5, 6]))
        // A second refresh that read the old receipt loses, and changes nothing.
        #expect(try await store.replaceReceipt(keyID: key(1).keyID, previous: [1, 2, 3], with: [7, 8, 9]) == false)
        let stored = try #require(try await store.loadKey(keyID: key(1).keyID))
        #expect(stored.receipt == [4, 5, 6])
        var expected = key(1)
        expected.receipt = [4, 5, 6]
        #expect(stored == expected)  // nothing else changed
    }

    static func reattestation(_ make: Factory) async throws {
        let store = try await make()
        await expect(.unknownKey) { try await store.requireReattestation(keyID: key(9).keyID) }
        try await store.insertKey(key(1))
        try await store.insertKey(key(2))
        #expect(try await store.loadKey(keyID: key(1).keyID)?.reattestationRequired == false)
        try await store.requireReattestation(keyID: key(1).keyID)
        try await store.requireReattestation(keyID: key(1).keyID)  // idempotent
        var expected = key(1)
        expected.reattestationRequired = true
        #expect(try await store.loadKey(keyID: key(1).keyID) == expected)  // nothing else changed
        // A later counter advance does not clear it; the other key is untouched.
        #expect(try await store.advanceCounter(keyID: key(1).keyID, to: 3, lastUsed: t0))
        #expect(try await store.loadKey(keyID: key(1).keyID)?.reattestationRequired == true)
        #expect(try await store.loadKey(keyID: key(2).keyID) == key(2))
    }

    static func keysByUserAndRevocation(_ make: Factory) async throws {
        let store = try await make()
        var first = key(1)
        first.createdAt = t0.addingTimeInterval(-10)
        try await store.insertKey(first)
        try await store.insertKey(key(2))
        try await store.insertKey(key(3, user: "bob"))
        try await store.insertKey(key(4, user: "jose\u{301}"))
        #expect(try await store.keys(username: "alice").map(\.keyID) == [key(1).keyID, key(2).keyID])  // oldest first
        #expect(try await store.keys(username: "jos\u{E9}").isEmpty)  // no normalization
        #expect(try await store.keys(username: "nobody").isEmpty)
        await expect(.unknownKey) { try await store.revokeKey(keyID: key(9).keyID, at: t0) }
        try await store.revokeKey(keyID: key(2).keyID, at: t0.addingTimeInterval(5))
        try await store.revokeKey(keyID: key(2).keyID, at: t0.addingTimeInterval(50))  // idempotent: the first time stays
        var expected = key(2)
        expected.revokedAt = t0.addingTimeInterval(5)
        #expect(try await store.loadKey(keyID: key(2).keyID) == expected)
        #expect(try await store.loadKey(keyID: key(1).keyID)?.revokedAt == nil)
    }

    static func countsAndPages(_ make: Factory) async throws {
        let store = try await make()
        // Alice: keys 1…6 registered at t0-60, t0-50, … (key 6 last); 2 revoked, 4 marked for
        // re-attestation; key 7 another user's; key 8 a user whose name differs by normalization.
        for id in UInt8(1)...6 {
            var stored = key(id)
            stored.createdAt = t0.addingTimeInterval(Double(id) * 10 - 70)
            if id == 2 { stored.revokedAt = t0 }
            if id == 4 { stored.reattestationRequired = true }
            try await store.insertKey(stored)
        }
        // Two keys registered at the same instant: the keyId orders them.
        var twinA = key(0x30)
        twinA.createdAt = t0
        var twinB = key(0x20)
        twinB.createdAt = t0
        try await store.insertKey(twinA)
        try await store.insertKey(twinB)
        try await store.insertKey(key(7, user: "bob"))
        try await store.insertKey(key(8, user: "jose\u{301}"))
        #expect(try await store.countKeys(username: "alice", .all) == 8)
        #expect(try await store.countKeys(username: "alice", .active) == 6)
        #expect(try await store.countKeys(username: "alice", .createdSince(t0.addingTimeInterval(-30))) == 5)  // keys 4, 5, 6 and the twins
        #expect(try await store.countKeys(username: "jos\u{E9}", .all) == 0)
        #expect(try await store.countKeys(username: "nobody", .all) == 0)

        var listed: [[UInt8]] = []
        var position: KeyPosition?
        for _ in 0..<10 {
            let page = try await store.keys(username: "alice", after: position, limit: 3)
            #expect(page.count <= 3)
            listed += page.map(\.keyID)
            guard let last = page.last, page.count == 3 else { break }
            position = KeyPosition(last)
        }
        let expected = [UInt8(1), 2, 3, 4, 5, 6, 0x20, 0x30].map { key($0).keyID }
        #expect(listed == expected)
        #expect(
            try await store.keys(username: "alice", after: nil, limit: 100).map(\.keyID) == (try await store.keys(username: "alice")).map(\.keyID))
        #expect(try await store.keys(username: "alice", after: nil, limit: 0).isEmpty)
        // A page carries the keys whole (their registrations too).
        #expect(try await store.keys(username: "bob", after: nil, limit: 1) == [key(7, user: "bob")])
    }

    static func keyLimit(_ make: Factory) async throws {
        let store = try await make()
        // Four active keys of alice, used at t0+1 … t0+4; one of bob's; one of alice's revoked.
        for id in UInt8(1)...4 {
            var stored = key(id)
            stored.lastUsed = t0.addingTimeInterval(Double(id))
            try await store.insertKey(stored)
        }
        try await store.insertKey(key(5, user: "bob"))
        var revoked = key(6)
        revoked.revokedAt = t0
        try await store.insertKey(revoked)
        // A new key with a limit of 3: keys 4 and 3 (most recently used) stay, 2 and 1 go.
        let now = t0.addingTimeInterval(100)
        var fresh = key(7)
        fresh.createdAt = now
        fresh.lastUsed = now
        try await store.commitRegistration(
            RegistrationCommit(
                key: fresh, replay: ReplayRecord(formHash: hash(7), expiresAt: t0.addingTimeInterval(hour)), challenges: [], now: now,
                maximumActiveKeys: 3)
        )
        var states: [UInt8: Date?] = [:]
        for id in UInt8(1)...7 { states[id] = try await store.loadKey(keyID: key(id).keyID)?.revokedAt }
        #expect(states[1] == .some(now) && states[2] == .some(now), "\(states)")
        #expect(states[3] == .some(nil) && states[4] == .some(nil) && states[7] == .some(nil), "\(states)")
        #expect(states[5] == .some(nil), "another user's key is untouched")
        #expect(states[6] == .some(t0), "an already revoked key keeps its time")
        // Without a limit nothing is revoked.
        try await store.commitRegistration(
            RegistrationCommit(key: key(8), replay: ReplayRecord(formHash: hash(8), expiresAt: t0.addingTimeInterval(hour)), challenges: [], now: now)
        )
        #expect(try await store.keys(username: "alice").filter { $0.revokedAt == nil }.count == 4)
    }

    static func rateLimitWindows(_ make: Factory) async throws {
        let store = try await make()
        let window = RateLimitWindow(id: [UInt8](repeating: 1, count: 32), start: t0, expiresAt: t0.addingTimeInterval(hour))
        let other = RateLimitWindow(id: [UInt8](repeating: 2, count: 32), start: t0, expiresAt: t0.addingTimeInterval(hour))
        let next = RateLimitWindow(id: window.id, start: t0.addingTimeInterval(60), expiresAt: t0.addingTimeInterval(2 * hour))
        #expect(try await store.countRequest(in: window) == 1)
        #expect(try await store.countRequest(in: window) == 2)
        #expect(try await store.countRequest(in: other) == 1)
        #expect(try await store.countRequest(in: next) == 1)
        // Concurrent requests: every count from 3 to 26 seen exactly once.
        let counts = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<concurrency { group.addTask { try await store.countRequest(in: window) } }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(counts.sorted() == Array(3...(concurrency + 2)))
        // A refund takes one request back out of its window alone, and never below zero.
        try await store.refundRequest(in: window)
        #expect(try await store.countRequest(in: window) == concurrency + 2)
        try await store.refundRequest(in: other)
        try await store.refundRequest(in: other)
        #expect(try await store.countRequest(in: other) == 1, "a refund never takes a window below zero")
        #expect(try await store.countRequest(in: next) == 2, "a refund in another window changed this one")
        // A window that does not exist stays absent: the next count starts it at 1.
        let absent = RateLimitWindow(id: [UInt8](repeating: 3, count: 32), start: t0, expiresAt: t0.addingTimeInterval(hour))
        try await store.refundRequest(in: absent)
        #expect(try await store.countRequest(in: absent) == 1)
    }

    static func challenges(_ make: Factory) async throws {
        let store = try await make()
        let now = t0.addingTimeInterval(10)
        try await store.issueChallenge(challenge(1))
        await expect(.duplicateChallenge) { try await store.issueChallenge(challenge(1)) }
        await expect(.challengeInvalid) {
            try await store.consumeChallenge(ChallengeClaim(value: challenge(1).value, purpose: .pool, username: "alice"), now: now)
        }
        await expect(.challengeInvalid) {
            try await store.consumeChallenge(ChallengeClaim(value: challenge(1).value, purpose: .form, username: "bob"), now: now)
        }
        await expect(.challengeInvalid) {
            try await store.consumeChallenge(
                ChallengeClaim(value: challenge(1).value, purpose: .form, username: "alice"), now: t0.addingTimeInterval(2 * hour))
        }
        try await store.consumeChallenge(ChallengeClaim(value: challenge(1).value, purpose: .form, username: "alice"), now: now)
        await expect(.challengeInvalid) {
            try await store.consumeChallenge(ChallengeClaim(value: challenge(1).value, purpose: .form, username: "alice"), now: now)
        }
        await expect(.challengeInvalid) {
            try await store.consumeChallenge(ChallengeClaim(value: challenge(2).value, purpose: .form, username: "alice"), now: now)
        }
        // A challenge issued to nobody in particular may be answered by any user.
        try await store.issueChallenge(challenge(3, user: nil))
        try await store.consumeChallenge(ChallengeClaim(value: challenge(3).value, purpose: .form, username: "bob"), now: now)
        // Usernames match by code units: "é" precomposed is not "e" + combining accent.
        try await store.issueChallenge(challenge(4, user: "jos\u{e9}"))
        await expect(.challengeInvalid) {
            try await store.consumeChallenge(ChallengeClaim(value: challenge(4).value, purpose: .form, username: "jose\u{301}"), now: now)
        }
    }

    static func replays(_ make: Factory) async throws {
        let store = try await make()
        #expect(try await store.isFormHashRecorded(hash(1), now: t0) == false)
        try await store.recordFormHash(ReplayRecord(formHash: hash(1), expiresAt: t0.addingTimeInterval(2 * hour)), now: t0)
        #expect(try await store.isFormHashRecorded(hash(1), now: t0.addingTimeInterval(2 * hour - 1)))
        #expect(try await store.isFormHashRecorded(hash(1), now: t0.addingTimeInterval(2 * hour)) == false)
        await expect(.replay) {
            try await store.recordFormHash(
                ReplayRecord(formHash: hash(1), expiresAt: t0.addingTimeInterval(3 * hour)), now: t0.addingTimeInterval(2 * hour - 1))
        }
        try await store.recordFormHash(ReplayRecord(formHash: hash(2), expiresAt: t0.addingTimeInterval(2 * hour)), now: t0)
    }

    static func registrationAtomicity(_ make: Factory) async throws {
        let store = try await make()
        let now = t0.addingTimeInterval(1)
        try await store.issueChallenge(challenge(1))
        let claim = ChallengeClaim(value: challenge(1).value, purpose: .form, username: "alice")
        let replay = ReplayRecord(formHash: hash(1), expiresAt: t0.addingTimeInterval(3 * hour))

        // A bad challenge: nothing is written.
        await expect(.challengeInvalid) {
            try await store.commitRegistration(
                RegistrationCommit(
                    key: key(1), replay: replay, challenges: [claim, ChallengeClaim(value: challenge(9).value, purpose: .form, username: "alice")],
                    now: now))
        }
        #expect(try await store.loadKey(keyID: key(1).keyID) == nil)
        try await store.recordFormHash(ReplayRecord(formHash: hash(1), expiresAt: t0.addingTimeInterval(hour)), now: now)  // hash(1) was not recorded
        try await store.consumeChallenge(claim, now: now)  // the challenge was not consumed

        // A duplicate key: neither the replay record nor the challenge is written.
        try await store.insertKey(key(2))
        try await store.issueChallenge(challenge(3))
        let claim3 = ChallengeClaim(value: challenge(3).value, purpose: .form, username: "alice")
        await expect(.duplicateKey) {
            try await store.commitRegistration(
                RegistrationCommit(
                    key: key(2), replay: ReplayRecord(formHash: hash(3), expiresAt: t0.addingTimeInterval(3 * hour)), challenges: [claim3], now: now))
        }
        try await store.recordFormHash(ReplayRecord(formHash: hash(3), expiresAt: t0.addingTimeInterval(3 * hour)), now: now)
        try await store.consumeChallenge(claim3, now: now)

        // A replay: no key, challenge untouched.
        try await store.issueChallenge(challenge(4))
        let claim4 = ChallengeClaim(value: challenge(4).value, purpose: .form, username: "alice")
        await expect(.replay) {
            try await store.commitRegistration(
                RegistrationCommit(
                    key: key(4), replay: ReplayRecord(formHash: hash(3), expiresAt: t0.addingTimeInterval(3 * hour)), challenges: [claim4], now: now))
        }
        #expect(try await store.loadKey(keyID: key(4).keyID) == nil)
        try await store.consumeChallenge(claim4, now: now)

        // And a good one writes all three.
        try await store.issueChallenge(challenge(5))
        let claim5 = ChallengeClaim(value: challenge(5).value, purpose: .form, username: "alice")
        try await store.commitRegistration(
            RegistrationCommit(
                key: key(5), replay: ReplayRecord(formHash: hash(5), expiresAt: t0.addingTimeInterval(3 * hour)), challenges: [claim5], now: now))
        #expect(try await store.loadKey(keyID: key(5).keyID) == key(5))
        await expect(.replay) {
            try await store.recordFormHash(ReplayRecord(formHash: hash(5), expiresAt: t0.addingTimeInterval(3 * hour)), now: now)
        }
        await expect(.challengeInvalid) { try await store.consumeChallenge(claim5, now: now) }
    }

    static func assertionAtomicity(_ make: Factory) async throws {
        let store = try await make()
        let now = t0.addingTimeInterval(1)
        try await store.insertKey(key(1, counter: 5))
        try await store.issueChallenge(challenge(1))
        let claim = ChallengeClaim(value: challenge(1).value, purpose: .form, username: "alice")

        await expect(.staleCounter) {
            try await store.commitAssertion(
                AssertionCommit(
                    keyID: key(1).keyID, counter: 5, replay: ReplayRecord(formHash: hash(1), expiresAt: t0.addingTimeInterval(3 * hour)),
                    challenges: [claim], now: now))
        }
        await expect(.unknownKey) {
            try await store.commitAssertion(
                AssertionCommit(
                    keyID: key(7).keyID, counter: 9, replay: ReplayRecord(formHash: hash(1), expiresAt: t0.addingTimeInterval(3 * hour)),
                    challenges: [claim], now: now))
        }
        // Revoked after the flows loaded it: the commit's compare-and-set refuses it (not as a
        // stale counter: the counter would do), and writes nothing.
        try await store.insertKey(key(0x52, counter: 5))
        try await store.revokeKey(keyID: key(0x52).keyID, at: now)
        await expect(.keyRevoked) {
            try await store.commitAssertion(
                AssertionCommit(
                    keyID: key(0x52).keyID, counter: 6, replay: ReplayRecord(formHash: hash(1), expiresAt: t0.addingTimeInterval(3 * hour)),
                    challenges: [claim], now: now))
        }
        #expect(try await store.loadKey(keyID: key(0x52).keyID)?.counter == 5)
        // None of them wrote the replay record or consumed the challenge.
        try await store.commitAssertion(
            AssertionCommit(
                keyID: key(1).keyID, counter: 6, replay: ReplayRecord(formHash: hash(1), expiresAt: t0.addingTimeInterval(3 * hour)),
                challenges: [claim], now: now))
        #expect(try await store.loadKey(keyID: key(1).keyID)?.counter == 6)
        #expect(try await store.loadKey(keyID: key(1).keyID)?.lastUsed == now)
        // The same form again, with a higher counter: a replay, and the counter stays.
        await expect(.replay) {
            try await store.commitAssertion(
                AssertionCommit(
                    keyID: key(1).keyID, counter: 7, replay: ReplayRecord(formHash: hash(1), expiresAt: t0.addingTimeInterval(3 * hour)),
                    challenges: [], now: now))
        }
        #expect(try await store.loadKey(keyID: key(1).keyID)?.counter == 6)
    }

    static func keyAttestation(_ make: Factory) async throws {
        let store = try await make()
        let now = t0.addingTimeInterval(1)
        var stored = key(1)
        stored.attestation = KeyAttestation(object: [UInt8](repeating: 0xA0, count: 5_000) + [0x01], clientDataHash: hash(9))
        try await store.insertKey(stored)
        #expect(try await store.loadKey(keyID: stored.keyID) == stored)
        // A key without one (registered before stores kept it) reads back without one.
        try await store.insertKey(key(2))
        #expect(try await store.loadKey(keyID: key(2).keyID)?.attestation == nil)

        // Through a registration commit too, and the key's later updates leave it as it was.
        var registered = key(3)
        registered.attestation = KeyAttestation(object: [0xA5, 0x00, 0xFF], clientDataHash: hash(3))
        try await store.commitRegistration(
            RegistrationCommit(
                key: registered, replay: ReplayRecord(formHash: hash(3), expiresAt: t0.addingTimeInterval(3 * hour)), challenges: [], now: t0)
        )
        try await store.commitAssertion(
            AssertionCommit(
                keyID: registered.keyID, counter: 1, replay: ReplayRecord(formHash: hash(4), expiresAt: t0.addingTimeInterval(3 * hour)),
                challenges: [], now: now))
        try await store.revokeKey(keyID: registered.keyID, at: now)
        #expect(try await store.loadKey(keyID: registered.keyID)?.attestation == registered.attestation)
    }

    static func lastSignals(_ make: Factory) async throws {
        let store = try await make()
        let now = t0.addingTimeInterval(1)
        var stored = key(1)
        stored.lastSignals = KeySignals(validationCategory: 4, bundleVersion: "2.4", cdHash: [UInt8](repeating: 0xCD, count: 32), cdHashType: 2)
        try await store.insertKey(stored)
        #expect(try await store.loadKey(keyID: stored.keyID) == stored)
        try await store.insertKey(key(2))
        #expect(try await store.loadKey(keyID: key(2).keyID)?.lastSignals == nil)

        // An assertion with signals replaces them all (absent fields included), with the counter.
        let newer = KeySignals(validationCategory: 2, bundleVersion: "2.5")
        try await store.commitAssertion(
            AssertionCommit(
                keyID: stored.keyID, counter: 1, replay: ReplayRecord(formHash: hash(1), expiresAt: t0.addingTimeInterval(3 * hour)), challenges: [],
                now: now, signals: newer))
        stored.counter = 1
        stored.lastUsed = now
        stored.lastSignals = newer
        stored.counterFormHash = hash(1)
        #expect(try await store.loadKey(keyID: stored.keyID) == stored)

        // One without signals keeps them; so do the other updates of a key.
        try await store.commitAssertion(
            AssertionCommit(
                keyID: stored.keyID, counter: 2, replay: ReplayRecord(formHash: hash(2), expiresAt: t0.addingTimeInterval(3 * hour)), challenges: [],
                now: now))
        #expect(try await store.advanceCounter(keyID: stored.keyID, to: 3, lastUsed: now))
        #expect(try await store.replaceReceipt(keyID: stored.keyID, previous: [1, 2, 3], with: [4]))
        try await store.requireReattestation(keyID: stored.keyID)
        stored.counter = 3
        stored.receipt = [4]
        stored.reattestationRequired = true
        stored.counterFormHash = nil  // advanceCounter moved the counter without a form
        #expect(try await store.loadKey(keyID: stored.keyID) == stored)

        // A stale counter or a replay writes neither the counter nor the signals.
        let refused = KeySignals(validationCategory: 3, bundleVersion: "9", cdHash: [7], cdHashType: 1)
        await expect(.staleCounter) {
            try await store.commitAssertion(
                AssertionCommit(
                    keyID: stored.keyID, counter: 3, replay: ReplayRecord(formHash: hash(3), expiresAt: t0.addingTimeInterval(3 * hour)),
                    challenges: [], now: now, signals: refused))
        }
        await expect(.replay) {
            try await store.commitAssertion(
                AssertionCommit(
                    keyID: stored.keyID, counter: 9, replay: ReplayRecord(formHash: hash(2), expiresAt: t0.addingTimeInterval(3 * hour)),
                    challenges: [], now: now, signals: refused))
        }
        #expect(try await store.loadKey(keyID: stored.keyID) == stored)
        // The other key was never touched.
        #expect(try await store.loadKey(keyID: key(2).keyID) == key(2))
    }

    static func counterFormHash(_ make: Factory) async throws {
        let store = try await make()
        let now = t0.addingTimeInterval(1)
        // Inserted with one (a registration's form), and through a registration commit.
        var stored = key(1)
        stored.counterFormHash = hash(10)
        try await store.insertKey(stored)
        #expect(try await store.loadKey(keyID: stored.keyID) == stored)
        var registered = key(2)
        registered.counterFormHash = hash(20)
        try await store.commitRegistration(
            RegistrationCommit(
                key: registered, replay: ReplayRecord(formHash: hash(20), expiresAt: t0.addingTimeInterval(3 * hour)), challenges: [], now: t0)
        )
        #expect(try await store.loadKey(keyID: registered.keyID)?.counterFormHash == hash(20))

        // An accepted assertion stores its form's hash with its counter.
        try await store.commitAssertion(
            AssertionCommit(
                keyID: stored.keyID, counter: 4, replay: ReplayRecord(formHash: hash(11), expiresAt: t0.addingTimeInterval(3 * hour)), challenges: [],
                now: now))
        stored.counter = 4
        stored.lastUsed = now
        stored.counterFormHash = hash(11)
        #expect(try await store.loadKey(keyID: stored.keyID) == stored)

        // A refused commit (stale counter, replay) writes neither.
        await expect(.staleCounter) {
            try await store.commitAssertion(
                AssertionCommit(
                    keyID: stored.keyID, counter: 4, replay: ReplayRecord(formHash: hash(12), expiresAt: t0.addingTimeInterval(3 * hour)),
                    challenges: [], now: now))
        }
        await expect(.replay) {
            try await store.commitAssertion(
                AssertionCommit(
                    keyID: stored.keyID, counter: 9, replay: ReplayRecord(formHash: hash(11), expiresAt: t0.addingTimeInterval(3 * hour)),
                    challenges: [], now: now))
        }
        #expect(try await store.loadKey(keyID: stored.keyID) == stored)

        // A counter moved without a form clears it: an older form must not stand for a newer counter.
        #expect(try await store.advanceCounter(keyID: stored.keyID, to: 5, lastUsed: now))
        #expect(try await store.loadKey(keyID: stored.keyID)?.counterFormHash == nil)
        // The other key was never touched.
        #expect(try await store.loadKey(keyID: registered.keyID)?.counterFormHash == hash(20))
    }

    static func expiry(_ make: Factory) async throws {
        let store = try await make()
        try await store.issueChallenge(challenge(1, lifetime: hour))
        try await store.issueChallenge(challenge(2, lifetime: 100 * hour))
        try await store.recordFormHash(ReplayRecord(formHash: hash(1), expiresAt: t0.addingTimeInterval(hour)), now: t0)
        try await store.recordFormHash(ReplayRecord(formHash: hash(2), expiresAt: t0.addingTimeInterval(100 * hour)), now: t0)
        let later = t0.addingTimeInterval(hour + 1)
        // Without any purge: the expired challenge cannot be used, the expired hash no longer blocks.
        await expect(.challengeInvalid) {
            try await store.consumeChallenge(ChallengeClaim(value: challenge(1).value, purpose: .form, username: "alice"), now: later)
        }
        try await store.recordFormHash(ReplayRecord(formHash: hash(1), expiresAt: t0.addingTimeInterval(2 * hour)), now: later)
        // Purge at t0+3h deletes hash(1) (expires t0+2h) and challenge(1), nothing else.
        #expect(try await store.purgeExpired(now: t0.addingTimeInterval(3 * hour), limit: 100).deleted == 2)
        await expect(.replay) {
            try await store.recordFormHash(ReplayRecord(formHash: hash(2), expiresAt: t0.addingTimeInterval(100 * hour)), now: later)
        }
        try await store.consumeChallenge(ChallengeClaim(value: challenge(2).value, purpose: .form, username: "alice"), now: later)
    }

    static func boundedPurge(_ make: Factory) async throws {
        let store = try await make()
        // 7 expired challenges, 11 expired form hashes and 5 expired rate-limit windows, beside
        // live ones of each kind. Expiries are hours after t0 (the real now), never minutes: a
        // MongoDB TTL monitor deletes by the real clock, and a slow run must not race it.
        for index in 1...7 { try await store.issueChallenge(challenge(UInt8(100 + index), lifetime: Double(index) * hour)) }
        try await store.issueChallenge(challenge(120, lifetime: 100 * hour))
        for index in 1...11 {
            try await store.recordFormHash(
                ReplayRecord(formHash: hash(UInt8(100 + index)), expiresAt: t0.addingTimeInterval(Double(index) * hour)), now: t0)
        }
        try await store.recordFormHash(ReplayRecord(formHash: hash(120), expiresAt: t0.addingTimeInterval(100 * hour)), now: t0)
        for index in 1...5 {
            _ = try await store.countRequest(
                in: RateLimitWindow(id: hash(UInt8(130 + index)), start: t0, expiresAt: t0.addingTimeInterval(Double(index) * hour)))
        }
        let live = RateLimitWindow(id: hash(140), start: t0, expiresAt: t0.addingTimeInterval(100 * hour))
        _ = try await store.countRequest(in: live)
        let purgeTime = t0.addingTimeInterval(24 * hour)
        // Steps of 4: never more than the limit, until a step says the pass is complete.
        var steps: [Int] = []
        while true {
            let step = try await store.purgeExpired(now: purgeTime, limit: 4)
            #expect(step.deleted <= 4)
            steps.append(step.deleted)
            if step.complete { break }
            #expect(steps.count < 20, "the purge does not end")
            if steps.count >= 20 { break }
        }
        #expect(steps == [4, 4, 4, 4, 4, 3], "\(steps)")
        let again = try await store.purgeExpired(now: purgeTime, limit: 4)
        #expect(again.deleted == 0 && again.complete)
        // Live records of every kind survived: the challenge is usable, the hash still refuses,
        // the window counts on.
        try await store.consumeChallenge(ChallengeClaim(value: challenge(120).value, purpose: .form, username: "alice"), now: purgeTime)
        await expect(.replay) {
            try await store.recordFormHash(ReplayRecord(formHash: hash(120), expiresAt: t0.addingTimeInterval(100 * hour)), now: purgeTime)
        }
        #expect(try await store.countRequest(in: live) == 2)
        // An expired window was deleted: counting in it starts again at 1.
        #expect(try await store.countRequest(in: RateLimitWindow(id: hash(131), start: t0, expiresAt: t0.addingTimeInterval(hour))) == 1)
    }

    static func boundedPurgeOrder(_ make: Factory) async throws {
        let store = try await make()
        // Six challenges expiring at t0 + 1, 2, ... 6 hours, all expired at t0 + 10 h.
        for index in 1...6 { try await store.issueChallenge(challenge(UInt8(100 + index), lifetime: Double(index) * hour)) }
        #expect(try await store.purgeExpired(now: t0.addingTimeInterval(10 * hour), limit: 3).deleted == 3)
        // The step took the three that expired first: as of t0 + 3.5 h nothing expired is left
        // (any other three would leave one of the first three behind).
        #expect(try await store.purgeExpired(now: t0.addingTimeInterval(3.5 * hour), limit: 100).deleted == 0)
        #expect(try await store.purgeExpired(now: t0.addingTimeInterval(10 * hour), limit: 100).deleted == 3)
    }

    static let concurrency = 24

    static func concurrentSameForm(_ make: Factory) async throws {
        let store = try await make()
        try await store.insertKey(key(1))
        let accepted = try await withThrowingTaskGroup(of: Bool.self) { group in
            for counter in 1...concurrency {
                group.addTask {
                    do {
                        try await store.commitAssertion(
                            AssertionCommit(
                                keyID: key(1).keyID, counter: UInt32(counter),
                                replay: ReplayRecord(formHash: hash(1), expiresAt: t0.addingTimeInterval(3 * hour)), challenges: [], now: t0))
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

    static func concurrentCounters(_ make: Factory) async throws {
        let store = try await make()
        try await store.insertKey(key(1))
        // Every counter twice, each with its own form: at most one of each pair may win.
        let winners = try await withThrowingTaskGroup(of: UInt32?.self) { group in
            for index in 0..<(2 * concurrency) {
                let counter = UInt32(index % concurrency + 1)
                group.addTask {
                    do {
                        try await store.commitAssertion(
                            AssertionCommit(
                                keyID: key(1).keyID, counter: counter,
                                replay: ReplayRecord(
                                    formHash: [UInt8(index)] + [UInt8](repeating: 0xAB, count: 31), expiresAt: t0.addingTimeInterval(3 * hour)),
                                challenges: [], now: t0))
                        return counter
                    } catch let error as StoreError where error.code == .staleCounter {
                        return nil
                    }
                }
            }
            return try await group.reduce(into: [UInt32]()) { if let won = $1 { $0.append(won) } }
        }
        #expect(Set(winners).count == winners.count, "a counter was accepted twice: \(winners.sorted())")
        #expect(winners.contains(UInt32(concurrency)))
        #expect(try await store.loadKey(keyID: key(1).keyID)?.counter == UInt32(concurrency))
    }

    static func concurrentChallenge(_ make: Factory) async throws {
        let store = try await make()
        try await store.issueChallenge(challenge(1))
        let wins = try await withThrowingTaskGroup(of: Bool.self) { group in
            for _ in 0..<concurrency {
                group.addTask {
                    do {
                        try await store.consumeChallenge(ChallengeClaim(value: challenge(1).value, purpose: .form, username: "alice"), now: t0)
                        return true
                    } catch let error as StoreError where error.code == .challengeInvalid {
                        return false
                    }
                }
            }
            return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(wins == 1)
    }

    static func shutdown(_ make: Factory) async throws {
        let store = try await make()
        try await store.insertKey(key(1))
        try await store.issueChallenge(challenge(1))
        // Calls running while the store shuts down: each one either completes or fails with
        // store_unavailable (never anything else, never a crash).
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<16 {
                group.addTask {
                    do {
                        if index.isMultiple(of: 2) {
                            _ = try await store.loadKey(keyID: key(1).keyID)
                        } else {
                            _ = try await store.countRequest(in: RateLimitWindow(id: hash(1), start: t0, expiresAt: t0.addingTimeInterval(hour)))
                        }
                    } catch let error as StoreError {
                        #expect(error.code == .unavailable, "\(error)")
                    }
                }
            }
            group.addTask { await store.shutdown() }
            group.addTask { await store.shutdown() }
            try await group.waitForAll()
        }
        await store.shutdown()
        await expect(.unavailable) { _ = try await store.loadKey(keyID: key(1).keyID) }
        await expect(.unavailable) { _ = try await store.keys(username: "alice") }
        await expect(.unavailable) { _ = try await store.isFormHashRecorded(hash(1), now: t0) }
        await expect(.unavailable) { try await store.insertKey(key(2)) }
        await expect(.unavailable) { try await store.issueChallenge(challenge(2)) }
        await expect(.unavailable) {
            try await store.consumeChallenge(ChallengeClaim(value: challenge(1).value, purpose: .form, username: "alice"), now: t0)
        }
        await expect(.unavailable) {
            try await store.recordFormHash(ReplayRecord(formHash: hash(2), expiresAt: t0.addingTimeInterval(hour)), now: t0)
        }
        await expect(.unavailable) { try await store.revokeKey(keyID: key(1).keyID, at: t0) }
        await expect(.unavailable) { _ = try await store.purgeExpired(now: t0, limit: 100) }
        await expect(.unavailable) { _ = try await store.purgeRevoked(before: t0, limit: 100) }
        await expect(.unavailable) {
            try await store.commitRegistration(
                RegistrationCommit(
                    key: key(3), replay: ReplayRecord(formHash: hash(3), expiresAt: t0.addingTimeInterval(hour)), challenges: [], now: t0)
            )
        }
    }
}

extension StoreContract {
    /// Runs the named check against stores from `make`.
    public static func run(_ name: String, _ make: @escaping Factory) async throws {
        guard let check = all.first(where: { $0.name == name })?.check else {
            Issue.record("no contract check named \(name)")
            return
        }
        // A new start for each check, from the real clock (see ``t0``); child tasks inherit it.
        try await $t0.withValue(Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))) {
            try await check(make)
        }
    }

    /// A key for tests outside the contract.
    public static func key(_ id: UInt8) -> StoredKey { key(id, user: "alice", counter: 0) }
}
