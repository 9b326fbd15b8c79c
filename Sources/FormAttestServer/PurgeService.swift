//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

package import FormAttestFlows
package import Foundation
package import Logging
import Metrics
import ServiceLifecycle

/// Deletes expired challenges, form hashes and rate-limit windows periodically, and, with a
/// retention (``revokedRetention``), the keys and passkeys revoked longer ago than it, with their
/// registrations. Housekeeping only: every read already ignores expired records, and a revoked
/// credential is refused whether it is kept or not, so a stopped or failing purge never affects
/// correctness.
///
/// A pass deletes in small steps (``OperationalAttestationStore/purgeExpired(now:limit:)``), each
/// sized by ``PurgePacer`` to hold the store's writer for about ``PurgePacer/target`` (measured by
/// the store: on SQLite the step's own transaction, its commit and sync included), and rests
/// between steps as long as the last step held the writer, so requests' writes run in between and the purge
/// takes at most about half of the writer's time. A backlog of any size (a store that was down, a
/// first start over an old database) is worked off in one pass, at that pace, without a long
/// transaction that every request would wait behind.
package struct PurgeService: Service {
    let store: any OperationalAttestationStore
    let interval: Duration
    let pacer: PurgePacer
    let now: @Sendable () -> Date
    /// How long a revoked key or passkey is kept after its revocation (`nil`: for ever). The
    /// caller keeps it at least as long as every window the service counts registrations over
    /// (``ServerConfiguration/minimumRevokedRetention``).
    let revokedRetention: TimeInterval?
    let logger: Logger

    package init(
        store: any OperationalAttestationStore,
        interval: Duration,
        pacer: PurgePacer,
        now: @escaping @Sendable () -> Date,
        revokedRetention: TimeInterval? = nil,
        logger: Logger
    ) {
        self.store = store
        self.interval = interval
        self.pacer = pacer
        self.now = now
        self.revokedRetention = revokedRetention
        self.logger = logger
    }

    package func run() async throws {
        // Graceful shutdown cancels the loop at once (a step in flight commits or rolls back whole).
        try? await cancelWhenGracefulShutdown {
            var pacer = self.pacer
            while !Task.isCancelled {
                try await Task.sleep(for: self.interval)
                try await self.pass(&pacer)
            }
        }
    }

    /// One pass: steps until one says the pass is complete (nothing expired is left as of the
    /// pass's start), then, with a retention, steps through the credentials revoked before the
    /// pass's start less the retention, at the same pace.
    package func pass(_ pacer: inout PurgePacer) async throws {
        let now = self.now()
        let expired = try await self.run(&pacer, what: "expired records") { (limit: Int) async throws(StoreError) -> PurgeStep in
            try await self.store.purgeExpired(now: now, limit: limit)
        }
        guard expired, let retention = self.revokedRetention else { return }
        let cutoff = now.addingTimeInterval(-retention)
        _ = try await self.run(&pacer, what: "revoked keys and passkeys") { (limit: Int) async throws(StoreError) -> PurgeStep in
            try await self.store.purgeRevoked(before: cutoff, limit: limit)
        }
    }

    /// Runs `step` until one says it is complete; whether the store answered every step (a
    /// failure is logged and ends the pass: the next pass retries).
    private func run(
        _ pacer: inout PurgePacer, what: String, _ purge: (Int) async throws(StoreError) -> PurgeStep
    ) async throws -> Bool {
        let started = ContinuousClock.now
        var removed = 0
        var steps = 0
        var longest = Duration.zero
        while !Task.isCancelled {
            let limit = pacer.limit
            let step: PurgeStep
            do {
                step = try await purge(limit)
            } catch {
                self.logger.warning("purge failed; will retry", metadata: ["code": "\(error.code)", "records": "\(what)"])
                return false
            }
            pacer.record(deleted: step.deleted, limit: limit, elapsed: step.duration, complete: step.complete)
            self.logStep(step, limit: limit)
            Timer(label: "formattest_purge_step_seconds").recordNanoseconds(Self.nanoseconds(step.duration))
            Counter(label: "formattest_purged_records_total").increment(by: step.deleted)
            removed += step.deleted
            steps += 1
            longest = max(longest, step.duration)
            guard !step.complete else { break }
            // The writer goes back to the requests for as long as the step held it: the purge
            // takes at most about half of the writer's time, whatever the backlog.
            try await Task.sleep(for: step.duration)
        }
        guard removed > 0 else { return true }
        // Notice, not info: one line a pass that found work, what an operator watches for.
        self.logger.notice(
            "purged \(what)",
            metadata: [
                "count": "\(removed)", "steps": "\(steps)", "longest_step_ms": "\(Self.milliseconds(longest))",
                "duration_ms": "\(Self.milliseconds(started.duration(to: .now)))", "next_step_limit": "\(pacer.limit)",
            ]
        )
        return true
    }

    /// One line a step (debug): what it deleted and where its time went, to set beside the
    /// requests' latencies and the store's checkpoints (docs/performance.md, "Sustained operation").
    private func logStep(_ step: PurgeStep, limit: Int) {
        guard self.logger.logLevel <= .debug else { return }
        var metadata: Logger.Metadata = [
            "deleted": "\(step.deleted)", "limit": "\(limit)", "complete": "\(step.complete)",
            "held_ms": "\(Self.fractionalMilliseconds(step.duration))",
        ]
        if let phases = step.phases {
            metadata["lock_wait_ms"] = "\(Self.fractionalMilliseconds(phases.lockWait))"
            metadata["statements_ms"] = "\(Self.fractionalMilliseconds(phases.statements))"
            metadata["commit_ms"] = "\(Self.fractionalMilliseconds(phases.commit))"
        }
        self.logger.debug("purge step", metadata: metadata)
    }

    /// Milliseconds with three decimals.
    private static func fractionalMilliseconds(_ duration: Duration) -> String {
        let microseconds = Self.nanoseconds(duration) / 1000
        return "\(microseconds / 1000).\(String(String(microseconds % 1000 + 1000).dropFirst()))"
    }

    private static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000
    }

    private static func milliseconds(_ duration: Duration) -> Int64 { Self.nanoseconds(duration) / 1_000_000 }
}

