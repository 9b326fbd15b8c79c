//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import GRDB
import Logging

/// Copies the write-ahead log back into the database file from a connection of its own, every
/// ``interval``, instead of in the middle of a commit, and has the log restarted from the writer
/// when it has grown.
///
/// SQLite's automatic checkpoint runs in the connection that commits, right after the COMMIT: the
/// group whose commit crossed the threshold waited for the copy and the database file's fsync, which
/// showed in the service's p99 at low concurrency. A PASSIVE checkpoint from another connection
/// never waits for the writer or the readers and never makes them wait. Durability does not depend
/// on it: a commit is durable once its WAL frames are synced (`synchronous = FULL`).
///
/// A PASSIVE checkpoint copies the log back but never restarts it: SQLite writes the log from its
/// start again only when a writer begins after a checkpoint that copied every frame, and under a
/// steady load a write always lands between the two. So the log grew to the writer's automatic
/// checkpoint threshold (`SQLiteAttestationStore.walAutocheckpointPages`), where that checkpoint
/// ran inside a commit. Once the log holds ``restartFrames`` or more after a round's PASSIVE
/// checkpoint, the round asks the writer for a catch-up: a second PASSIVE checkpoint run on the
/// writer's own connection between two transactions (``GroupCommit/checkpointIfIdle(force:_:)``),
/// where no write can land during it, so it copies every frame left (those of the last fraction of a
/// second) and the next write starts the log from its beginning. The catch-up never runs while a
/// purge step is queued or running (the round tries again 250 ms later); otherwise it queues
/// behind the writes waiting then, as one more transaction's worth of wait for the requests
/// behind it (short, the PASSIVE round having copied the rest). Waiting for an idle writer
/// instead, for up to 8 rounds, let the log grow further than a RESTART had, during a purge and
/// under a test's steady stream of commits (the figures of both: docs/performance.md).
///
/// It replaced a RESTART checkpoint from this connection (issue 32: the stalls of a purge step and a
/// request in a run of the 1,000,000-record purge, docs/performance.md): a RESTART takes the write lock and
/// holds it while it waits for the readers (up to its busy timeout), copies the frames left and
/// syncs the log and the database file, and the writer waiting for it in `BEGIN IMMEDIATE` sleeps
/// in SQLite's busy handler (steps of up to 100 ms) rather than starting when it is released.
///
/// Each round that found frames in the log is logged at debug level (`wal checkpoint`: mode,
/// frames in the log, frames copied, whether it stopped short, duration), as is each catch-up
/// (or why it did not run). The writer keeps an automatic checkpoint at a high threshold
/// (``SQLiteAttestationStore/walAutocheckpointPages``) as the bound on the log's size should this
/// one fall behind or stop. Failures (a busy or full disk) are left to the next round.
struct WALCheckpointer: Sendable {
    static let interval: Duration = .milliseconds(250)
    /// The log's size (in frames, 4 KB each) from which a round has the writer catch up.
    static let restartFrames = 1_000

    /// The database; the PASSIVE rounds run on a connection of their own.
    let path: String
    /// The writer, which runs the catch-ups.
    let group: GroupCommit
    /// Receives the rounds (debug).
    let logger: Logger

    /// What one checkpoint did (`PRAGMA wal_checkpoint`'s row).
    struct Round: Sendable {
        /// SQLite could not copy every frame it wanted to (a reader or the writer was in the way).
        var busy: Bool
        /// Frames in the log.
        var frames: Int
        /// Frames copied back into the database file (in all rounds since the log restarted).
        var copied: Int
        var duration: Duration

        static func run(_ db: Database) throws -> Round {
            let started = ContinuousClock.now
            let row = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(PASSIVE)")
            return Round(busy: (row?[0] ?? 0) != 0, frames: row?[1] ?? 0, copied: row?[2] ?? 0, duration: started.duration(to: .now))
        }
    }

    /// Checkpoints every ``interval`` until the calling task is cancelled (the store's
    /// housekeeping, ``SQLiteAttestationStore/runHousekeeping()``), on a connection opened here
    /// and closed on return. A connection that cannot be opened is logged and ends it: the store
    /// works on, its log bounded by the writer's automatic checkpoint.
    func run() async {
        var configuration = Configuration()
        configuration.label = "formattest.wal-checkpoint"
        let connection: DatabaseQueue
        do {
            connection = try DatabaseQueue(path: self.path, configuration: configuration)
        } catch {
            self.logger.warning("wal checkpoint: no connection, no checkpoints", metadata: ["error": "\(error)"])
            return
        }
        defer { try? connection.close() }
        while !Task.isCancelled {
            try? await Task.sleep(for: Self.interval)
            guard !Task.isCancelled else { break }
            guard let round = try? await connection.writeWithoutTransaction({ db in try Round.run(db) }) else { continue }
            if round.frames > 0 { Self.log(self.logger, "passive", round) }
            guard round.frames >= Self.restartFrames else { continue }
            if let caughtUp = await self.group.checkpointIfIdle(force: true, { db in try Round.run(db) }) as? Round {
                Self.log(self.logger, "catch-up", caughtUp)
            } else {
                self.logger.debug(
                    "wal checkpoint", metadata: ["mode": "catch-up not run: a purge step is queued or running, or the store is closing"])
            }
        }
    }

    private static func log(_ logger: Logger, _ mode: String, _ round: Round) {
        logger.debug(
            "wal checkpoint",
            metadata: [
                "mode": "\(mode)", "frames": "\(round.frames)", "copied": "\(round.copied)", "busy": "\(round.busy)",
                "duration_ms": "\(GroupCommit.milliseconds(round.duration))",
            ]
        )
    }
}
