//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AttestationStoreContract
import FormAttestFlows
import Foundation
import GRDB
import SQLiteAttestStore
import Testing

/// The store contract on SQLite, and what only the SQLite store has: its file, its migrations.
struct SQLiteStoreTests {
    @Test("SQLite store passes the contract", arguments: StoreContract.all.map(\.name))
    func sqlite(check: String) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-contract-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        try await StoreContract.run(check) {
            try SQLiteAttestationStore(path: directory.appendingPathComponent("\(UUID().uuidString).sqlite").path)
        }
    }

    @Test("SQLite: created under missing directories, WAL with synchronous FULL, and reopens with its data")
    func sqliteFile() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-file-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("a/b/formattest.sqlite").path
        let store = try SQLiteAttestationStore(path: path)
        try await store.insertKey(StoreContract.key(1))
        #expect(FileManager.default.fileExists(atPath: path + "-wal"))
        let reopened = try SQLiteAttestationStore(path: path)
        #expect(try await reopened.loadKey(keyID: StoreContract.key(1).keyID) != nil)
        // Every commit is synced: an OS crash cannot forget an accepted form's replay record.
        #expect(try await reopened.synchronousLevel() == 2)
    }

    @Test("SQLite: under a steady stream of commits the write-ahead log is restarted, and stays far below what was written")
    func walRestartedUnderSteadyWrites() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-wal-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("formattest.sqlite").path
        let store = try SQLiteAttestationStore(path: path)
        // The store's housekeeping, as the application's service group runs it.
        let housekeeping = Task { await store.runHousekeeping() }
        let now = Date()
        // One commit after the other, each a replay record with a hash unlike its neighbours':
        // every commit writes at least one 4 KB page to the log, 12 MB at the least for 3,000.
        // A PASSIVE checkpoint alone never restarted the log under such a stream (a write always
        // landed between the checkpoint and the next write), so it grew by all of that.
        let commits = 3_000
        for index in 0..<commits {
            var hash = [UInt8](repeating: 0, count: 32)
            withUnsafeBytes(of: UInt64(index).multipliedReportingOverflow(by: 0x9E37_79B9_7F4A_7C15).partialValue.bigEndian) {
                hash.replaceSubrange(0..<8, with: $0)
            }
            try await store.recordFormHash(ReplayRecord(formHash: hash, expiresAt: now.addingTimeInterval(3600)), now: now)
        }
        let wal = ((try? FileManager.default.attributesOfItem(atPath: path + "-wal"))?[.size] as? Int) ?? 0
        let written = commits * 4096
        #expect(wal < written / 2, "the log holds \(wal) bytes after \(commits) commits (at least \(written) bytes written)")
        housekeeping.cancel()
        await housekeeping.value
        await store.shutdown()
    }

    @Test("SQLite: keys read concurrently, on the store's several read connections, are each their own and see every commit made before the read")
    func concurrentKeyReads() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-readers-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteAttestationStore(path: directory.appendingPathComponent("formattest.sqlite").path)
        let keys = (1...8).map { StoreContract.key(UInt8($0)) }
        for key in keys { try await store.insertKey(key) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for key in keys {
                group.addTask {
                    for counter in UInt32(1)...25 {
                        #expect(try await store.advanceCounter(keyID: key.keyID, to: counter, lastUsed: Date(timeIntervalSince1970: 0)))
                        // Committed before this read began: whichever connection serves it sees it.
                        let read = try await store.loadKey(keyID: key.keyID)
                        #expect(read?.keyID == key.keyID && read?.counter == counter, "\(String(describing: read?.counter)) != \(counter)")
                    }
                }
                group.addTask {
                    for _ in 0..<100 {
                        let read = try await store.loadKey(keyID: key.keyID)
                        #expect(read?.keyID == key.keyID && read?.username == key.username)
                    }
                }
            }
            try await group.waitForAll()
        }
        await store.shutdown()
        await StoreContract.expect(.unavailable) { _ = try await store.loadKey(keyID: keys[0].keyID) }
    }

    @Test("SQLite: a key whose stored environment is neither development nor production is refused (store_unavailable), not defaulted")
    func sqliteUnknownEnvironment() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-environment-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("formattest.sqlite").path
        let store = try SQLiteAttestationStore(path: path)
        try await store.insertKey(StoreContract.key(1))
        #expect(try await store.loadKey(keyID: StoreContract.key(1).keyID)?.environment == .production)
        // What another writer (or an older or newer FormAttest) may have left: only the column changes.
        let raw = try DatabaseQueue(path: path)
        try await raw.write { db in try db.execute(sql: "UPDATE keys SET environment = 'staging'") }
        try raw.close()
        await StoreContract.expect(.unavailable) { _ = try await store.loadKey(keyID: StoreContract.key(1).keyID) }
        await StoreContract.expect(.unavailable) { _ = try await store.keys(username: "alice") }
    }

    /// One column of one stored key changed behind the store's back (another writer, a damaged
    /// file): each value of the wrong type or range is refused, by both ways a key is read.
    @Test(
        "SQLite: a key with one column of the wrong type or range is refused (store_unavailable), never clamped or repaired",
        arguments: [
            "UPDATE keys SET counter = 4294967296",
            "UPDATE keys SET counter = -1",
            "UPDATE keys SET counter = 'seven'",
            "UPDATE keys SET created_at = 'yesterday'",
            "UPDATE keys SET app_id = CAST(X'C328' AS TEXT)",
            "UPDATE keys SET public_key = 'not a blob'",
            "UPDATE keys SET validation_category = 4294967296",
            "UPDATE key_registrations SET receipt = 'not a blob'",
        ]
    )
    func sqliteCorruptColumn(update: String) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-corrupt-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("formattest.sqlite").path
        let store = try SQLiteAttestationStore(path: path)
        let key = StoreContract.key(1)
        try await store.insertKey(key)
        #expect(try await store.loadKey(keyID: key.keyID) == key)
        let raw = try DatabaseQueue(path: path)
        try await raw.write { db in try db.execute(sql: update) }
        try raw.close()
        await StoreContract.expect(.unavailable) { _ = try await store.loadKey(keyID: key.keyID) }
        await StoreContract.expect(.unavailable) { _ = try await store.keys(username: key.username) }
    }

    /// The statements each corruption runs (`?` is the record's id). SQLite's NOT NULL columns
    /// cannot lose a value; what can go missing is a key's registration row (its receipt).
    static let corruptions: [(StoreCorruption, String)] = [
        (StoreCorruption(.key, .wrongType, "counter"), "UPDATE keys SET counter = 'seven' WHERE key_id = ?"),
        (StoreCorruption(.key, .outOfRange, "counter"), "UPDATE keys SET counter = 4294967296 WHERE key_id = ?"),
        (StoreCorruption(.key, .outOfRange, "counter"), "UPDATE keys SET counter = -1 WHERE key_id = ?"),
        (StoreCorruption(.key, .outOfRange, "validation_category"), "UPDATE keys SET validation_category = 4294967296 WHERE key_id = ?"),
        (StoreCorruption(.key, .wrongType, "created_at"), "UPDATE keys SET created_at = 'yesterday' WHERE key_id = ?"),
        (StoreCorruption(.key, .missing, "key_registrations row"), "DELETE FROM key_registrations WHERE key_id = ?"),
        (StoreCorruption(.passkey, .wrongType, "backed_up"), "UPDATE passkeys SET backed_up = 'yes' WHERE credential_id = ?"),
        (StoreCorruption(.passkey, .outOfRange, "sign_count"), "UPDATE passkeys SET sign_count = 4294967296 WHERE credential_id = ?"),
        (StoreCorruption(.replayRecord, .wrongType, "expires_at"), "UPDATE form_hashes SET expires_at = 'soon' WHERE hash = ?"),
        (StoreCorruption(.replayRecord, .wrongType, "expires_at"), "UPDATE form_hashes SET expires_at = x'00' WHERE hash = ?"),
    ]

    @Test(
        "SQLite: a corrupt row (a wrong type, an out-of-range number, a missing row) is refused on every read (store_unavailable) and changes nothing",
        arguments: 0..<corruptions.count)
    func corruptRow(index: Int) async throws {
        let (corruption, statement) = Self.corruptions[index]
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-contract-corrupt-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("formattest.sqlite").path
        let store = try SQLiteAttestationStore(path: path)
        try await StoreContract.corruptData(corruption) {
            CorruptibleStore(store: store) { _, id in
                let raw = try DatabaseQueue(path: path)
                try await raw.write { db in
                    try db.execute(sql: statement, arguments: [Data(id)])
                    #expect(db.changesCount == 1)
                }
                try raw.close()
            }
        }
        await store.shutdown()
    }

    @Test("SQLite: a key's values at the edges of their range are read back as written (the largest counter, an integral time)")
    func sqliteColumnEdges() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-edges-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("formattest.sqlite").path
        let store = try SQLiteAttestationStore(path: path)
        var key = StoreContract.key(1)
        key.counter = .max
        key.createdAt = Date(timeIntervalSince1970: 1_700_000_000)
        key.lastSignals = KeySignals(validationCategory: .max, bundleVersion: "", cdHash: [0xAB], cdHashType: 0)
        try await store.insertKey(key)
        let raw = try DatabaseQueue(path: path)
        // Stored as an integer, as another writer may: still a time.
        try await raw.write { db in try db.execute(sql: "UPDATE keys SET last_used = 1700000001") }
        try raw.close()
        var expected = key
        expected.lastUsed = Date(timeIntervalSince1970: 1_700_000_001)
        #expect(try await store.loadKey(keyID: key.keyID) == expected)
        #expect(try await store.keys(username: key.username) == [expected])
    }

    @Test(
        "SQLite: a user with 1,200 keys (7 KB of registration each) is counted without reading them: the count agrees with the listing's, and takes a fraction of its time"
    )
    func countWithoutBlobs() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-count-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteAttestationStore(path: directory.appendingPathComponent("formattest.sqlite").path)
        let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        for index in 0..<1_200 {
            var keyID = [UInt8](repeating: 0, count: 32)
            keyID[30] = UInt8(index >> 8)
            keyID[31] = UInt8(index & 0xFF)
            try await store.insertKey(
                StoredKey(
                    keyID: keyID, username: "alice", publicKey: [0x04] + [UInt8](repeating: 1, count: 64), counter: 0,
                    appID: "ABCDE12345.com.example",
                    environment: .production, receipt: [UInt8](repeating: 0xAB, count: 3_500),
                    createdAt: now.addingTimeInterval(-Double(index) * 3_600),
                    lastUsed: now, revokedAt: index < 1_190 ? now : nil,
                    attestation: KeyAttestation(object: [UInt8](repeating: 0xCD, count: 3_500), clientDataHash: [UInt8](repeating: 2, count: 32))
                )
            )
        }
        let since = now.addingTimeInterval(-30 * 86_400)
        // Each the fastest of three runs: a run that the loaded machine preempted says nothing of the query.
        let clock = ContinuousClock()
        var listed = 0
        var counted = 0
        var listing = Duration.seconds(3600)
        var counting = Duration.seconds(3600)
        for _ in 0..<3 {
            listing = min(
                listing, try await clock.measure { listed = try await store.keys(username: "alice").filter { $0.createdAt >= since }.count })
            counting = min(counting, try await clock.measure { counted = try await store.countKeys(username: "alice", .createdSince(since)) })
        }
        #expect(counted == 721 && listed == counted)
        #expect(try await store.countKeys(username: "alice", .active) == 10)
        #expect(try await store.countKeys(username: "alice", .all) == 1_200)
        print("count of a user's recent registrations, 1,200 keys: listing them \(listing), counting \(counting)")
        #expect(counting < listing)
    }

    @Test("a database of the first schema (v1) is migrated on open and its keys read back, environment included")
    func migrationFromV1() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-v1-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent("formattest.sqlite").path
        // The file as the first release left it: the v1 tables, one key, and GRDB's record of v1.
        let old = try DatabaseQueue(path: path)
        try await old.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE keys (
                        key_id BLOB PRIMARY KEY NOT NULL, username TEXT NOT NULL, public_key BLOB NOT NULL,
                        counter INTEGER NOT NULL, app_id TEXT NOT NULL, environment TEXT NOT NULL,
                        receipt BLOB NOT NULL, created_at REAL NOT NULL, last_used REAL NOT NULL);
                    CREATE TABLE challenges (
                        value BLOB PRIMARY KEY NOT NULL, purpose TEXT NOT NULL, username TEXT,
                        issued_at REAL NOT NULL, expires_at REAL NOT NULL, used INTEGER NOT NULL DEFAULT 0);
                    CREATE INDEX challenges_expiry ON challenges(expires_at);
                    CREATE TABLE form_hashes (hash BLOB PRIMARY KEY NOT NULL, expires_at REAL NOT NULL);
                    CREATE INDEX form_hashes_expiry ON form_hashes(expires_at);
                    CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
                    INSERT INTO grdb_migrations VALUES ('v1');
                    """
            )
            try db.execute(
                sql: "INSERT INTO keys VALUES (?, 'alice', ?, 7, 'ABCDE12345.com.example', 'development', ?, 1000, 2000)",
                arguments: [Data(repeating: 1, count: 32), Data([0x04] + [UInt8](repeating: 1, count: 64)), Data([1, 2, 3])]
            )
            // A live replay record (until 2096) and an expired one (1970).
            try db.execute(
                sql: "INSERT INTO form_hashes VALUES (?, 4000000000), (?, 1000)",
                arguments: [Data(repeating: 5, count: 32), Data(repeating: 6, count: 32)])
        }
        try old.close()

        let store = try SQLiteAttestationStore(path: path)
        let key = try #require(try await store.loadKey(keyID: [UInt8](repeating: 1, count: 32)))
        #expect(key.environment == .development)
        #expect(key.counter == 7)
        #expect(key.createdAt == Date(timeIntervalSince1970: 1000))
        // The columns later migrations added read as their defaults.
        #expect(key.reattestationRequired == false)
        #expect(key.revokedAt == nil)
        #expect(key.lastSignals == nil)
        #expect(key.attestation == nil)
        #expect(key.counterFormHash == nil)
        #expect(key.receipt == [1, 2, 3])
        // And the migrated tables take writes (v3 added the rate-limit windows).
        #expect(try await store.advanceCounter(keyID: key.keyID, to: 8, lastUsed: Date(timeIntervalSince1970: 3000)))
        #expect(
            try await store.countRequest(
                in: RateLimitWindow(
                    id: [UInt8](repeating: 2, count: 32), start: Date(timeIntervalSince1970: 0), expiresAt: Date(timeIntervalSince1970: 60))) == 1)
        // v9 moved the replay records into one B-tree in hash order: the live one still refuses
        // its form, the expired one is taken over.
        let now = Date(timeIntervalSince1970: 3_000_000_000)
        await #expect(throws: StoreError(code: .replay, reason: "")) {
            try await store.recordFormHash(ReplayRecord(formHash: [UInt8](repeating: 5, count: 32), expiresAt: now.addingTimeInterval(60)), now: now)
        }
        try await store.recordFormHash(ReplayRecord(formHash: [UInt8](repeating: 6, count: 32), expiresAt: now.addingTimeInterval(60)), now: now)
        await store.shutdown()
        let schema = try await DatabaseQueue(path: path).read { db in
            try String.fetchOne(db, sql: "SELECT sql FROM sqlite_master WHERE name = 'form_hashes'")
        }
        #expect(schema?.hasSuffix("WITHOUT ROWID") == true, "\(schema ?? "no table")")
    }

    @Test(
        "a database of schema v5 (the blobs in the key's row) is migrated: receipt and attestation move beside the key, intact, and the row no longer carries them"
    )
    func migrationFromV5() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-v5-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent("formattest.sqlite").path
        let keyID = [UInt8](repeating: 9, count: 32)
        let receipt = [UInt8](repeating: 0xAB, count: 3000)
        let object = [UInt8](repeating: 0xCD, count: 5000)
        let hash = [UInt8](repeating: 0xEF, count: 32)
        // The file as v5 left it: the tables of v1 to v5 and GRDB's record of the five migrations.
        let old = try DatabaseQueue(path: path)
        try await old.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE keys (
                        key_id BLOB PRIMARY KEY NOT NULL, username TEXT NOT NULL, public_key BLOB NOT NULL,
                        counter INTEGER NOT NULL, app_id TEXT NOT NULL, environment TEXT NOT NULL,
                        receipt BLOB NOT NULL, created_at REAL NOT NULL, last_used REAL NOT NULL,
                        reattestation_required INTEGER NOT NULL DEFAULT 0, revoked_at REAL,
                        validation_category INTEGER, bundle_version TEXT, cd_hash BLOB, cd_hash_type INTEGER,
                        attestation_object BLOB, attestation_client_data_hash BLOB);
                    CREATE INDEX keys_username ON keys(username);
                    CREATE TABLE challenges (
                        value BLOB PRIMARY KEY NOT NULL, purpose TEXT NOT NULL, username TEXT,
                        issued_at REAL NOT NULL, expires_at REAL NOT NULL, used INTEGER NOT NULL DEFAULT 0);
                    CREATE INDEX challenges_expiry ON challenges(expires_at);
                    CREATE TABLE form_hashes (hash BLOB PRIMARY KEY NOT NULL, expires_at REAL NOT NULL);
                    CREATE INDEX form_hashes_expiry ON form_hashes(expires_at);
                    CREATE TABLE rate_limits (
                        id BLOB NOT NULL, window_start REAL NOT NULL, count INTEGER NOT NULL, expires_at REAL NOT NULL,
                        PRIMARY KEY (id, window_start));
                    CREATE INDEX rate_limits_expiry ON rate_limits(expires_at);
                    CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
                    INSERT INTO grdb_migrations VALUES ('v1'), ('v2: keys that must re-attest'),
                        ('v3: revoked keys, keys by user, rate limits'), ('v4: the last iOS 27 signals seen'),
                        ('v5: the attestation that registered each key');
                    """
            )
            try db.execute(
                sql: """
                    INSERT INTO keys (key_id, username, public_key, counter, app_id, environment, receipt, created_at, last_used,
                        attestation_object, attestation_client_data_hash)
                    VALUES (?, 'alice', ?, 7, 'ABCDE12345.com.example', 'production', ?, 1000, 2000, ?, ?)
                    """,
                arguments: [Data(keyID), Data([0x04] + [UInt8](repeating: 1, count: 64)), Data(receipt), Data(object), Data(hash)]
            )
        }
        try old.close()

        let store = try SQLiteAttestationStore(path: path)
        let key = try #require(try await store.loadKey(keyID: keyID))
        #expect(key.receipt == receipt)
        #expect(key.attestation == KeyAttestation(object: object, clientDataHash: hash))
        #expect(key.counter == 7)
        #expect(try await store.keys(username: "alice").map(\.receipt) == [receipt])
        #expect(try await store.advanceCounter(keyID: keyID, to: 8, lastUsed: Date(timeIntervalSince1970: 3000)))
        #expect(try await store.replaceReceipt(keyID: keyID, previous: receipt, with: [1, 2]))
        #expect(try await store.loadKey(keyID: keyID)?.receipt == [1, 2])
        await store.shutdown()
        // The key's row, which every assertion rewrites, is small now.
        let reopened = try DatabaseQueue(path: path)
        let columns = try await reopened.read { db in try Row.fetchAll(db, sql: "PRAGMA table_info(keys)").map { $0["name"] as String } }
        #expect(!columns.contains("receipt") && !columns.contains("attestation_object") && !columns.contains("attestation_client_data_hash"))
        try reopened.close()
    }
}