/// Sizes the purge's steps so that each holds the store's writer for about ``target``.
///
/// A step's time grows with the rows it deletes (index pages, the write-ahead log) and varies with
/// the machine and the store, so the limit follows what the last full step measured: it moves
/// towards `limit × target / elapsed`, at most doubling or halving at once, within
/// ``minimumLimit``...``maximumLimit``. A step that ended the pass with less than its limit says
/// nothing about the cost of a full one and leaves the limit as it is; a step that deleted less
/// than its limit but did not end the pass (a sweep in key order that examined its share of rows
/// and found few expired) measured a full step's work, and counts.
package struct PurgePacer: Sendable, Hashable {
    /// How long one step should hold the writer.
    package var target: Duration
    /// The rows the next step may delete.
    package private(set) var limit: Int
    package let minimumLimit: Int
    package let maximumLimit: Int

    package init(target: Duration = .milliseconds(5), initialLimit: Int = 256, minimumLimit: Int = 32, maximumLimit: Int = 10_000) {
        self.target = target
        self.minimumLimit = max(minimumLimit, 1)
        self.maximumLimit = max(maximumLimit, self.minimumLimit)
        self.limit = min(max(initialLimit, self.minimumLimit), self.maximumLimit)
    }

    package mutating func record(deleted: Int, limit: Int, elapsed: Duration, complete: Bool) {
        guard deleted >= limit || !complete, limit > 0 else { return }
        let ratio = elapsed > .zero ? self.target / elapsed : 2
        let scaled = Double(limit) * min(max(ratio, 0.5), 2)
        self.limit = min(max(Int(scaled.rounded(.down)), self.minimumLimit), self.maximumLimit)
    }
}
