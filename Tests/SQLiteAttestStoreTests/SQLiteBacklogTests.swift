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

/// The bulk path of `formattest-dev simulate backlog` (`insertBacklog`): the rows it writes are
/// the rows the per-row writes would have written, one transaction a batch, all or nothing.
struct SQLiteBacklogTests {
    /// The real now in whole seconds.
    let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))

    /// 32 bytes naming one thing of one kind.
    static func id(_ kind: UInt8, _ index: Int) -> [UInt8] {
        [kind, UInt8(index >> 8), UInt8(index & 0xFF)] + [UInt8](repeating: 0x3C, count: 29)
    }

    func key(_ index: Int) -> StoredKey {
        StoredKey(
            keyID: Self.id(1, index), username: "backlog-\(index)", publicKey: [0x04] + [UInt8](repeating: UInt8(index & 0xFF), count: 64),
            counter: 0, appID: "ABCDE12345.com.example", environment: .production, receipt: [UInt8](repeating: 7, count: 2_710),
            createdAt: self.now, lastUsed: self.now,
            attestation: KeyAttestation(object: [UInt8](repeating: 9, count: 4_244), clientDataHash: Self.id(8, index))
        )
    }

    func record(_ index: Int, expiresIn seconds: TimeInterval) -> ReplayRecord {
        ReplayRecord(formHash: Self.id(2, index), expiresAt: self.now.addingTimeInterval(seconds))
    }

    static func count(_ path: String, _ table: String) throws -> Int {
        try DatabaseQueue(path: path).read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM \(table)") ?? -1 }
    }

    static func temporaryPath() -> (URL, String) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-backlog-\(UUID().uuidString)")
        return (directory, directory.appendingPathComponent("formattest.sqlite").path)
    }

    @Test("a backlog batch writes the rows the per-row writes would: keys read back whole, records refuse their forms, challenges and windows count")
    func batchWritesWhatTheSingleWritesWould() async throws {
        let (directory, path) = Self.temporaryPath()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteAttestationStore(path: path)
        let keys = (0..<300).map(self.key)
        // Live records (an hour left) so that the store's own replay check can be asked about them.
        let records = (0..<2_000).map { self.record($0, expiresIn: 3600) }
        let challenges = (0..<50).map {
            IssuedChallenge(value: Self.id(3, $0), purpose: .form, username: nil, issuedAt: self.now, expiresAt: self.now.addingTimeInterval(600))
        }
        let windows = (0..<40).map { RateLimitWindow(id: Self.id(4, $0), start: self.now, expiresAt: self.now.addingTimeInterval(60)) }
        let before = await store.groupCommitStatistics()
        try await store.insertBacklog(keys: keys, replayRecords: records, challenges: challenges, rateLimitWindows: windows, now: self.now)
        let after = await store.groupCommitStatistics()
        // One write, one transaction, for 2,390 rows.
        #expect(after.groups - before.groups == 1)
        #expect(after.writes - before.writes == 1)

        #expect(try await store.loadKey(keyID: keys[123].keyID) == keys[123])
        #expect(try await store.keys(username: "backlog-299") == [keys[299]])
        #expect(try await store.isFormHashRecorded(records[1_999].formHash, now: self.now))
        await #expect(throws: StoreError(code: .replay, reason: "")) {
            try await store.recordFormHash(self.record(1_000, expiresIn: 3600), now: self.now)
        }
        // The challenge is there, unused, for its purpose.
        try await store.consumeChallenge(ChallengeClaim(value: Self.id(3, 49), purpose: .form, username: nil), now: self.now)
        // Each window counted one request: the next is its second.
        #expect(try await store.countRequest(in: windows[39]) == 2)
        await store.shutdown()
        #expect(try Self.count(path, "keys") == 300)
        #expect(try Self.count(path, "key_registrations") == 300)
        #expect(try Self.count(path, "form_hashes") == 2_000)
        #expect(try Self.count(path, "challenges") == 50)
        #expect(try Self.count(path, "rate_limits") == 40)
    }

    @Test("expired records of a backlog are taken over like a single write's, and purged by the bounded purge")
    func expiredBacklogIsPurged() async throws {
        let (directory, path) = Self.temporaryPath()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteAttestationStore(path: path)
        try await store.insertBacklog(replayRecords: (0..<1_000).map { self.record($0, expiresIn: -1 - Double($0)) }, now: self.now)
        #expect(try await !store.isFormHashRecorded(Self.id(2, 10), now: self.now))
        let step = try await store.purgeExpired(now: self.now, limit: 400)
        #expect(step.deleted == 400)
        await store.shutdown()
        #expect(try Self.count(path, "form_hashes") == 600)
    }

    /// 32 bytes that look random, as form hashes (SHA-256 values) are: two records that expire
    /// together sit far apart in hash order. SplitMix64 of the index.
    static func randomLooking(_ index: Int) -> [UInt8] {
        var state = UInt64(index) &* 0x9E37_79B9_7F4A_7C15
        var bytes: [UInt8] = []
        for _ in 0..<4 {
            state = state &+ 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            z ^= z >> 31
            bytes += withUnsafeBytes(of: z.bigEndian, Array.init)
        }
        return bytes
    }

    static func walSize(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path + "-wal"))?[.size] as? Int) ?? 0
    }

    @Test(
        "a purge step over 100,000 records with random hashes writes a few pages to the WAL, not one for each record it deletes; the pass leaves every live record"
    )
    func purgeStepWritesFewPages() async throws {
        let (directory, path) = Self.temporaryPath()
        defer { try? FileManager.default.removeItem(at: directory) }
        // Nine in ten expired (over the last hour, in no relation to their hashes), one in ten live.
        let records = (0..<100_000).map { index in
            ReplayRecord(
                formHash: Self.randomLooking(index),
                expiresAt: self.now.addingTimeInterval(index % 10 == 0 ? 3600 : -1 - Double(index % 3600)))
        }
        let filled = try SQLiteAttestationStore(path: path)
        try await filled.insertBacklog(replayRecords: records, now: self.now)
        // Closing the last connection checkpoints the WAL and removes it: what the step writes
        // next is what the WAL holds.
        await filled.shutdown()
        #expect(Self.walSize(path) == 0)

        let store = try SQLiteAttestationStore(path: path)
        let before = Self.walSize(path)
        let first = try await store.purgeExpired(now: self.now, limit: 1000)
        #expect(first.deleted == 1000)
        #expect(!first.complete)
        // 1,000 records of about 40 bytes in hash order are about a dozen pages (with the pages
        // above them in the B-tree). Oldest expiry first through an expiry index, the hashes of
        // those 1,000 records were spread over the hash index: about 700 pages, 2.9 MB
        // (measured with the schema before v9).
        let written = Self.walSize(path) - before
        #expect(written < 64 * 4096, "the step wrote \(written) bytes to the WAL")

        // The rest of the pass, in steps of at most 1,000.
        var steps = 1
        var deleted = first.deleted
        while true {
            let step = try await store.purgeExpired(now: self.now, limit: 1000)
            #expect(step.deleted <= 1000)
            deleted += step.deleted
            steps += 1
            if step.complete || steps > 200 { break }
        }
        #expect(deleted == 90_000)
        #expect(steps >= 90)
        #expect(try await store.isFormHashRecorded(Self.randomLooking(0), now: self.now))
        #expect(try await store.isFormHashRecorded(Self.randomLooking(99_990), now: self.now))
        #expect(try await !store.isFormHashRecorded(Self.randomLooking(1), now: self.now))
        await store.shutdown()
        #expect(try Self.count(path, "form_hashes") == 10_000)
    }

    @Test("a purge pass of the SQLite store with another now starts its sweep over: records that expired since are found")
    func newPassSweepsAgain() async throws {
        let (directory, path) = Self.temporaryPath()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteAttestationStore(path: path)
        // 300 records expiring one second apart, from 99.5 s ago.
        try await store.insertBacklog(
            replayRecords: (0..<300).map {
                ReplayRecord(formHash: Self.randomLooking($0), expiresAt: self.now.addingTimeInterval(Double($0) - 99.5))
            },
            now: self.now.addingTimeInterval(-200))
        // As of now: the 100 that expired (-99.5 ... -0.5 s); the pass sweeps the whole table.
        var first = 0
        while true {
            let step = try await store.purgeExpired(now: self.now, limit: 30)
            first += step.deleted
            if step.complete { break }
        }
        #expect(first == 100)
        // The same now again: the pass is over, nothing more.
        let again = try await store.purgeExpired(now: self.now, limit: 30)
        #expect(again.deleted == 0 && again.complete)
        // A pass 50 s later: a new sweep from the first hash finds the 50 that expired since.
        var second = 0
        while true {
            let step = try await store.purgeExpired(now: self.now.addingTimeInterval(50), limit: 30)
            second += step.deleted
            if step.complete { break }
        }
        #expect(second == 50)
        await store.shutdown()
        #expect(try Self.count(path, "form_hashes") == 150)
    }

    @Test("a batch with one row the store refuses (a registered keyId) throws that row's error and leaves nothing of the batch")
    func refusedRowRollsBackTheBatch() async throws {
        let (directory, path) = Self.temporaryPath()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteAttestationStore(path: path)
        try await store.insertKey(self.key(5))
        await #expect(throws: StoreError(code: .duplicateKey, reason: "")) {
            try await store.insertBacklog(
                keys: (0..<10).map(self.key),
                replayRecords: (0..<100).map { self.record($0, expiresIn: 3600) },
                now: self.now
            )
        }
        await store.shutdown()
        #expect(try Self.count(path, "keys") == 1)
        #expect(try Self.count(path, "form_hashes") == 0)
    }

    @Test("a batch repeating an unexpired form hash throws replay and leaves nothing of the batch")
    func liveDuplicateRecordRollsBackTheBatch() async throws {
        let (directory, path) = Self.temporaryPath()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteAttestationStore(path: path)
        await #expect(throws: StoreError(code: .replay, reason: "")) {
            try await store.insertBacklog(
                keys: (0..<10).map(self.key),
                replayRecords: (0..<100).map { self.record($0, expiresIn: 3600) } + [self.record(42, expiresIn: 3600)],
                now: self.now
            )
        }
        await store.shutdown()
        #expect(try Self.count(path, "keys") == 0)
        #expect(try Self.count(path, "form_hashes") == 0)
    }
}
