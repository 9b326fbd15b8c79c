//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation
import GRDB

/// The read-only connections ``SQLiteAttestationStore/loadKey(keyID:)`` reads from, on the calling
/// thread: one per core, each taken by whichever caller finds it free.
///
/// Every request reads its key. A single connection serialized the reads of the concurrency pool's
/// threads: a thread that found it busy slept on its queue until the other's SELECT ended (a share
/// of the service's context switches under load: docs/performance.md). GRDB's reader pool costs more
/// per read than the read (a dispatch barrier, a semaphore and a key path per checkout). Here a
/// caller takes the first connection whose lock it gets without waiting, and waits only when every
/// one is in use (more concurrent readers than cores).
final class KeyReaders: Sendable {
    private struct Reader: Sendable {
        let lock: NSLock
        let connection: DatabaseQueue
    }

    private let readers: [Reader]

    /// The number of connections: one per core, at least 2 and at most 8.
    static var count: Int { min(8, max(2, ProcessInfo.processInfo.activeProcessorCount)) }

    /// Opens ``count`` read-only WAL connections to the database at `path`.
    init(path: String) throws {
        var configuration = Configuration()
        configuration.readonly = true
        configuration.busyMode = .timeout(5)
        self.readers = try (0..<Self.count).map { _ in
            Reader(lock: NSLock(), connection: try DatabaseQueue(path: path, configuration: configuration))
        }
    }

    /// Runs `body` on a free connection (one SELECT: SQLite isolates it by itself, so no BEGIN and
    /// COMMIT are wrapped around it), on the calling thread.
    func read<T>(_ body: (Database) throws -> T) throws -> T {
        for reader in self.readers where reader.lock.try() {
            defer { reader.lock.unlock() }
            return try reader.connection.unsafeRead(body)
        }
        // Every connection is in use: wait for the first, as callers of a single connection did.
        let reader = self.readers[0]
        reader.lock.lock()
        defer { reader.lock.unlock() }
        return try reader.connection.unsafeRead(body)
    }

    /// Closes every connection (GRDB waits for a running read); later reads throw. One that fails
    /// to close does not keep the others open: the first error is thrown after all were tried.
    func close() throws {
        var failure: (any Error)?
        for reader in self.readers {
            do {
                try reader.connection.close()
            } catch {
                failure = failure ?? error
            }
        }
        if let failure { throw failure }
    }
}
