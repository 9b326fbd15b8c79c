//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import GRDB

/// Copies the write-ahead log back into the database file from a connection of its own, every
/// ``interval``, instead of in the middle of a commit.
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
/// checkpoint threshold (about 40 MB in 50 s at 200 forms/s, measured), where that checkpoint ran
/// inside a commit. Once the log holds ``restartFrames`` or more, the round therefore ends with a
/// RESTART checkpoint: it waits (at most ``restartWait``) for the writer to finish, copies what the
/// PASSIVE one left (the frames of the last fraction of a second), and makes the next writer
/// start the log from the beginning. The writer waits for that copy only: a few pages, not 40 MB.
///
/// The writer keeps an automatic checkpoint at a high threshold
/// (``SQLiteAttestationStore/walAutocheckpointPages``) as the bound on the log's size should this
/// one fall behind or stop. Failures (a busy or full disk) are left to the next round.
final class WALCheckpointer: Sendable {
    static let interval: Duration = .milliseconds(250)
    /// The log's size (in frames, 4 KB each) from which a round restarts it.
    static let restartFrames = 1_000
    /// How long (seconds) a RESTART checkpoint waits for the writer and the readers before it gives up
    /// until the next round.
    static let restartWait: Double = 0.02

    private let task: Task<Void, Never>

    /// - Throws: when the connection cannot be opened.
    init(path: String) throws {
        var configuration = Configuration()
        configuration.label = "formattest.wal-checkpoint"
        configuration.busyMode = .timeout(Self.restartWait)
        let connection = try DatabaseQueue(path: path, configuration: configuration)
        self.task = Task.detached(priority: .utility) {
            while !Task.isCancelled {
                try? await Task.sleep(for: Self.interval)
                guard !Task.isCancelled else { break }
                _ = try? await connection.writeWithoutTransaction { db in
                    // The row: busy, frames in the log, frames copied back.
                    let row = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(PASSIVE)")
                    let frames: Int = row?[1] ?? 0
                    if frames >= Self.restartFrames {
                        try db.execute(sql: "PRAGMA wal_checkpoint(RESTART)")
                    }
                }
            }
            try? connection.close()
        }
    }

    /// Stops checkpointing; returns once the connection is closed.
    func stop() async {
        self.task.cancel()
        await self.task.value
    }

    deinit {
        self.task.cancel()
    }
}
