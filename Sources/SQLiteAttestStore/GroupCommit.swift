//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestFlows
import GRDB
import Logging

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
/// it is told how long its transaction held the writer, `BEGIN` to the end of `COMMIT`, split
/// into the wait for the write lock, the statements and the commit.
///
/// The write-ahead log's catch-up checkpoint (``WALCheckpointer``) runs here too, on the writer's
/// connection and outside any transaction (``checkpointIfIdle(force:_:)``): never while a purge
/// step is queued or running, and, unless forced, only when no write at all is waiting.
///
/// A transaction of the requests' groups that held the writer longer than
/// ``slowTransaction`` is logged at debug level with the same split (the purge's steps are logged
/// by the purge).
package actor GroupCommit {
    /// How one queued write runs.
    private enum Kind {
        /// In the next group's transaction (``submit(_:)``).
        case grouped
        /// In a transaction of its own (``submitAlone(_:)``).
        case alone
        /// On the writer's connection outside any transaction (``checkpointIfIdle(force:_:)``).
        case bare
    }

    /// One queued write and its waiting caller.
    private struct Member {
        let body: @Sendable (Database) throws -> any Sendable
        let continuation: CheckedContinuation<any Sendable, any Error>
        let kind: Kind
    }

    /// What ``submitAlone(_:)``'s transaction returned, and where its time went.
    private struct Held: Sendable {
        let value: any Sendable
        let phases: PurgeStep.Phases
    }

    /// A group's transaction that held the writer at least this long is logged (debug).
    static let slowTransaction: Duration = .milliseconds(50)

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
    private let logger: Logger
    private var pending: [Member] = []
    private var draining = false
    /// Whether a write run alone (a purge step) is running now.
    private var aloneRunning = false
    /// Set by ``close()``: later writes are refused.
    private var closed = false
    /// Callers of ``close()`` waiting for the running groups to commit.
    private var closeWaiters: [CheckedContinuation<Void, Never>] = []
    package private(set) var statistics = Statistics()

    init(database: DatabasePool, logger: Logger) {
        self.database = database
        self.logger = logger
    }

    /// Runs `body` in the next group's transaction and returns its value once that transaction
    /// committed; throws `body`'s error (its writes rolled back) or the transaction's.
    func submit(_ body: @escaping @Sendable (Database) throws -> any Sendable) async throws -> any Sendable {
        guard !self.closed else { throw StoreError(code: .unavailable, reason: "SQLite: the store is shut down") }
        return try await self.enqueue(body, kind: .grouped)
    }

    /// Runs `body` in a transaction of its own, between two groups; returns its value once that
    /// transaction committed, and where its time went: the wait for the write lock
    /// (`BEGIN IMMEDIATE`), the statements, and `COMMIT` with its sync. Their sum is what a
    /// request queued behind it waited for.
    func submitAlone(_ body: @escaping @Sendable (Database) throws -> any Sendable) async throws -> (value: any Sendable, phases: PurgeStep.Phases) {
        guard !self.closed else { throw StoreError(code: .unavailable, reason: "SQLite: the store is shut down") }
        guard let held = try await self.enqueue(body, kind: .alone) as? Held else {
            throw StoreError(code: .unavailable, reason: "SQLite: a write run alone returned no duration")
        }
        return (held.value, held.phases)
    }

    /// Runs `body` on the writer's connection, outside any transaction, when the writer is free
    /// for it: never while a write run alone (a purge step) is queued or running; otherwise at once
    /// when no write is queued or running, or, with `force`, after the writes queued now.
    ///
    /// - Returns: `body`'s value, or `nil` when it did not run (the writer was not free, or the
    ///   store is shut down).
    func checkpointIfIdle(force: Bool, _ body: @escaping @Sendable (Database) throws -> any Sendable) async -> (any Sendable)? {
        guard !self.closed, !self.aloneRunning, !self.pending.contains(where: { $0.kind == .alone }) else { return nil }
        guard force || !self.draining else { return nil }
        return try? await self.enqueue(body, kind: .bare)
    }

    private func enqueue(_ body: @escaping @Sendable (Database) throws -> any Sendable, kind: Kind) async throws -> any Sendable {
        try await withCheckedThrowingContinuation { continuation in
            self.pending.append(Member(body: body, continuation: continuation, kind: kind))
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
            if first.kind == .bare {
                self.pending.removeFirst()
                let outcome = await Self.runBare(first.body, self.database)
                first.continuation.resume(with: outcome)
                continue
            }
            // A write run alone is a group of its own; otherwise the group ends before the next one.
            let size =
                first.kind == .alone
                ? 1
                : (self.pending.prefix(Self.maximumGroupSize).firstIndex(where: { $0.kind != .grouped })
                    ?? min(self.pending.count, Self.maximumGroupSize))
            let members = Array(self.pending.prefix(size))
            self.pending.removeFirst(members.count)
            let alone = first.kind == .alone
            self.aloneRunning = alone
            let (outcomes, phases) = await Self.commit(members.map(\.body), self.database)
            self.aloneRunning = false
            self.statistics.groups += 1
            self.statistics.writes += members.count
            if !alone, let phases, phases.lockWait + phases.statements + phases.commit >= Self.slowTransaction {
                self.logger.debug(
                    "slow write transaction",
                    metadata: [
                        "writes": "\(members.count)", "lock_wait_ms": "\(Self.milliseconds(phases.lockWait))",
                        "statements_ms": "\(Self.milliseconds(phases.statements))", "commit_ms": "\(Self.milliseconds(phases.commit))",
                    ]
                )
            }
            let held = phases ?? PurgeStep.Phases(lockWait: .zero, statements: .zero, commit: .zero)
            for (member, outcome) in zip(members, outcomes) {
                member.continuation.resume(with: alone ? outcome.map { Held(value: $0, phases: held) as any Sendable } : outcome)
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

    /// Milliseconds, with three decimals (log lines).
    static func milliseconds(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        let microseconds = seconds &* 1_000_000 &+ attoseconds / 1_000_000_000_000
        return "\(microseconds / 1000).\(String(String(microseconds % 1000 + 1000).dropFirst()))"
    }

    /// Runs `body` on the writer's connection outside any transaction.
    private static func runBare(_ body: @escaping @Sendable (Database) throws -> any Sendable, _ database: DatabasePool) async -> Result<
        any Sendable, any Error
    > {
        do {
            return .success(try await database.writeWithoutTransaction { db in try body(db) })
        } catch {
            return .failure(error)
        }
    }

    /// One transaction for `bodies`, each in its own savepoint: their outcomes, in order, and
    /// where the transaction's time went (`nil` when it failed as a whole): `BEGIN IMMEDIATE` (the
    /// wait for the write lock), the statements, `COMMIT` (the log's write and sync).
    private static func commit(_ bodies: [@Sendable (Database) throws -> any Sendable], _ database: DatabasePool) async -> (
        [Result<any Sendable, any Error>], PurgeStep.Phases?
    ) {
        do {
            return try await database.writeWithoutTransaction { db in
                var outcomes: [Result<any Sendable, any Error>] = []
                outcomes.reserveCapacity(bodies.count)
                let started = ContinuousClock.now
                try db.beginTransaction(.immediate)
                let locked = ContinuousClock.now
                do {
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
                } catch {
                    // Any error but a write's own refusal: nothing of the group is kept.
                    if db.isInsideTransaction { try? db.rollback() }
                    throw error
                }
                let ran = ContinuousClock.now
                do {
                    try db.commit()
                } catch {
                    if db.isInsideTransaction { try? db.rollback() }
                    throw error
                }
                let committed = ContinuousClock.now
                return (
                    outcomes,
                    PurgeStep.Phases(
                        lockWait: started.duration(to: locked), statements: locked.duration(to: ran), commit: ran.duration(to: committed))
                )
            }
        } catch {
            return (Array(repeating: .failure(error), count: bodies.count), nil)
        }
    }
}
