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
/// The writer keeps an automatic checkpoint at a high threshold
/// (``SQLiteAttestationStore/walAutocheckpointPages``) as the bound on the log's size should this
/// one fall behind or stop. Failures (a busy or full disk) are left to the next round.
final class WALCheckpointer: Sendable {
    static let interval: Duration = .milliseconds(250)

    private let task: Task<Void, Never>

    /// - Throws: when the connection cannot be opened.
    init(path: String) throws {
        var configuration = Configuration()
        configuration.label = "formattest.wal-checkpoint"
        let connection = try DatabaseQueue(path: path, configuration: configuration)
        self.task = Task.detached(priority: .utility) {
            while !Task.isCancelled {
                try? await Task.sleep(for: Self.interval)
                guard !Task.isCancelled else { break }
                _ = try? await connection.writeWithoutTransaction { db in
                    try db.execute(sql: "PRAGMA wal_checkpoint(PASSIVE)")
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
