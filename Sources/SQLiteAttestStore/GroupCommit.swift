//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestFlows
import GRDB

/// Group commit: the writes of concurrent callers share one SQLite transaction, and so one
/// fsync of the WAL (`synchronous = FULL`), instead of one each.
///
/// Writes queue here. While a group's transaction is being written and synced, the writes that
/// arrive wait; when it has committed, all of them run as the next group, in arrival order:
///
/// ```
/// BEGIN IMMEDIATE
///   SAVEPOINT; <write 1>; RELEASE        -- or ROLLBACK TO + RELEASE when write 1 throws
///   SAVEPOINT; <write 2>; RELEASE
///   ...
/// COMMIT                                 -- one fsync
/// ```
///
/// - A write that throws a ``FormAttestFlows/StoreError`` (a replay, a stale counter, a used
///   challenge, a duplicate key) is rolled back to its savepoint and gets its own error; the
///   others in its group are unaffected and see the database as if it had never run.
/// - Every caller is resumed only after the group's COMMIT returned: an answer never precedes
///   durability.
/// - When the transaction as a whole fails (an SQLite error: I/O, full disk, read-only file,
///   busy beyond the timeout, or COMMIT itself failing), it is rolled back and every write of the
///   group fails with that error: none was committed, none is told it was.
///
/// No write waits for a timer: a lone write commits at once, and groups form only from the
/// writes that arrive while the previous group syncs.
///
/// Background work (the purge's steps) is submitted with ``submitAlone(_:)``: it runs as a group
/// of its own, between the requests' groups, so that no request's commit carries its pages, and
/// it is told how long its transaction held the writer, `BEGIN` to the end of `COMMIT`.
package actor GroupCommit {
    /// One queued write and its waiting caller.
    private struct Member {
        let body: @Sendable (Database) throws -> any Sendable
        let continuation: CheckedContinuation<any Sendable, any Error>
        /// Runs in a transaction of its own (``submitAlone(_:)``).
        let alone: Bool
    }

    /// What ``submitAlone(_:)``'s transaction returned, and how long it held the writer.
    private struct Held: Sendable {
        let value: any Sendable
        let duration: Duration
    }

    /// The largest group (a bound on one transaction's size and on the latency it adds).
    static let maximumGroupSize = 256

    /// How many groups and writes were committed or failed so far (for tests and benchmarks).
    package struct Statistics: Sendable, Hashable {
        /// Writes submitted (queued, running or done).
        package var submitted = 0
        /// Transactions run (each one group).
        package var groups = 0
        /// Writes those transactions ran.
        package var writes = 0
    }

    private let database: DatabasePool
    private var pending: [Member] = []
    private var draining = false
    /// Set by ``close()``: later writes are refused.
    private var closed = false
    /// Callers of ``close()`` waiting for the running groups to commit.
    private var closeWaiters: [CheckedContinuation<Void, Never>] = []
    package private(set) var statistics = Statistics()

    init(database: DatabasePool) {
        self.database = database
    }

    /// Runs `body` in the next group's transaction and returns its value once that transaction
    /// committed; throws `body`'s error (its writes rolled back) or the transaction's.
    func submit(_ body: @escaping @Sendable (Database) throws -> any Sendable) async throws -> any Sendable {
        guard !self.closed else { throw StoreError(code: .unavailable, reason: "SQLite: the store is shut down") }
        return try await self.enqueue(body, alone: false)
    }

    /// Runs `body` in a transaction of its own, between two groups; returns its value once that
    /// transaction committed, and how long it held the writer (`BEGIN IMMEDIATE` to the end of
    /// `COMMIT`, the sync included: what a request queued behind it waited for).
    func submitAlone(_ body: @escaping @Sendable (Database) throws -> any Sendable) async throws -> (value: any Sendable, held: Duration) {
        guard !self.closed else { throw StoreError(code: .unavailable, reason: "SQLite: the store is shut down") }
        guard let held = try await self.enqueue(body, alone: true) as? Held else {
            throw StoreError(code: .unavailable, reason: "SQLite: a write run alone returned no duration")
        }
        return (held.value, held.duration)
    }

    private func enqueue(_ body: @escaping @Sendable (Database) throws -> any Sendable, alone: Bool) async throws -> any Sendable {
        try await withCheckedThrowingContinuation { continuation in
            self.pending.append(Member(body: body, continuation: continuation, alone: alone))
            self.statistics.submitted += 1
            if !self.draining {
                self.draining = true
                Task { await self.drain() }
            }
        }
    }

    /// Commits groups until no write is waiting.
    private func drain() async {
        while let first = self.pending.first {
            // A write run alone is a group of its own; otherwise the group ends before the next one.
            let size =
                first.alone
                ? 1 : (self.pending.prefix(Self.maximumGroupSize).firstIndex(where: \.alone) ?? min(self.pending.count, Self.maximumGroupSize))
            let members = Array(self.pending.prefix(size))
            self.pending.removeFirst(members.count)
            let (outcomes, held) = await Self.commit(members.map(\.body), self.database)
            self.statistics.groups += 1
            self.statistics.writes += members.count
            for (member, outcome) in zip(members, outcomes) {
                member.continuation.resume(with: member.alone ? outcome.map { Held(value: $0, duration: held) as any Sendable } : outcome)
            }
        }
        self.draining = false
        for waiter in self.closeWaiters { waiter.resume() }
        self.closeWaiters = []
    }

    /// Refuses every later write, and returns once the writes already queued have committed (or
    /// failed). Idempotent.
    func close() async {
        self.closed = true
        guard self.draining else { return }
        await withCheckedContinuation { self.closeWaiters.append($0) }
    }

    /// One transaction for `bodies`, each in its own savepoint: their outcomes, in order, and how
    /// long the transaction held the writer (`BEGIN` to the end of `COMMIT`).
    private static func commit(_ bodies: [@Sendable (Database) throws -> any Sendable], _ database: DatabasePool) async -> (
        [Result<any Sendable, any Error>], Duration
    ) {
        do {
            return try await database.writeWithoutTransaction { db in
                var outcomes: [Result<any Sendable, any Error>] = []
                outcomes.reserveCapacity(bodies.count)
                let started = ContinuousClock.now
                try db.inTransaction(.immediate) {
                    for body in bodies {
                        var value: (any Sendable)?
                        do {
                            try db.inSavepoint {
                                value = try body(db)
                                return .commit
                            }
                        } catch let error as StoreError {
                            // This write's own refusal: its savepoint is rolled back, the
                            // transaction goes on.
                            outcomes.append(.failure(error))
                            continue
                        }
                        // Any other error propagates: the whole transaction is rolled back.
                        outcomes.append(
                            value.map { .success($0) } ?? .failure(StoreError(code: .unavailable, reason: "SQLite: a write returned no value")))
                    }
                    return .commit
                }
                return (outcomes, started.duration(to: .now))
            }
        } catch {
            return (Array(repeating: .failure(error), count: bodies.count), .zero)
        }
    }
}
