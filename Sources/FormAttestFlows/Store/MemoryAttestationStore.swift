//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Foundation

/// An in-memory ``StepwiseAttestationStore`` for tests and single-process demos. The actor makes every
/// operation, commits included, atomic.
public actor MemoryAttestationStore: StepwiseAttestationStore {
    private var keys: [[UInt8]: StoredKey] = [:]
    private var passkeys: [[UInt8]: StoredPasskey] = [:]
    private var challenges: [[UInt8]: (challenge: IssuedChallenge, used: Bool)] = [:]
    private var replays: [[UInt8]: Date] = [:]
    private var rateWindows: [RateLimitWindow: Int] = [:]
    /// When set, every operation fails with ``StoreError/Code/unavailable`` (fault injection).
    private var failing = false
    /// Set by ``shutdown()``: every later operation fails with ``StoreError/Code/unavailable``.
    private var isShutDown = false

    public init() {}

    /// Makes every following operation fail as an unreachable store would, or stop failing.
    public func setUnavailable(_ unavailable: Bool) {
        self.failing = unavailable
    }

    public func shutdown() {
        self.isShutDown = true
    }

    private func check() throws(StoreError) {
        if self.isShutDown { throw StoreError(code: .unavailable, reason: "the in-memory store is shut down") }
        if self.failing { throw StoreError(code: .unavailable, reason: "the in-memory store is set to fail") }
    }

    public func insertKey(_ key: StoredKey) throws(StoreError) {
        try self.check()
        guard self.keys[key.keyID] == nil else { throw StoreError(code: .duplicateKey, reason: "the keyId is registered") }
        self.keys[key.keyID] = key
    }

    public func loadKey(keyID: [UInt8]) throws(StoreError) -> StoredKey? {
        try self.check()
        return self.keys[keyID]
    }

    public func advanceCounter(keyID: [UInt8], to counter: UInt32, lastUsed: Date) throws(StoreError) -> Bool {
        try self.check()
        guard var key = self.keys[keyID] else { throw StoreError(code: .unknownKey, reason: "no such keyId") }
        guard key.counter < counter else { return false }
        key.counter = counter
        key.lastUsed = lastUsed
        key.counterFormHash = nil
        self.keys[keyID] = key
        return true
    }

    public func requireReattestation(keyID: [UInt8]) throws(StoreError) {
        try self.check()
        guard self.keys[keyID] != nil else { throw StoreError(code: .unknownKey, reason: "no such keyId") }
        self.keys[keyID]?.reattestationRequired = true
    }

    public func keys(username: String) throws(StoreError) -> [StoredKey] {
        try self.check()
        return self.keys.values.filter { Array($0.username.utf8) == Array(username.utf8) }
            .sorted { $0.createdAt != $1.createdAt ? $0.createdAt < $1.createdAt : $0.keyID.lexicographicallyPrecedes($1.keyID) }
    }

    public func countKeys(username: String, _ filter: KeyCountFilter) throws(StoreError) -> Int {
        try self.check()
        return self.keys.values.filter { Array($0.username.utf8) == Array(username.utf8) && filter.matches($0) }.count
    }

    public func keys(username: String, after position: KeyPosition?, limit: Int) throws(StoreError) -> [StoredKey] {
        let all = try self.keys(username: username)
        return Array(all.filter { key in position.map { $0.precedes(key) } ?? true }.prefix(max(limit, 0)))
    }

    public func revokeKey(keyID: [UInt8], at date: Date) throws(StoreError) {
        try self.check()
        guard let key = self.keys[keyID] else { throw StoreError(code: .unknownKey, reason: "no such keyId") }
        if key.revokedAt == nil { self.keys[keyID]?.revokedAt = date }
    }

    public func countRequest(in window: RateLimitWindow) throws(StoreError) -> Int {
        try self.check()
        let count = (self.rateWindows[window] ?? 0) + 1
        self.rateWindows[window] = count
        return count
    }

    public func refundRequest(in window: RateLimitWindow) throws(StoreError) {
        try self.check()
        if let count = self.rateWindows[window], count > 0 { self.rateWindows[window] = count - 1 }
    }

    public func replaceReceipt(keyID: [UInt8], previous: [UInt8], with receipt: [UInt8]) throws(StoreError) -> Bool {
        try self.check()
        guard var key = self.keys[keyID] else { throw StoreError(code: .unknownKey, reason: "no such keyId") }
        guard key.receipt == previous else { return false }
        key.receipt = receipt
        self.keys[keyID] = key
        return true
    }

    public func issueChallenge(_ challenge: IssuedChallenge) throws(StoreError) {
        try self.check()
        guard self.challenges[challenge.value] == nil else {
            throw StoreError(code: .duplicateChallenge, reason: "the challenge value was issued before")
        }
        self.challenges[challenge.value] = (challenge, false)
    }

    public func consumeChallenge(_ claim: ChallengeClaim, now: Date) throws(StoreError) {
        try self.check()
        try self.validate([claim], now: now)
        self.challenges[claim.value]?.used = true
    }

    public func recordFormHash(_ record: ReplayRecord, now: Date) throws(StoreError) {
        try self.check()
        try self.validateReplay(record, now: now)
        self.replays[record.formHash] = record.expiresAt
    }

    public func isFormHashRecorded(_ formHash: [UInt8], now: Date) throws(StoreError) -> Bool {
        try self.check()
        return (self.replays[formHash].map { $0 > now }) ?? false
    }

    public func commitRegistration(_ commit: RegistrationCommit) throws(StoreError) {
        try self.check()
        // Validate every part first, then apply: all or nothing.
        try self.validate(commit.challenges, now: commit.now)
        try self.validateReplay(commit.replay, now: commit.now)
        guard self.keys[commit.key.keyID] == nil else {
            throw StoreError(code: .duplicateKey, reason: "the keyId is registered")
        }
        for claim in commit.challenges { self.challenges[claim.value]?.used = true }
        self.replays[commit.replay.formHash] = commit.replay.expiresAt
        self.keys[commit.key.keyID] = commit.key
        if let limit = commit.maximumActiveKeys {
            // The new key stays; of the others, the most recently used stay up to the limit.
            let others = self.keys.values
                .filter { Array($0.username.utf8) == Array(commit.key.username.utf8) && $0.revokedAt == nil && $0.keyID != commit.key.keyID }
                .sorted {
                    // Most recently used first (ties: newer, then the larger keyId), as SQL's ORDER BY.
                    if $0.lastUsed != $1.lastUsed { return $0.lastUsed > $1.lastUsed }
                    if $0.createdAt != $1.createdAt { return $0.createdAt > $1.createdAt }
                    return $1.keyID.lexicographicallyPrecedes($0.keyID)
                }
            for key in others.dropFirst(max(limit - 1, 0)) {
                self.keys[key.keyID]?.revokedAt = commit.now
            }
        }
    }

    public func commitAssertion(_ commit: AssertionCommit) throws(StoreError) {
        try self.check()
        try self.validate(commit.challenges, now: commit.now)
        try self.validateReplay(commit.replay, now: commit.now)
        guard commit.keyID != nil || commit.passkey != nil else {
            throw StoreError(code: .unknownKey, reason: "the commit names neither a key nor a passkey")
        }
        var key: StoredKey?
        if let keyID = commit.keyID {
            guard var stored = self.keys[keyID] else { throw StoreError(code: .unknownKey, reason: "no such keyId") }
            guard stored.revokedAt == nil else { throw StoreError(code: .keyRevoked, reason: "the key was revoked") }
            guard stored.counter < commit.counter else {
                throw StoreError(code: .staleCounter, reason: "counter \(commit.counter) is not above the stored \(stored.counter)")
            }
            stored.counter = commit.counter
            stored.lastUsed = commit.now
            stored.counterFormHash = commit.replay.formHash
            if let signals = commit.signals, !signals.isEmpty { stored.lastSignals = signals }
            key = stored
        }
        var passkey: StoredPasskey?
        if let use = commit.passkey {
            guard var stored = self.passkeys[use.credentialID] else { throw StoreError(code: .unknownKey, reason: "no such passkey") }
            guard stored.revokedAt == nil else { throw StoreError(code: .revoked, reason: "the passkey was revoked") }
            guard stored.signCount == use.previousSignCount else {
                throw StoreError(code: .staleCounter, reason: "the passkey's sign count moved from \(use.previousSignCount) to \(stored.signCount)")
            }
            stored.signCount = use.signCount
            stored.backedUp = use.backedUp
            stored.lastUsed = commit.now
            passkey = stored
        }
        for claim in commit.challenges { self.challenges[claim.value]?.used = true }
        self.replays[commit.replay.formHash] = commit.replay.expiresAt
        if let key { self.keys[key.keyID] = key }
        if let passkey { self.passkeys[passkey.credentialID] = passkey }
    }

    // MARK: - Passkeys

    public func loadPasskey(credentialID: [UInt8]) throws(StoreError) -> StoredPasskey? {
        try self.check()
        return self.passkeys[credentialID]
    }

    public func passkeys(username: String) throws(StoreError) -> [StoredPasskey] {
        try self.check()
        return self.passkeys.values.filter { Array($0.username.utf8) == Array(username.utf8) }
            .sorted { $0.createdAt != $1.createdAt ? $0.createdAt < $1.createdAt : $0.credentialID.lexicographicallyPrecedes($1.credentialID) }
    }

    public func passkeyCredentials(username: String) throws(StoreError) -> PasskeyCredentials {
        let all = try self.passkeys(username: username)
        return PasskeyCredentials(
            userHandle: all.first?.userHandle,
            activeCredentialIDs: Array(all.filter { $0.revokedAt == nil }.map(\.credentialID).prefix(PasskeyCredentials.maximumActive)))
    }

    public func countPasskeys(username: String, _ filter: KeyCountFilter) throws(StoreError) -> Int {
        try self.check()
        return self.passkeys.values.filter { Array($0.username.utf8) == Array(username.utf8) && filter.matches($0) }.count
    }

    public func passkeys(username: String, after position: KeyPosition?, limit: Int) throws(StoreError) -> [StoredPasskey] {
        let all = try self.passkeys(username: username)
        return Array(all.filter { passkey in position.map { $0.precedes(passkey) } ?? true }.prefix(max(limit, 0)))
    }

    public func revokePasskey(credentialID: [UInt8], at date: Date) throws(StoreError) {
        try self.check()
        guard let passkey = self.passkeys[credentialID] else { throw StoreError(code: .unknownKey, reason: "no such passkey") }
        if passkey.revokedAt == nil { self.passkeys[credentialID]?.revokedAt = date }
    }

    public func commitPasskeyRegistration(_ commit: PasskeyRegistrationCommit) throws(StoreError) {
        try self.check()
        try self.validate(commit.challenges, now: commit.now)
        let new = commit.passkey
        guard self.passkeys[new.credentialID] == nil else {
            throw StoreError(code: .duplicateKey, reason: "the credential id is registered")
        }
        if commit.firstPasskey,
            self.passkeys.values.contains(where: {
                Array($0.username.utf8) == Array(new.username.utf8) && ($0.revokedAt == nil || $0.userHandle != new.userHandle)
            })
        {
            throw StoreError(code: .passkeyExists, reason: "the user has a passkey registered since this one was checked")
        }
        for claim in commit.challenges { self.challenges[claim.value]?.used = true }
        self.passkeys[new.credentialID] = new
        if let limit = commit.maximumActiveCredentials {
            // The new passkey stays; of the others, the most recently used stay up to the limit.
            let others = self.passkeys.values
                .filter { Array($0.username.utf8) == Array(new.username.utf8) && $0.revokedAt == nil && $0.credentialID != new.credentialID }
                .sorted {
                    if $0.lastUsed != $1.lastUsed { return $0.lastUsed > $1.lastUsed }
                    if $0.createdAt != $1.createdAt { return $0.createdAt > $1.createdAt }
                    return $1.credentialID.lexicographicallyPrecedes($0.credentialID)
                }
            for passkey in others.dropFirst(max(limit - 1, 0)) {
                self.passkeys[passkey.credentialID]?.revokedAt = commit.now
            }
        }
    }

    public func purgeExpired(now: Date, limit: Int) throws(StoreError) -> PurgeStep {
        try self.check()
        let started = ContinuousClock.now
        var budget = max(limit, 1)
        // Oldest expiry first in each table, challenges, form hashes, then rate-limit windows (as
        // the SQLite store takes them).
        for value in self.challenges.filter({ $0.value.challenge.expiresAt <= now })
            .sorted(by: { $0.value.challenge.expiresAt < $1.value.challenge.expiresAt }).prefix(budget).map(\.key)
        {
            self.challenges[value] = nil
            budget -= 1
        }
        for hash in self.replays.filter({ $0.value <= now }).sorted(by: { $0.value < $1.value }).prefix(budget).map(\.key) {
            self.replays[hash] = nil
            budget -= 1
        }
        for window in self.rateWindows.keys.filter({ $0.expiresAt <= now }).sorted(by: { $0.expiresAt < $1.expiresAt }).prefix(budget) {
            self.rateWindows[window] = nil
            budget -= 1
        }
        // Oldest expiry first: a step that did not use its whole budget left nothing expired.
        return PurgeStep(deleted: max(limit, 1) - budget, duration: started.duration(to: .now), complete: budget > 0)
    }

    public func purgeRevoked(before cutoff: Date, limit: Int) throws(StoreError) -> PurgeStep {
        try self.check()
        let started = ContinuousClock.now
        var budget = max(limit, 1)
        // Oldest revocation first, keys then passkeys (as the SQLite and MongoDB stores take them).
        for keyID in self.keys.values.compactMap({ key in key.revokedAt.flatMap { $0 <= cutoff ? (key.keyID, $0) : nil } })
            .sorted(by: { $0.1 != $1.1 ? $0.1 < $1.1 : $0.0.lexicographicallyPrecedes($1.0) }).prefix(budget).map(\.0)
        {
            self.keys[keyID] = nil
            budget -= 1
        }
        for credentialID in self.passkeys.values
            .compactMap({ passkey in passkey.revokedAt.flatMap { $0 <= cutoff ? (passkey.credentialID, $0) : nil } })
            .sorted(by: { $0.1 != $1.1 ? $0.1 < $1.1 : $0.0.lexicographicallyPrecedes($1.0) }).prefix(budget).map(\.0)
        {
            self.passkeys[credentialID] = nil
            budget -= 1
        }
        return PurgeStep(deleted: max(limit, 1) - budget, duration: started.duration(to: .now), complete: budget > 0)
    }

    private func validate(_ claims: [ChallengeClaim], now: Date) throws(StoreError) {
        for claim in claims {
            guard let entry = self.challenges[claim.value], !entry.used, claim.matches(entry.challenge, now: now) else {
                throw StoreError(code: .challengeInvalid, reason: "the challenge is unknown, used, expired, or for another purpose or user")
            }
        }
        if Set(claims.map(\.value)).count != claims.count {
            throw StoreError(code: .challengeInvalid, reason: "one challenge claimed twice")
        }
    }

    private func validateReplay(_ record: ReplayRecord, now: Date) throws(StoreError) {
        if let expiresAt = self.replays[record.formHash], expiresAt > now {
            throw StoreError(code: .replay, reason: "this form was accepted before")
        }
    }
}
