//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AttestationStoreContract
import FormAttestFlows
import Foundation
import GRDB
import Logging
import SQLiteAttestStore
import Testing

/// SQLite's group commit: concurrent writes share one transaction, each gets exactly its own
/// outcome, and everything accepted is on disk when the database is reopened.
struct SQLiteGroupCommitTests {
    /// The real now in whole seconds: every record expires hours after it.
    let t0 = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
    static let hour: TimeInterval = 3600

    /// 32 bytes naming one thing of one kind.
    static func id(_ kind: UInt8, _ index: Int) -> [UInt8] { [kind, UInt8(index)] + [UInt8](repeating: 0x5A, count: 30) }

    func key(_ keyID: [UInt8], counter: UInt32 = 0) -> StoredKey {
        StoredKey(
            keyID: keyID, username: "alice", publicKey: [0x04] + [UInt8](repeating: keyID[1], count: 64), counter: counter,
            appID: "ABCDE12345.com.example", environment: .production, receipt: [1, 2, 3], createdAt: self.t0, lastUsed: self.t0
        )
    }

    func challenge(_ value: [UInt8]) -> IssuedChallenge {
        IssuedChallenge(value: value, purpose: .form, username: "alice", issuedAt: self.t0, expiresAt: self.t0.addingTimeInterval(2 * Self.hour))
    }

    func commit(key: [UInt8], counter: UInt32, hash: [UInt8], challenge: [UInt8]?) -> AssertionCommit {
        AssertionCommit(
            keyID: key, counter: counter, replay: ReplayRecord(formHash: hash, expiresAt: self.t0.addingTimeInterval(3 * Self.hour)),
            challenges: challenge.map { [ChallengeClaim(value: $0, purpose: .form, username: "alice")] } ?? [], now: self.t0
        )
    }

    /// A second connection holding SQLite's write lock until `release()`: writes queue behind it.
    final class WriteLock: Sendable {
        let queue: DatabaseQueue

        init(path: String) throws {
            var configuration = Configuration()
            configuration.allowsUnsafeTransactions = true
            self.queue = try DatabaseQueue(path: path, configuration: configuration)
            try self.queue.writeWithoutTransaction { db in try db.execute(sql: "BEGIN IMMEDIATE") }
        }

        func release() throws {
            try self.queue.writeWithoutTransaction { db in try db.execute(sql: "COMMIT") }
        }
    }

