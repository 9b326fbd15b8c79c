//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import FormAttestFlows
import Foundation
import GRDB
import SQLiteAttestStore
import Testing

/// The retention of revoked keys on SQLite (issue 31, R5-F7): the purge reads through the partial
/// indexes on revoked_at, and what it deletes gives the file's pages back.
struct SQLiteRetentionTests {
    /// The real now in whole seconds.
    let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))

    static func temporaryPath() -> (URL, String) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-retention-\(UUID().uuidString)")
        return (directory, directory.appendingPathComponent("formattest.sqlite").path)
    }

    /// A key as a simulated registration leaves it: a 2,710-byte receipt and a 4,244-byte
    /// attestation object (the sizes `formattest-dev simulate backlog` uses).
    func key(_ index: Int, revokedAt: Date?) -> StoredKey {
        let id = [UInt8(index >> 8), UInt8(index & 0xFF)] + [UInt8](repeating: 0x5A, count: 30)
        let created = self.now.addingTimeInterval(-40 * 86_400)
        return StoredKey(
            keyID: id, username: "alice", publicKey: [0x04] + [UInt8](repeating: UInt8(index & 0xFF), count: 64), counter: 0,
            appID: "ABCDE12345.com.example", environment: .production, receipt: [UInt8](repeating: 7, count: 2_710), createdAt: created,
            lastUsed: created, revokedAt: revokedAt,
            attestation: KeyAttestation(object: [UInt8](repeating: 9, count: 4_244), clientDataHash: id)
        )
    }

    static func usedBytes(_ path: String) throws -> Int {
        try DatabaseQueue(path: path).read { db in
            try Int.fetchOne(
                db, sql: "SELECT (page_count - freelist_count) * page_size FROM pragma_page_count, pragma_freelist_count, pragma_page_size")
                ?? -1
        }
    }

    @Test("the retention's reads go through the partial indexes on revoked_at, keys and passkeys alike")
    func indexedReads() async throws {
        let (directory, path) = Self.temporaryPath()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteAttestationStore(path: path)
        await store.shutdown()
        for (table, id, index) in [("keys", "key_id", "keys_revoked"), ("passkeys", "credential_id", "passkeys_revoked")] {
            let plan = try await DatabaseQueue(path: path).read { db in
                try Row.fetchAll(
                    db, sql: "EXPLAIN QUERY PLAN " + SQLiteAttestationStore.revokedSelect(table, id), arguments: [self.now.timeIntervalSince1970, 10]
                )
                .map { $0["detail"] as String? ?? "" }.joined(separator: "; ")
            }
            #expect(plan.contains("USING COVERING INDEX \(index)") && !plan.contains("TEMP B-TREE"), "\(table): \(plan)")
        }
    }

    @Test("a retention step with nothing due does not take the writer; one with a revoked key due does")
    func nothingDueTakesNoWrite() async throws {
        let (directory, path) = Self.temporaryPath()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteAttestationStore(path: path)
        let cutoff = self.now.addingTimeInterval(-30 * 86_400)
        // Revoked after the cutoff, and active: nothing is due.
        try await store.insertBacklog(
            keys: [self.key(1, revokedAt: cutoff.addingTimeInterval(1)), self.key(2, revokedAt: nil)], now: self.now)
        let before = await store.groupCommitStatistics()
        let idle = try await store.purgeRevoked(before: cutoff, limit: 10)
        #expect(idle.deleted == 0 && idle.complete)
        #expect(await store.groupCommitStatistics().submitted == before.submitted, "no write was submitted")
        // One thing changed: a key revoked at the cutoff. The step runs on the writer and deletes it.
        try await store.insertBacklog(keys: [self.key(3, revokedAt: cutoff)], now: self.now)
        let due = await store.groupCommitStatistics()
        let step = try await store.purgeRevoked(before: cutoff, limit: 10)
        #expect(step.deleted == 1 && step.complete)
        #expect(await store.groupCommitStatistics().submitted == due.submitted + 1)
        await store.shutdown()
    }

    @Test("R5-F7 figures: 1,000 keys revoked 31 days ago go in bounded steps, with their registrations, and give their pages back")
    func storeSizeBeforeAndAfter() async throws {
        let (directory, path) = Self.temporaryPath()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteAttestationStore(path: path)
        let revokedAt = self.now.addingTimeInterval(-31 * 86_400)
        let cutoff = self.now.addingTimeInterval(-30 * 86_400)
        try await store.insertBacklog(keys: (0..<10).map { self.key($0, revokedAt: nil) }, now: self.now)
        let baseline = try Self.usedBytes(path)
        try await store.insertBacklog(keys: (10..<1_010).map { self.key($0, revokedAt: revokedAt) }, now: self.now)
        let before = try Self.usedBytes(path)
        var steps: [Int] = []
        var longest = Duration.zero
        var complete = false
        while !complete && steps.count < 100 {
            let step = try await store.purgeRevoked(before: cutoff, limit: 64)
            steps.append(step.deleted)
            longest = max(longest, step.duration)
            complete = step.complete
        }
        #expect(steps == Array(repeating: 64, count: 15) + [40], "\(steps)")
        #expect(try await store.countKeys(username: "alice", .all) == 10)
        #expect(try await store.keys(username: "alice").allSatisfy { $0.revokedAt == nil && $0.attestation != nil })
        let after = try Self.usedBytes(path)
        let perKey = (before - baseline) / 1_000
        // The pages of 1,000 keys' rows and registrations are free again (to within 1 %).
        #expect(before - after >= 990 * perKey, "before \(before), after \(after), baseline \(baseline)")
        print(
            "R5-F7 figures: 10 active keys \(baseline) B in use; +1,000 revoked \(before) B (\(perKey) B a key); after the purge \(after) B; longest step \(longest)"
        )
        await store.shutdown()
    }
}