    /// Waits (polling, no timing assertion) until `count` writes were submitted to `store`. The
    /// deadline only stops a test that would hang: under the full suite's load in CI a task
    /// waited over 3 s for its turn (the writes were submitted, later).
    /// A store whose writes wait for the write lock for as long as a test under load may take to
    /// look at them (the production timeout, 5 s, is what `aFailedTransactionFailsItsWholeGroup`
    /// tests).
    static func storeThatWaits(_ path: String) throws -> SQLiteAttestationStore {
        try SQLiteAttestationStore(path: path, logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), busyTimeout: 600)
    }

    static func waitForSubmitted(_ count: Int, _ store: SQLiteAttestationStore) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: .seconds(60))
        while await store.groupCommitStatistics().submitted < count {
            guard clock.now < deadline else {
                Issue.record("only \(await store.groupCommitStatistics().submitted) of \(count) writes were submitted")
                return
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    enum Kind: Sendable, Hashable {
        case genuine, replay, stale, unknownKey, contested
    }

    @Test(
        "concurrent commits share transactions; each gets its own outcome (replay, stale counter, unknown key, a contested form); all accepted state survives reopening"
    )
    func concurrentCommitsEachGetTheirOwnOutcome() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-group-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("formattest.sqlite").path
        let store = try Self.storeThatWaits(path)
        let count = 24
        // genuine: its own key (counter 0), challenge and form: accepted.
        // replay: its own key and challenge, a form accepted before the burst: refused, changes nothing.
        // stale: its own key at counter 10 signing 5, with a fresh challenge and form: refused after
        //   its challenge and form were written in its savepoint, which is rolled back.
        // unknownKey: a key never registered: refused.
        // contested: two requests (two keys) with the same new form: exactly one wins.
        for index in 0..<count {
            try await store.insertKey(self.key(Self.id(1, index)))
            try await store.issueChallenge(self.challenge(Self.id(2, index)))
            try await store.insertKey(self.key(Self.id(3, index)))
            try await store.issueChallenge(self.challenge(Self.id(4, index)))
            try await store.recordFormHash(
                ReplayRecord(formHash: Self.id(5, index), expiresAt: self.t0.addingTimeInterval(3 * Self.hour)), now: self.t0)
            try await store.insertKey(self.key(Self.id(6, index), counter: 10))
            try await store.issueChallenge(self.challenge(Self.id(7, index)))
            try await store.insertKey(self.key(Self.id(10, index)))
            try await store.insertKey(self.key(Self.id(11, index)))
        }
        var requests: [(Kind, Int, AssertionCommit)] = []
        for index in 0..<count {
            requests.append(
                (.genuine, index, self.commit(key: Self.id(1, index), counter: 1, hash: Self.id(20, index), challenge: Self.id(2, index))))
            requests.append((.replay, index, self.commit(key: Self.id(3, index), counter: 1, hash: Self.id(5, index), challenge: Self.id(4, index))))
            requests.append((.stale, index, self.commit(key: Self.id(6, index), counter: 5, hash: Self.id(8, index), challenge: Self.id(7, index))))
            requests.append((.unknownKey, index, self.commit(key: Self.id(9, index), counter: 1, hash: Self.id(21, index), challenge: nil)))
            requests.append((.contested, index, self.commit(key: Self.id(10, index), counter: 1, hash: Self.id(22, index), challenge: nil)))
            requests.append((.contested, index, self.commit(key: Self.id(11, index), counter: 1, hash: Self.id(22, index), challenge: nil)))
        }
        requests.shuffle()

        let before = await store.groupCommitStatistics()
        let lock = try WriteLock(path: path)
        let outcomes = try await withThrowingTaskGroup(of: (Kind, Int, StoreError.Code?).self) { group in
            for (kind, index, commit) in requests {
                group.addTask {
                    do {
                        try await store.commitAssertion(commit)
                        return (kind, index, nil)
                    } catch let error as StoreError {
                        return (kind, index, error.code)
                    }
                }
            }
            // Every write queued behind the lock: they commit in at most two groups (whatever the
            // first group took before the lock, and the rest).
            try await Self.waitForSubmitted(before.submitted + requests.count, store)
            try lock.release()
            return try await group.reduce(into: [(Kind, Int, StoreError.Code?)]()) { $0.append($1) }
        }
        let after = await store.groupCommitStatistics()
        #expect(after.writes - before.writes == requests.count)
        #expect(after.groups - before.groups <= 2, "\(after.groups - before.groups) transactions for \(requests.count) writes")

        var contestedWins = [Int: Int]()
        for (kind, index, code) in outcomes {
            switch kind {
            case .genuine: #expect(code == nil, "genuine \(index): \(String(describing: code))")
            case .replay: #expect(code == .replay, "replay \(index): \(String(describing: code))")
            case .stale: #expect(code == .staleCounter, "stale \(index): \(String(describing: code))")
            case .unknownKey: #expect(code == .unknownKey, "unknown key \(index): \(String(describing: code))")
            case .contested:
                #expect(code == nil || code == .replay, "contested \(index): \(String(describing: code))")
                if code == nil { contestedWins[index, default: 0] += 1 }
            }
        }
        #expect((0..<count).allSatisfy { contestedWins[$0] == 1 }, "wins per contested form: \(contestedWins)")

        // Reopened from the file: what was accepted is there, what was refused left no trace.
        let reopened = try SQLiteAttestationStore(path: path)
        let later = self.t0.addingTimeInterval(60)
        for index in 0..<count {
            #expect(try await reopened.loadKey(keyID: Self.id(1, index))?.counter == 1)
            #expect(try await reopened.isFormHashRecorded(Self.id(20, index), now: later))
            await StoreContract.expect(.challengeInvalid) {
                try await reopened.consumeChallenge(ChallengeClaim(value: Self.id(2, index), purpose: .form, username: "alice"), now: later)
            }

            #expect(try await reopened.loadKey(keyID: Self.id(3, index))?.counter == 0)
            try await reopened.consumeChallenge(ChallengeClaim(value: Self.id(4, index), purpose: .form, username: "alice"), now: later)

            #expect(try await reopened.loadKey(keyID: Self.id(6, index))?.counter == 10)
            #expect(try await !reopened.isFormHashRecorded(Self.id(8, index), now: later))
            try await reopened.consumeChallenge(ChallengeClaim(value: Self.id(7, index), purpose: .form, username: "alice"), now: later)

            #expect(try await !reopened.isFormHashRecorded(Self.id(21, index), now: later))

            #expect(try await reopened.isFormHashRecorded(Self.id(22, index), now: later))
            let counters = [
                try await reopened.loadKey(keyID: Self.id(10, index))?.counter, try await reopened.loadKey(keyID: Self.id(11, index))?.counter,
            ]
            #expect(Set(counters) == [0, 1], "contested \(index): counters \(counters)")
        }
    }

    @Test("a group whose transaction fails (the write lock held past the busy timeout) fails every write in it and changes nothing")
    func aFailedTransactionFailsItsWholeGroup() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-group-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("formattest.sqlite").path
        let store = try SQLiteAttestationStore(path: path)
        let count = 8
        for index in 0..<count { try await store.insertKey(self.key(Self.id(1, index))) }
        let lock = try WriteLock(path: path)
        let codes = try await withThrowingTaskGroup(of: StoreError.Code?.self) { group in
            for index in 0..<count {
                group.addTask {
                    do {
                        try await store.commitAssertion(self.commit(key: Self.id(1, index), counter: 1, hash: Self.id(20, index), challenge: nil))
                        return nil
                    } catch let error as StoreError {
                        return error.code
                    }
                }
            }
            return try await group.reduce(into: [StoreError.Code?]()) { $0.append($1) }
        }
        try lock.release()
        #expect(codes == Array(repeating: .unavailable, count: count))
        let later = self.t0.addingTimeInterval(60)
        for index in 0..<count {
            #expect(try await store.loadKey(keyID: Self.id(1, index))?.counter == 0)
            #expect(try await !store.isFormHashRecorded(Self.id(20, index), now: later))
        }
        // The lock released, the same writes commit.
        try await store.commitAssertion(self.commit(key: Self.id(1, 0), counter: 1, hash: Self.id(20, 0), challenge: nil))
        #expect(try await store.loadKey(keyID: Self.id(1, 0))?.counter == 1)
    }

    @Test("the write-ahead log is copied back into the database file off the commit path, long before the writer's own threshold")
    func walCheckpointedInTheBackground() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-group-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("formattest.sqlite").path
        let store = try SQLiteAttestationStore(path: path)
        let housekeeping = Task { await store.runHousekeeping() }
        let count = 20
        for index in 0..<count {
            try await store.insertKey(self.key(Self.id(1, index)))
        }
        // A copy of the database file alone (no -wal beside it) holds only what was checkpointed.
        // 20 keys are a few pages, far below the writer's automatic threshold.
        #expect(SQLiteAttestationStore.walAutocheckpointPages >= 1_000)
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: .seconds(30))
        var checkpointed = 0
        while checkpointed < count && clock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
            let copy = directory.appendingPathComponent("copy-\(UUID().uuidString).sqlite")
            try FileManager.default.copyItem(atPath: path, toPath: copy.path)
            let snapshot = try DatabaseQueue(path: copy.path)
            checkpointed = (try? await snapshot.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM keys") ?? 0 }) ?? 0
            try snapshot.close()
        }
        #expect(checkpointed == count)
        housekeeping.cancel()
        await housekeeping.value
        await store.shutdown()
    }

    @Test("without its housekeeping run, the store starts no checkpoint of its own: the log stays in the -wal file")
    func noHousekeepingNoCheckpoint() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-group-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("formattest.sqlite").path
        let store = try SQLiteAttestationStore(path: path)
        for index in 0..<20 { try await store.insertKey(self.key(Self.id(1, index))) }
        // Ten of the checkpointer's intervals: nothing copied the log back into the file.
        try await Task.sleep(for: .milliseconds(2_500))
        let copy = directory.appendingPathComponent("copy.sqlite")
        try FileManager.default.copyItem(atPath: path, toPath: copy.path)
        let snapshot = try DatabaseQueue(path: copy.path)
        let inFile = (try? await snapshot.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM keys") ?? 0 }) ?? 0
        try snapshot.close()
        #expect(inFile == 0, "\(inFile) keys in the database file")
        let wal = ((try? FileManager.default.attributesOfItem(atPath: path + "-wal"))?[.size] as? Int) ?? 0
        #expect(wal > 0, "the keys are in the log")
        await store.shutdown()
    }

    @Test(
        "the write-ahead log's catch-up checkpoint runs on an idle writer, never while a purge step is queued, and behind waiting writes only when forced"
    )
    func catchUpCheckpointWaitsForItsTurn() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-group-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("formattest.sqlite").path
        let store = try Self.storeThatWaits(path)
        try await store.insertKey(self.key(Self.id(1, 0)))
        // An idle writer: it runs at once, forced or not.
        #expect(await store.catchUpCheckpoint(force: false))
        #expect(await store.catchUpCheckpoint(force: true))

        // A request's write waiting (behind another connection's write lock): not unless forced.
        var submitted = await store.groupCommitStatistics().submitted
        var lock = try WriteLock(path: path)
        let write = Task {
            try await store.recordFormHash(ReplayRecord(formHash: Self.id(20, 0), expiresAt: self.t0.addingTimeInterval(Self.hour)), now: self.t0)
        }
        try await Self.waitForSubmitted(submitted + 1, store)
        #expect(await !store.catchUpCheckpoint(force: false))
        let forced = Task { await store.catchUpCheckpoint(force: true) }
        try await Self.waitForSubmitted(submitted + 2, store)
        try lock.release()
        try await write.value
        #expect(await forced.value)

        // A purge step waiting: not even when forced.
        submitted = await store.groupCommitStatistics().submitted
        lock = try WriteLock(path: path)
        let step = Task { try await store.purgeExpired(now: self.t0, limit: 10) }
        try await Self.waitForSubmitted(submitted + 1, store)
        #expect(await !store.catchUpCheckpoint(force: true))
        #expect(await !store.catchUpCheckpoint(force: false))
        // The lock held 2 s more: the step began waiting for it well within that, even on a loaded machine.
        try await Task.sleep(for: .seconds(2))
        try lock.release()
        let purged = try await step.value
        // The step's time, split: its wait for the lock is the first phase, not the statements'.
        let phases = try #require(purged.phases)
        #expect(phases.lockWait + phases.statements + phases.commit == purged.duration)
        #expect(phases.lockWait >= .milliseconds(100), "\(phases)")
        #expect(phases.statements < phases.lockWait, "\(phases)")
        // The step done, the writer is idle again.
        #expect(await store.catchUpCheckpoint(force: false))
        await store.shutdown()
        #expect(await !store.catchUpCheckpoint(force: true))
    }
}
