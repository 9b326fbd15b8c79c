//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import Dispatch
public import FormAttestFlows
public import Foundation
import GRDB
public import Logging

/// The embedded default store (`StepwiseAttestationStore`, and so every narrower protocol): one SQLite file in WAL mode, created and migrated
/// on first use.
///
/// Each operation, and each commit as a whole, runs in its own SQLite savepoint, so a failure
/// rolls back everything it wrote and nothing else. Conditions are written into the statements
/// themselves (`UPDATE ... WHERE counter < ?`, `INSERT ... ON CONFLICT DO UPDATE ... WHERE
/// expires_at <= ?`), never read-then-write, and SQLite serializes writers, also across processes
/// sharing the file.
///
/// Writes are committed in groups (see `GroupCommit`): the writes that arrive while a commit is
/// being synced share the next transaction and its one fsync. A caller is answered only after
/// the COMMIT of its group returned (`synchronous = FULL`): what it was told is durable.
public final class SQLiteAttestationStore: StepwiseAttestationStore {
    /// The default location, relative to the working directory.
    public static let defaultPath = "./formattest-data/formattest.sqlite"

    private let database: DatabasePool
    /// The connections ``loadKey(keyID:)`` reads from, on the calling thread (``KeyReaders``):
    /// read-only WAL connections, which never wait for the writer.
    private let keyReaders: KeyReaders
    private let group: GroupCommit
    private let checkpointer: WALCheckpointer
    private let sweep = FormHashSweep()

    /// How many form hashes a purge step may examine for each record it may delete: the sweep
    /// reads runs of adjacent hashes (cheap: a few pages) and deletes the expired ones among them.
    static let sweepRowsPerDeletion = 4

    /// The writer's own automatic checkpoint, a bound on the write-ahead log (about 40 MB) for when
    /// ``WALCheckpointer``, which checkpoints off the commit path, falls behind.
    package static let walAutocheckpointPages = 10_000

    /// Opens (creating directories, file and tables as needed) the store at `path`.
    ///
    /// - Parameters:
    ///   - path: the database file.
    ///   - logger: receives the housekeeping's timings at debug level (the write-ahead log's
    ///     checkpoints, the requests' transactions that held the writer 50 ms or more); none by
    ///     default.
    /// - Throws: `StoreError.Code.unavailable` when the file cannot be opened or migrated.
    public convenience init(
        path: String = SQLiteAttestationStore.defaultPath,
        logger: Logger = Logger(label: "formattest.sqlite", factory: { _ in SwiftLogNoOpLogHandler() })
    ) throws(StoreError) {
        try self.init(path: path, logger: logger, busyTimeout: Self.busyTimeout)
    }

    /// How long a write waits for another connection's write lock before it fails
    /// (``StoreError/Code/unavailable``).
    package static let busyTimeout: TimeInterval = 5

    /// Opens the store with its own busy timeout: for tests that hold the write lock on purpose
    /// while they look at the writes queued behind it, and must not race the timeout under load.
    package init(path: String, logger: Logger, busyTimeout: TimeInterval) throws(StoreError) {
        do {
            let url = URL(fileURLWithPath: path)
            // Owner-only: the directories it creates 0700, the database 0600 (SQLite gives its
            // -wal and -shm files the database file's mode). Existing ones are left as they are.
            try FileManager.default.createDirectory(
                at: url.deletingLastPathComponent(),
                withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700]
            )
            if !FileManager.default.fileExists(atPath: path) {
                _ = FileManager.default.createFile(atPath: path, contents: nil, attributes: [.posixPermissions: 0o600])
            }
            var configuration = Configuration()
            configuration.busyMode = .timeout(busyTimeout)
            self.database = try DatabasePool(path: path, configuration: configuration)
            // GRDB sets WAL connections to synchronous = NORMAL, which survives a process crash but
            // may lose the last commits on an OS crash or power loss. A lost replay record would
            // let an accepted form be accepted again, so the writer syncs every commit (FULL).
            try self.database.barrierWriteWithoutTransaction { db in
                try db.execute(sql: "PRAGMA synchronous = FULL")
                try db.execute(sql: "PRAGMA wal_autocheckpoint = \(Self.walAutocheckpointPages)")
                // Write once, rolled back (the header's user_version, rewritten unchanged): a file
                // this process cannot write (a read-only file or filesystem, which SQLite may still
                // open, and even lock, for reading) fails here, at open, not at the first request.
                try db.inTransaction(.immediate) {
                    let version = try Int.fetchOne(db, sql: "PRAGMA user_version") ?? 0
                    try db.execute(sql: "PRAGMA user_version = \(version)")
                    return .rollback
                }
            }
            try Self.migrator.migrate(self.database)
            self.keyReaders = try KeyReaders(path: path)
            self.group = GroupCommit(database: self.database, logger: logger)
            self.checkpointer = WALCheckpointer(path: path, group: self.group, logger: logger)
        } catch {
            throw Self.storeError(error)
        }
    }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE keys (
                        key_id BLOB PRIMARY KEY NOT NULL,
                        username TEXT NOT NULL,
                        public_key BLOB NOT NULL,
                        counter INTEGER NOT NULL,
                        app_id TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        receipt BLOB NOT NULL,
                        created_at REAL NOT NULL,
                        last_used REAL NOT NULL
                    );
                    CREATE TABLE challenges (
                        value BLOB PRIMARY KEY NOT NULL,
                        purpose TEXT NOT NULL,
                        username TEXT,
                        issued_at REAL NOT NULL,
                        expires_at REAL NOT NULL,
                        used INTEGER NOT NULL DEFAULT 0
                    );
                    CREATE INDEX challenges_expiry ON challenges(expires_at);
                    CREATE TABLE form_hashes (
                        hash BLOB PRIMARY KEY NOT NULL,
                        expires_at REAL NOT NULL
                    );
                    CREATE INDEX form_hashes_expiry ON form_hashes(expires_at);
                    """
            )
        }
        migrator.registerMigration("v2: keys that must re-attest") { db in
            try db.execute(sql: "ALTER TABLE keys ADD COLUMN reattestation_required INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration("v3: revoked keys, keys by user, rate limits") { db in
            try db.execute(
                sql: """
                    ALTER TABLE keys ADD COLUMN revoked_at REAL;
                    CREATE INDEX keys_username ON keys(username);
                    CREATE TABLE rate_limits (
                        id BLOB NOT NULL,
                        window_start REAL NOT NULL,
                        count INTEGER NOT NULL,
                        expires_at REAL NOT NULL,
                        PRIMARY KEY (id, window_start)
                    );
                    CREATE INDEX rate_limits_expiry ON rate_limits(expires_at);
                    """
            )
        }
        migrator.registerMigration("v4: the last iOS 27 signals seen") { db in
            // One nullable column per signal (NULL: not seen), so that an operator can query them.
            try db.execute(
                sql: """
                    ALTER TABLE keys ADD COLUMN validation_category INTEGER;
                    ALTER TABLE keys ADD COLUMN bundle_version TEXT;
                    ALTER TABLE keys ADD COLUMN cd_hash BLOB;
                    ALTER TABLE keys ADD COLUMN cd_hash_type INTEGER;
                    """
            )
        }
        migrator.registerMigration("v5: the attestation that registered each key") { db in
            // NULL for keys registered before: no evidence record can carry their attestation.
            try db.execute(
                sql: """
                    ALTER TABLE keys ADD COLUMN attestation_object BLOB;
                    ALTER TABLE keys ADD COLUMN attestation_client_data_hash BLOB;
                    """
            )
        }
        migrator.registerMigration("v6: the registration's blobs beside the key, not in its row") { db in
            // Every assertion updates its key's counter, and SQLite rewrites a row whole: with the
            // receipt and the attestation object (about 7 KB, in overflow pages) in it, each commit
            // wrote those pages to the WAL again and every reader re-read them. They are written
            // once, at registration (and when a receipt is refreshed), so they live apart.
            try db.execute(
                sql: """
                    CREATE TABLE key_registrations (
                        key_id BLOB PRIMARY KEY NOT NULL,
                        receipt BLOB NOT NULL,
                        attestation_object BLOB,
                        attestation_client_data_hash BLOB
                    );
                    INSERT INTO key_registrations (key_id, receipt, attestation_object, attestation_client_data_hash)
                        SELECT key_id, receipt, attestation_object, attestation_client_data_hash FROM keys;
                    ALTER TABLE keys DROP COLUMN receipt;
                    ALTER TABLE keys DROP COLUMN attestation_object;
                    ALTER TABLE keys DROP COLUMN attestation_client_data_hash;
                    """
            )
        }
        migrator.registerMigration("v7: the form that set each key's counter") { db in
            // NULL for keys stored before: no clone can be proven against their current counter.
            try db.execute(sql: "ALTER TABLE keys ADD COLUMN counter_form_hash BLOB")
        }
        migrator.registerMigration("v8: passkeys") { db in
            // A database of v7 or before has no passkey: the tables start empty, and every key,
            // challenge and form hash is left as it is. The registration's blobs live apart, as
            // the keys' do (v6): each accepted assertion rewrites the passkey's row.
            try db.execute(
                sql: """
                    CREATE TABLE passkeys (
                        credential_id BLOB PRIMARY KEY NOT NULL,
                        username TEXT NOT NULL,
                        user_handle BLOB NOT NULL,
                        public_key BLOB NOT NULL,
                        sign_count INTEGER NOT NULL,
                        backup_eligible INTEGER NOT NULL,
                        backed_up INTEGER NOT NULL,
                        aaguid BLOB NOT NULL,
                        transports BLOB NOT NULL,
                        format TEXT NOT NULL,
                        created_at REAL NOT NULL,
                        last_used REAL NOT NULL,
                        revoked_at REAL
                    );
                    CREATE INDEX passkeys_username ON passkeys(username);
                    CREATE TABLE passkey_registrations (
                        credential_id BLOB PRIMARY KEY NOT NULL,
                        attestation_object BLOB NOT NULL,
                        client_data_json BLOB NOT NULL
                    );
                    """
            )
        }
        migrator.registerMigration("v9: form hashes in one B-tree in hash order, swept by the purge") { db in
            // Deleting expired records oldest first through the expiry index rewrote about one page
            // of the hash index (random hashes) for every record: a million records wrote gigabytes
            // to the WAL (docs/performance.md, "Sustained operation"). In one B-tree in hash order
            // the purge sweeps runs of adjacent hashes instead, and the expiry index goes: no
            // query reads by expiry any more. Copied in hash order (appends, not random inserts).
            try db.execute(
                sql: """
                    CREATE TABLE form_hashes_by_hash (hash BLOB PRIMARY KEY NOT NULL, expires_at REAL NOT NULL) WITHOUT ROWID;
                    INSERT INTO form_hashes_by_hash (hash, expires_at) SELECT hash, expires_at FROM form_hashes ORDER BY hash;
                    DROP TABLE form_hashes;
                    ALTER TABLE form_hashes_by_hash RENAME TO form_hashes;
                    """
            )
        }
        migrator.registerMigration("v10: revoked keys and passkeys by revocation time, for their retention") { db in
            // Partial: only revoked rows are in them (active ones never are, and cost nothing). The
            // purge's `revoked_at <= ?` implies `revoked_at IS NOT NULL`, so SQLite uses them.
            try db.execute(
                sql: """
                    CREATE INDEX keys_revoked ON keys(revoked_at, key_id) WHERE revoked_at IS NOT NULL;
                    CREATE INDEX passkeys_revoked ON passkeys(revoked_at, credential_id) WHERE revoked_at IS NOT NULL;
                    """
            )
        }
        return migrator
    }

    // MARK: - The store protocols

    public func insertKey(_ key: StoredKey) async throws(StoreError) {
        try await self.write { db in try Self.insert(key, db) }
    }

    /// ``loadKey(keyID:)``'s statement (made once: it is the key of GRDB's statement cache).
    private static let selectKeyByID = "\(KeyRows.select) WHERE keys.key_id = ?"

    public func loadKey(keyID: [UInt8]) async throws(StoreError) -> StoredKey? {
        try self.loadKeyOnThisThread(keyID: keyID)
    }

    /// On the calling thread (GRDB's synchronous read) from ``keyReaders``: one indexed row from a WAL reader, which
    /// never waits for the writer, is CPU work like the signature check that follows it. GRDB's
    /// async read hops to a Dispatch queue and back: two thread wake-ups per request on the
    /// service's hot path. One SELECT is its own read transaction in SQLite (it sees one snapshot),
    /// so GRDB's `unsafeRead` skips the BEGIN and COMMIT its `read` wraps around it.
    private func loadKeyOnThisThread(keyID: [UInt8]) throws(StoreError) -> StoredKey? {
        do {
            // key_id is the primary key: one row at most.
            return try self.keyReaders.read { db in try KeyRows.fetch(db.cachedStatement(sql: Self.selectKeyByID), Data(keyID)).first }
        } catch {
            throw Self.storeError(error)
        }
    }

    public func advanceCounter(keyID: [UInt8], to counter: UInt32, lastUsed: Date) async throws(StoreError) -> Bool {
        try await self.write { db in
            do {
                try Self.advance(keyID: keyID, to: counter, at: lastUsed, formHash: nil, db)
                return true
            } catch let error as StoreError where error.code == .staleCounter {
                return false
            }
        }
    }

    public func requireReattestation(keyID: [UInt8]) async throws(StoreError) {
        try await self.write { db in
            try db.execute(sql: "UPDATE keys SET reattestation_required = 1 WHERE key_id = ?", arguments: [Data(keyID)])
            guard db.changesCount == 1 else { throw StoreError(code: .unknownKey, reason: "no such keyId") }
        }
    }

    public func keys(username: String) async throws(StoreError) -> [StoredKey] {
        do {
            return try await self.database.read { db in
                try KeyRows.fetch(db.makeStatement(sql: "\(KeyRows.select) WHERE keys.username = ? ORDER BY keys.created_at, keys.key_id"), username)
            }
        } catch {
            throw Self.storeError(error)
        }
    }

    public func countKeys(username: String, _ filter: KeyCountFilter) async throws(StoreError) -> Int {
        // The keys table alone, by its username index: no registration blob is read.
        let condition: String
        var arguments: StatementArguments = [username]
        switch filter {
        case .all: condition = ""
        case .active: condition = " AND revoked_at IS NULL AND reattestation_required = 0"
        case .createdSince(let date):
            condition = " AND created_at >= ?"
            arguments += [date.timeIntervalSince1970]
        }
        do {
            let bound = arguments
            return try await self.database.read { db in
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM keys WHERE username = ?" + condition, arguments: bound) ?? 0
            }
        } catch {
            throw Self.storeError(error)
        }
    }

    public func keys(username: String, after position: KeyPosition?, limit: Int) async throws(StoreError) -> [StoredKey] {
        let limit = max(limit, 0)
        do {
            return try await self.database.read { db in
                guard let position else {
                    return try KeyRows.fetch(
                        db.makeStatement(sql: "\(KeyRows.select) WHERE keys.username = ? ORDER BY keys.created_at, keys.key_id LIMIT \(limit)"),
                        username)
                }
                let statement = try db.makeStatement(
                    sql: """
                        \(KeyRows.select) WHERE keys.username = ?
                            AND (keys.created_at > ? OR (keys.created_at = ? AND keys.key_id > ?))
                        ORDER BY keys.created_at, keys.key_id LIMIT \(limit)
                        """
                )
                return try KeyRows.fetch(
                    statement,
                    arguments: [username, position.createdAt.timeIntervalSince1970, position.createdAt.timeIntervalSince1970, Data(position.keyID)]
                )
            }
        } catch {
            throw Self.storeError(error)
        }
    }

    public func revokeKey(keyID: [UInt8], at date: Date) async throws(StoreError) {
        try await self.write { db in
            try db.execute(
                sql: "UPDATE keys SET revoked_at = coalesce(revoked_at, ?) WHERE key_id = ?", arguments: [date.timeIntervalSince1970, Data(keyID)])
            guard db.changesCount == 1 else { throw StoreError(code: .unknownKey, reason: "no such keyId") }
        }
    }

    public func countRequest(in window: RateLimitWindow) async throws(StoreError) -> Int {
        try await self.write { db in try Self.count(window, db) }
    }

    public func refundRequest(in window: RateLimitWindow) async throws(StoreError) {
        try await self.write { db in
            try db.cachedStatement(sql: "UPDATE rate_limits SET count = count - 1 WHERE id = ? AND window_start = ? AND count > 0")
                .execute(arguments: [Data(window.id), window.start.timeIntervalSince1970])
        }
    }

    public func replaceReceipt(keyID: [UInt8], previous: [UInt8], with receipt: [UInt8]) async throws(StoreError) -> Bool {
        try await self.write { db in
            try db.execute(
                sql: "UPDATE key_registrations SET receipt = ? WHERE key_id = ? AND receipt = ?",
                arguments: [Data(receipt), Data(keyID), Data(previous)]
            )
            if db.changesCount == 1 { return true }
            guard try Bool.fetchOne(db, sql: "SELECT 1 FROM keys WHERE key_id = ?", arguments: [Data(keyID)]) != nil else {
                throw StoreError(code: .unknownKey, reason: "no such keyId")
            }
            return false
        }
    }

    public func issueChallenge(_ challenge: IssuedChallenge) async throws(StoreError) {
        try await self.write { db in try Self.issue(challenge, db) }
    }

    public func consumeChallenge(_ claim: ChallengeClaim, now: Date) async throws(StoreError) {
        try await self.write { db in try Self.consume(claim, now: now, db) }
    }

    public func recordFormHash(_ record: ReplayRecord, now: Date) async throws(StoreError) {
        try await self.write { db in try Self.record(record, now: now, db) }
    }

    public func isFormHashRecorded(_ formHash: [UInt8], now: Date) async throws(StoreError) -> Bool {
        do {
            // Read by hash alone and the expiry compared here: an expiry that is not a number (a
            // corrupt or foreign row) fails closed, where `expires_at > ?` would compare it by
            // SQLite's type order.
            return try await self.database.read { db in
                guard
                    let row = try Row.fetchOne(
                        db.cachedStatement(sql: "SELECT expires_at FROM form_hashes WHERE hash = ?"), arguments: [Data(formHash)])
                else { return false }
                let expiresAt: Double
                switch (row[0] as DatabaseValue).storage {
                case .double(let seconds): expiresAt = seconds
                case .int64(let seconds): expiresAt = Double(seconds)
                default: throw StoreError(code: .unavailable, reason: "SQLite: a stored replay record's form_hashes.expires_at is not a number")
                }
                return expiresAt > now.timeIntervalSince1970
            }
        } catch {
            throw Self.storeError(error)
        }
    }

    public func commitRegistration(_ commit: RegistrationCommit) async throws(StoreError) {
        try await self.write { db in
            for claim in commit.challenges { try Self.consume(claim, now: commit.now, db) }
            try Self.record(commit.replay, now: commit.now, db)
            try Self.insert(commit.key, db)
            if let limit = commit.maximumActiveKeys {
                // The new key stays; of the others, the most recently used stay up to the limit.
                try db.execute(
                    sql: """
                        UPDATE keys SET revoked_at = ? WHERE key_id IN (
                            SELECT key_id FROM keys WHERE username = ? AND revoked_at IS NULL AND key_id != ?
                            ORDER BY last_used DESC, created_at DESC, key_id DESC LIMIT -1 OFFSET ?)
                        """,
                    arguments: [commit.now.timeIntervalSince1970, commit.key.username, Data(commit.key.keyID), max(limit - 1, 0)]
                )
            }
        }
    }

    public func commitAssertion(_ commit: AssertionCommit) async throws(StoreError) {
        try await self.write { db in
            guard commit.keyID != nil || commit.passkey != nil else {
                throw StoreError(code: .unknownKey, reason: "the commit names neither a key nor a passkey")
            }
            for claim in commit.challenges { try Self.consume(claim, now: commit.now, db) }
            try Self.record(commit.replay, now: commit.now, db)
            if let keyID = commit.keyID {
                try Self.advance(
                    keyID: keyID, to: commit.counter, at: commit.now, formHash: commit.replay.formHash, signals: commit.signals, activeOnly: true, db)
            }
            if let use = commit.passkey { try Self.use(use, at: commit.now, db) }
        }
    }

    // MARK: - Passkeys

    public func loadPasskey(credentialID: [UInt8]) async throws(StoreError) -> StoredPasskey? {
        try await self.readPasskeys(sql: "\(PasskeyRows.select) WHERE passkeys.credential_id = ?", arguments: [Data(credentialID)]).first
    }

    public func passkeys(username: String) async throws(StoreError) -> [StoredPasskey] {
        try await self.readPasskeys(
            sql: "\(PasskeyRows.select) WHERE passkeys.username = ? ORDER BY passkeys.created_at, passkeys.credential_id", arguments: [username])
    }

    public func passkeys(username: String, after position: KeyPosition?, limit: Int) async throws(StoreError) -> [StoredPasskey] {
        let limit = max(limit, 0)
        guard let position else {
            return try await self.readPasskeys(
                sql: "\(PasskeyRows.select) WHERE passkeys.username = ? ORDER BY passkeys.created_at, passkeys.credential_id LIMIT \(limit)",
                arguments: [username])
        }
        return try await self.readPasskeys(
            sql: """
                \(PasskeyRows.select) WHERE passkeys.username = ?
                    AND (passkeys.created_at > ? OR (passkeys.created_at = ? AND passkeys.credential_id > ?))
                ORDER BY passkeys.created_at, passkeys.credential_id LIMIT \(limit)
                """,
            arguments: [username, position.createdAt.timeIntervalSince1970, position.createdAt.timeIntervalSince1970, Data(position.keyID)]
        )
    }

    public func passkeyCredentials(username: String) async throws(StoreError) -> PasskeyCredentials {
        // The passkeys table alone, by its username index: no registration blob is read.
        do {
            return try await self.database.read { db in
                let handle = try Row.fetchOne(
                    db, sql: "SELECT user_handle FROM passkeys WHERE username = ? ORDER BY created_at, credential_id LIMIT 1", arguments: [username])
                let active = try Row.fetchAll(
                    db,
                    sql: "SELECT credential_id FROM passkeys WHERE username = ? AND revoked_at IS NULL ORDER BY created_at, credential_id LIMIT ?",
                    arguments: [username, PasskeyCredentials.maximumActive])
                func bytes(_ row: Row, _ column: String) throws -> [UInt8] {
                    guard let data = row[column] as Data?, !data.isEmpty else {
                        throw StoreError(code: .unavailable, reason: "a stored passkey's \(column) is missing or not a blob")
                    }
                    return Array(data)
                }
                return PasskeyCredentials(
                    userHandle: try handle.map { try bytes($0, "user_handle") },
                    activeCredentialIDs: try active.map { try bytes($0, "credential_id") })
            }
        } catch {
            throw Self.storeError(error)
        }
    }

    public func countPasskeys(username: String, _ filter: KeyCountFilter) async throws(StoreError) -> Int {
        // The passkeys table alone, by its username index: no registration blob is read.
        let condition: String
        var arguments: StatementArguments = [username]
        switch filter {
        case .all: condition = ""
        case .active: condition = " AND revoked_at IS NULL"
        case .createdSince(let date):
            condition = " AND created_at >= ?"
            arguments += [date.timeIntervalSince1970]
        }
        do {
            let bound = arguments
            return try await self.database.read { db in
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM passkeys WHERE username = ?" + condition, arguments: bound) ?? 0
            }
        } catch {
            throw Self.storeError(error)
        }
    }

    public func revokePasskey(credentialID: [UInt8], at date: Date) async throws(StoreError) {
        try await self.write { db in
            try db.execute(
                sql: "UPDATE passkeys SET revoked_at = coalesce(revoked_at, ?) WHERE credential_id = ?",
                arguments: [date.timeIntervalSince1970, Data(credentialID)])
            guard db.changesCount == 1 else { throw StoreError(code: .unknownKey, reason: "no such passkey") }
        }
    }

    public func commitPasskeyRegistration(_ commit: PasskeyRegistrationCommit) async throws(StoreError) {
        try await self.write { db in
            for claim in commit.challenges { try Self.consume(claim, now: commit.now, db) }
            // In the transaction that inserts it: a first passkey raced by another is refused.
            if commit.firstPasskey,
                try Row.fetchOne(
                    db, sql: "SELECT 1 FROM passkeys WHERE username = ? AND (revoked_at IS NULL OR user_handle != ?) LIMIT 1",
                    arguments: [commit.passkey.username, Data(commit.passkey.userHandle)]) != nil
            {
                throw StoreError(code: .passkeyExists, reason: "the user has a passkey registered since this one was checked")
            }
            try Self.insert(commit.passkey, db)
            if let limit = commit.maximumActiveCredentials {
                // The new passkey stays; of the others, the most recently used stay up to the limit.
                try db.execute(
                    sql: """
                        UPDATE passkeys SET revoked_at = ? WHERE credential_id IN (
                            SELECT credential_id FROM passkeys WHERE username = ? AND revoked_at IS NULL AND credential_id != ?
                            ORDER BY last_used DESC, created_at DESC, credential_id DESC LIMIT -1 OFFSET ?)
                        """,
                    arguments: [commit.now.timeIntervalSince1970, commit.passkey.username, Data(commit.passkey.credentialID), max(limit - 1, 0)]
                )
            }
        }
    }

    private func readPasskeys(sql: String, arguments: StatementArguments) async throws(StoreError) -> [StoredPasskey] {
        do {
            return try await self.database.read { db in try PasskeyRows.fetch(db, sql: sql, arguments: arguments) }
        } catch {
            throw Self.storeError(error)
        }
    }

    private static func insert(_ passkey: StoredPasskey, _ db: Database) throws {
        do {
            try db.execute(
                sql: """
                    INSERT INTO passkeys (credential_id, username, user_handle, public_key, sign_count, backup_eligible, backed_up,
                        aaguid, transports, format, created_at, last_used, revoked_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    Data(passkey.credentialID), passkey.username, Data(passkey.userHandle), Data(passkey.publicKey), Int64(passkey.signCount),
                    passkey.backupEligible, passkey.backedUp, Data(passkey.aaguid), Data(StoredPasskey.encodeTransports(passkey.transports)),
                    passkey.format, passkey.createdAt.timeIntervalSince1970, passkey.lastUsed.timeIntervalSince1970,
                    passkey.revokedAt?.timeIntervalSince1970,
                ]
            )
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError(code: .duplicateKey, reason: "the credential id is registered")
        }
        if let registration = passkey.registration {
            try db.execute(
                sql: "INSERT INTO passkey_registrations (credential_id, attestation_object, client_data_json) VALUES (?, ?, ?)",
                arguments: [Data(passkey.credentialID), Data(registration.attestationObject), Data(registration.clientDataJSON)]
            )
        }
    }

    /// The passkey's compare-and-set: its sign count moves only from the count the assertion was
    /// verified against.
    private static func use(_ use: PasskeyUse, at date: Date, _ db: Database) throws {
        try db.cachedStatement(
            sql: "UPDATE passkeys SET sign_count = ?, backed_up = ?, last_used = ? WHERE credential_id = ? AND sign_count = ? AND revoked_at IS NULL"
        ).execute(
            arguments: [Int64(use.signCount), use.backedUp, date.timeIntervalSince1970, Data(use.credentialID), Int64(use.previousSignCount)]
        )
        guard db.changesCount == 1 else {
            // Which condition failed: the row, its revocation (since the flows loaded it), its count.
            let revoked = try Row.fetchOne(
                db, sql: "SELECT revoked_at IS NOT NULL AS revoked FROM passkeys WHERE credential_id = ?", arguments: [Data(use.credentialID)])
            guard let revoked else { throw StoreError(code: .unknownKey, reason: "no such passkey") }
            throw (revoked["revoked"] as Bool? ?? false)
                ? StoreError(code: .revoked, reason: "the passkey was revoked")
                : StoreError(code: .staleCounter, reason: "the passkey's sign count is no longer \(use.previousSignCount)")
        }
    }

    public func shutdown() async {
        // Writes first: the queued ones commit, later ones are refused; then the connections
        // close (GRDB waits for running reads), after which every read throws.
        await self.group.close()
        // GRDB's close blocks until the running reads released their connections, and a read
        // resumes on the concurrency pool: block a Dispatch thread, never one of the pool's.
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                do {
                    try self.keyReaders.close()
                    try self.database.close()
                } catch {
                    // Not closed (GRDB leaves it fully open): reads still work until the store is
                    // freed; writes are refused by the closed group commit either way.
                }
                continuation.resume()
            }
        }
    }

    /// How many writes were submitted, and in how many groups they ran.
    package func groupCommitStatistics() async -> GroupCommit.Statistics {
        await self.group.statistics
    }

    /// The writer's `PRAGMA synchronous` level (2 is FULL).
    package func synchronousLevel() async throws -> Int {
        try await self.database.write { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
    }

    public func purgeExpired(now: Date, limit: Int) async throws(StoreError) -> PurgeStep {
        // A transaction of its own, between the requests' groups (their commits never carry its
        // pages), timed from BEGIN to the end of COMMIT: what a request queued behind it waits
        // for. Challenges and rate-limit windows go oldest expiry first through their expiry
        // indexes; form hashes are swept in hash order (``FormHashSweep``).
        //
        // The form hashes' window is found before, on a read connection (``sweepWindow``), outside
        // the writer's queue: the pages it reads (4 hashes for each one the step may delete) are
        // read while the requests' groups commit, not while they wait, and are in the cache when
        // the step's DELETE rewrites them.
        let limit = max(limit, 1)
        let start = self.sweep.start(for: now)
        let seconds = now.timeIntervalSince1970
        let outcome: (value: any Sendable, phases: PurgeStep.Phases)
        do {
            var window: SweepWindow?
            if let start {
                window = try await self.database.read { db in try Self.sweepWindow(after: start, now: seconds, allowance: limit, db) }
            }
            let read = window
            outcome = try await self.group.submitAlone { db in try Self.purgeStep(now: seconds, limit: limit, sweepFrom: start, window: read, db) }
        } catch {
            throw Self.storeError(error)
        }
        guard let step = outcome.value as? PurgeStepOutcome else {
            throw StoreError(code: .unavailable, reason: "SQLite: a purge step returned \(type(of: outcome.value))")
        }
        // Only a committed step moves the sweep on.
        if step.sweepExamined { self.sweep.advance(to: step.sweepCursor, for: now) }
        let phases = outcome.phases
        return PurgeStep(
            deleted: step.deleted, duration: phases.lockWait + phases.statements + phases.commit, complete: step.complete, phases: phases)
    }

    public func purgeRevoked(before cutoff: Date, limit: Int) async throws(StoreError) -> PurgeStep {
        // A transaction of its own between the requests' groups, as ``purgeExpired(now:limit:)``'s
        // steps: the oldest revocations first through the partial indexes on revoked_at (v10),
        // each row's registration blobs with it.
        let limit = max(limit, 1)
        let seconds = cutoff.timeIntervalSince1970
        let outcome: (value: any Sendable, phases: PurgeStep.Phases)
        do {
            // Most passes find nothing to delete: a read connection says so (one index probe a
            // table), and the writer is not taken at all (no transaction, no sync).
            let due = try await self.database.read { db in
                try ["keys", "passkeys"].contains { table in
                    try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM \(table) WHERE revoked_at <= ?)"), arguments: [seconds])
                        ?? false
                }
            }
            guard due else { return PurgeStep(deleted: 0, duration: .zero, complete: true) }
            outcome = try await self.group.submitAlone { db in try Self.purgeRevokedStep(before: seconds, limit: limit, db) }
        } catch {
            throw Self.storeError(error)
        }
        guard let deleted = outcome.value as? Int else {
            throw StoreError(code: .unavailable, reason: "SQLite: a purge step returned \(type(of: outcome.value))")
        }
        let phases = outcome.phases
        return PurgeStep(
            deleted: deleted, duration: phases.lockWait + phases.statements + phases.commit, complete: deleted < limit, phases: phases)
    }

    /// The retention's read of one table: the ids of the oldest revocations at or before a cutoff,
    /// up to a limit, through the table's partial index on revoked_at (tests check the plan).
    package static func revokedSelect(_ table: String, _ id: String) -> String {
        "SELECT \(id) FROM \(table) WHERE revoked_at <= ? ORDER BY revoked_at, \(id) LIMIT ?"
    }

    /// Deletes up to `limit` keys, then passkeys, revoked at or before `cutoff` (seconds since
    /// 1970), oldest revocation first, with their registrations; how many were deleted.
    private static func purgeRevokedStep(before cutoff: Double, limit: Int, _ db: Database) throws -> Int {
        var deleted = 0
        for (table, id, registrations) in [("keys", "key_id", "key_registrations"), ("passkeys", "credential_id", "passkey_registrations")] {
            let allowance = limit - deleted
            guard allowance > 0 else { break }
            let ids = try Data.fetchAll(db.cachedStatement(sql: Self.revokedSelect(table, id)), arguments: [cutoff, allowance])
            guard !ids.isEmpty else { continue }
            let placeholders = Array(repeating: "?", count: ids.count).joined(separator: ", ")
            let arguments = StatementArguments(ids)
            try db.execute(sql: "DELETE FROM \(registrations) WHERE \(id) IN (\(placeholders))", arguments: arguments)
            // The revocation is checked again: nothing but a revoked row is ever deleted.
            try db.execute(sql: "DELETE FROM \(table) WHERE \(id) IN (\(placeholders)) AND revoked_at <= ?", arguments: arguments + [cutoff])
            deleted += db.changesCount
        }
        return deleted
    }

    /// The next window of the form hashes' sweep after `cursor`, for a step that may delete
    /// `allowance` records: the window's last hash (`nil`: it runs to the end of the table), and
    /// the last of the first `allowance` expired hashes in it with how many those are.
    struct SweepWindow: Sendable {
        var allowance: Int
        var upper: Data?
        var lastExpired: Data?
        var expired: Int
    }

    /// Reads the window (see ``SweepWindow``): inside the step's transaction, or before it on a
    /// read connection. Read before, it can only be stale by records written since, which are
    /// live (a request's form hash expires after the pass's `now`) or were made live again; the
    /// step's DELETE checks the expiry of each row it deletes, so a stale window deletes nothing live
    /// and leaves no record behind that was expired when it was read.
    static func sweepWindow(after cursor: Data, now: Double, allowance: Int, _ db: Database) throws -> SweepWindow {
        // The window: the next `scan` hashes after the cursor (`upper`, its last, is nil when
        // fewer are left: the window runs to the end of the table).
        let scan = allowance * Self.sweepRowsPerDeletion
        // After the cursor; at the start, from the first hash. (An empty Data may be bound as
        // NULL, which compares with nothing: the start is written as the empty blob literal.)
        let after = cursor.isEmpty ? "hash >= x''" : "hash > ?"
        let afterArguments: StatementArguments = cursor.isEmpty ? [] : [cursor]
        let upper = try Data.fetchOne(
            db.cachedStatement(sql: "SELECT hash FROM form_hashes WHERE \(after) ORDER BY hash LIMIT 1 OFFSET ?"),
            arguments: afterArguments + [scan - 1]
        )
        // The last of the first `allowance` expired hashes in the window; everything expired up
        // to it is deleted (exactly those), the sweep goes on after it.
        let window = upper == nil ? after : "\(after) AND hash <= ?"
        let bounds: StatementArguments = upper.map { afterArguments + [$0] } ?? afterArguments
        let row = try Row.fetchOne(
            db.cachedStatement(
                sql: "SELECT max(hash), count(*) FROM (SELECT hash FROM form_hashes WHERE \(window) AND expires_at <= ? ORDER BY hash LIMIT ?)"
            ),
            arguments: bounds + [now, allowance]
        )
        let lastExpired: Data? = row?[0]
        let expired: Int = row?[1] ?? 0
        return SweepWindow(allowance: allowance, upper: upper, lastExpired: lastExpired, expired: expired)
    }

    /// Tests only: the write-ahead log's catch-up checkpoint, as ``WALCheckpointer`` asks the
    /// writer for it (``GroupCommit/checkpointIfIdle(force:_:)``); whether it ran.
    package func catchUpCheckpoint(force: Bool) async -> Bool {
        await self.group.checkpointIfIdle(force: force) { db in try WALCheckpointer.Round.run(db) } != nil
    }

    /// What one purge step's transaction did.
    private struct PurgeStepOutcome: Sendable {
        var deleted = 0
        var complete = true
        /// Whether the step took part in the form hashes' sweep, and where it left it (`nil`: at
        /// the end of the table).
        var sweepExamined = false
        var sweepCursor: Data?
    }

    /// - Parameters:
    ///   - cursor: where the form hashes' sweep goes on (`nil`: it is over for this pass).
    ///   - window: the sweep's window after `cursor`, read before the transaction for an allowance
    ///     of `limit`; read again here when the step's allowance is smaller (challenges took some).
    private static func purgeStep(now: Double, limit: Int, sweepFrom cursor: Data?, window: SweepWindow?, _ db: Database) throws -> PurgeStepOutcome {
        var outcome = PurgeStepOutcome()
        /// Oldest expiry first through the table's expiry index.
        func byExpiry(_ table: String) throws {
            let allowance = limit - outcome.deleted
            guard allowance > 0 else {
                outcome.complete = false
                return
            }
            try db.cachedStatement(
                sql: "DELETE FROM \(table) WHERE rowid IN (SELECT rowid FROM \(table) WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)"
            ).execute(arguments: [now, allowance])
            outcome.deleted += db.changesCount
            if db.changesCount == allowance { outcome.complete = false }
        }
        try byExpiry("challenges")
        let allowance = limit - outcome.deleted
        if let cursor, allowance > 0 {
            let window =
                try window.flatMap { $0.allowance == allowance ? $0 : nil } ?? Self.sweepWindow(after: cursor, now: now, allowance: allowance, db)
            let after = cursor.isEmpty ? "hash >= x''" : "hash > ?"
            let afterArguments: StatementArguments = cursor.isEmpty ? [] : [cursor]
            let upper = window.upper
            let lastDeleted = window.lastExpired
            if let lastDeleted {
                try db.cachedStatement(sql: "DELETE FROM form_hashes WHERE \(after) AND hash <= ? AND expires_at <= ?").execute(
                    arguments: afterArguments + [lastDeleted, now]
                )
                outcome.deleted += db.changesCount
            }
            outcome.sweepExamined = true
            // By what the window saw: a record made live since it was read is not deleted, and
            // the sweep still goes on after it.
            if let lastDeleted, window.expired == allowance {
                // The allowance ran out inside the window: more may be expired after it.
                outcome.sweepCursor = lastDeleted
                outcome.complete = false
            } else if let upper {
                // The window is done, and the table goes on after it.
                outcome.sweepCursor = upper
                outcome.complete = false
            } else {
                outcome.sweepCursor = nil
            }
        } else if cursor != nil {
            outcome.complete = false
        }
        try byExpiry("rate_limits")
        return outcome
    }

    /// Benchmarks and tests only (`formattest-dev simulate backlog`): stores `keys`,
    /// `replayRecords`, `challenges` and one request in each of `rateLimitWindows` through the
    /// statements of ``insertKey(_:)``, ``recordFormHash(_:now:)``, ``issueChallenge(_:)`` and
    /// ``countRequest(in:)`` (this file is the one place that knows the schema), each prepared
    /// once, in one transaction with one fsync: a batch of 100,000 rows costs one commit, not
    /// 100,000 group commits. It holds the writer for the whole batch, so it is not for a store
    /// a service is using. All or nothing: a row the store refuses (a keyId registered before, an
    /// unexpired form hash, a challenge issued before) rolls the batch back and throws its error.
    package func insertBacklog(
        keys: [StoredKey] = [],
        replayRecords: [ReplayRecord] = [],
        challenges: [IssuedChallenge] = [],
        rateLimitWindows: [RateLimitWindow] = [],
        now: Date
    ) async throws(StoreError) {
        try await self.write { db in
            // The batch's pages stay in memory (up to 1 GiB: with 10^7 keys the username index
            // alone is about 300 MB, and a batch writes all over it) instead of being spilled to
            // the WAL and read back every 2 MB (SQLite's default cache); the writer's own size is
            // restored.
            let cacheSize = try Int.fetchOne(db, sql: "PRAGMA cache_size") ?? -2000
            try db.execute(sql: "PRAGMA cache_size = -1048576")
            defer { try? db.execute(sql: "PRAGMA cache_size = \(cacheSize)") }
            for key in keys { try Self.insert(key, db) }
            for record in replayRecords { try Self.record(record, now: now, db) }
            for challenge in challenges { try Self.issue(challenge, db) }
            for window in rateLimitWindows { _ = try Self.count(window, db) }
        }
    }

    // MARK: - Statements (each runs inside the caller's transaction)

    private static func insert(_ key: StoredKey, _ db: Database) throws {
        do {
            try db.cachedStatement(
                sql: """
                    INSERT INTO keys (key_id, username, public_key, counter, app_id, environment, created_at, last_used,
                        reattestation_required, revoked_at, validation_category, bundle_version, cd_hash, cd_hash_type, counter_form_hash)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """
            ).execute(
                arguments: [
                    Data(key.keyID), key.username, Data(key.publicKey), Int64(key.counter), key.appID, key.environment.rawValue,
                    key.createdAt.timeIntervalSince1970, key.lastUsed.timeIntervalSince1970,
                    key.reattestationRequired, key.revokedAt?.timeIntervalSince1970,
                ] + Self.signalArguments(key.lastSignals) + [key.counterFormHash.map { Data($0) }]
            )
            try db.cachedStatement(
                sql: """
                    INSERT INTO key_registrations (key_id, receipt, attestation_object, attestation_client_data_hash)
                    VALUES (?, ?, ?, ?)
                    """
            ).execute(
                arguments: [
                    Data(key.keyID), Data(key.receipt), key.attestation.map { Data($0.object) }, key.attestation.map { Data($0.clientDataHash) },
                ]
            )
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError(code: .duplicateKey, reason: "the keyId is registered")
        }
    }

    /// `activeOnly`: an assertion's commit, which a key revoked since the flows loaded it must not
    /// pass (the revocation is part of the compare-and-set, as a passkey's is).
    private static func advance(
        keyID: [UInt8], to counter: UInt32, at date: Date, formHash: [UInt8]?, signals: KeySignals? = nil, activeOnly: Bool = false, _ db: Database
    ) throws {
        let active = activeOnly ? " AND revoked_at IS NULL" : ""
        // The form's hash and the signals, when the assertion carried any, are written by the
        // same conditional UPDATE as the counter: all or none.
        if let signals, !signals.isEmpty {
            try db.cachedStatement(
                sql: """
                    UPDATE keys SET counter = ?, last_used = ?, counter_form_hash = ?,
                        validation_category = ?, bundle_version = ?, cd_hash = ?, cd_hash_type = ?
                    WHERE key_id = ? AND counter < ?\(active)
                    """
            ).execute(
                arguments: [Int64(counter), date.timeIntervalSince1970, formHash.map { Data($0) }] + Self.signalArguments(signals) + [
                    Data(keyID), Int64(counter),
                ]
            )
        } else {
            try db.cachedStatement(sql: "UPDATE keys SET counter = ?, last_used = ?, counter_form_hash = ? WHERE key_id = ? AND counter < ?\(active)")
                .execute(
                    arguments: [Int64(counter), date.timeIntervalSince1970, formHash.map { Data($0) }, Data(keyID), Int64(counter)]
                )
        }
        guard db.changesCount == 1 else {
            let revoked = try Bool.fetchOne(db, sql: "SELECT revoked_at IS NOT NULL FROM keys WHERE key_id = ?", arguments: [Data(keyID)])
            guard let revoked else { throw StoreError(code: .unknownKey, reason: "no such keyId") }
            throw activeOnly && revoked
                ? StoreError(code: .keyRevoked, reason: "the key was revoked")
                : StoreError(code: .staleCounter, reason: "counter \(counter) is not above the stored one")
        }
    }

    private static func issue(_ challenge: IssuedChallenge, _ db: Database) throws {
        do {
            try db.cachedStatement(sql: "INSERT INTO challenges (value, purpose, username, issued_at, expires_at) VALUES (?, ?, ?, ?, ?)").execute(
                arguments: [
                    Data(challenge.value), challenge.purpose.rawValue, challenge.username,
                    challenge.issuedAt.timeIntervalSince1970, challenge.expiresAt.timeIntervalSince1970,
                ]
            )
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError(code: .duplicateChallenge, reason: "the challenge value was issued before")
        }
    }

    private static func count(_ window: RateLimitWindow, _ db: Database) throws -> Int {
        // One statement: the increment and the read are one atomic step.
        try Int.fetchOne(
            db.cachedStatement(
                sql: """
                    INSERT INTO rate_limits (id, window_start, count, expires_at) VALUES (?, ?, 1, ?)
                    ON CONFLICT (id, window_start) DO UPDATE SET count = count + 1
                    RETURNING count
                    """
            ),
            arguments: [Data(window.id), window.start.timeIntervalSince1970, window.expiresAt.timeIntervalSince1970]
        ) ?? Int.max
    }

    private static func consume(_ claim: ChallengeClaim, now: Date, _ db: Database) throws {
        // SQLite compares TEXT with the BINARY collation: usernames match byte for byte.
        try db.cachedStatement(
            sql: """
                UPDATE challenges SET used = 1
                WHERE value = ? AND used = 0 AND purpose = ? AND expires_at > ? AND (username IS NULL OR username = ?)
                """
        ).execute(
            arguments: [Data(claim.value), claim.purpose.rawValue, now.timeIntervalSince1970, claim.username]
        )
        guard db.changesCount == 1 else {
            throw StoreError(code: .challengeInvalid, reason: "the challenge is unknown, used, expired, or for another purpose or user")
        }
    }

    private static func record(_ record: ReplayRecord, now: Date, _ db: Database) throws {
        // Insert, or take over a record that has expired; an unexpired one is a replay.
        try db.cachedStatement(
            sql: """
                INSERT INTO form_hashes (hash, expires_at) VALUES (?, ?)
                ON CONFLICT (hash) DO UPDATE SET expires_at = excluded.expires_at WHERE form_hashes.expires_at <= ?
                """
        ).execute(
            arguments: [Data(record.formHash), record.expiresAt.timeIntervalSince1970, now.timeIntervalSince1970]
        )
        guard db.changesCount == 1 else {
            throw StoreError(code: .replay, reason: "this form was accepted before")
        }
    }

    /// validation_category, bundle_version, cd_hash, cd_hash_type (all NULL without signals).
    private static func signalArguments(_ signals: KeySignals?) -> StatementArguments {
        [
            signals?.validationCategory.map { Int64($0) }, signals?.bundleVersion, signals?.cdHash.map { Data($0) },
            signals?.cdHashType.map { Int64($0) },
        ]
    }

    // MARK: - Errors

    /// Runs `body` in its own savepoint of the next group transaction; returns once that
    /// transaction committed (or throws, having changed nothing).
    private func write<T: Sendable>(_ body: @Sendable @escaping (Database) throws -> T) async throws(StoreError) -> T {
        let value: any Sendable
        do {
            value = try await self.group.submit { db in try body(db) }
        } catch {
            throw Self.storeError(error)
        }
        guard let value = value as? T else {
            throw StoreError(code: .unavailable, reason: "SQLite: a write returned \(type(of: value)), not \(T.self)")
        }
        return value
    }

    /// Our own errors pass through; every SQLite or file error means the store is unavailable
    /// (read-only file, full disk, I/O error, locked beyond the busy timeout), and the
    /// transaction was rolled back.
    private static func storeError(_ error: any Error) -> StoreError {
        if let error = error as? StoreError { return error }
        return StoreError(code: .unavailable, reason: "SQLite: \(error)")
    }
}

extension SQLiteAttestationStore: @unchecked Sendable {}

extension SQLiteAttestationStore: StoreHousekeeping {
    /// The write-ahead log's checkpoints (`WALCheckpointer`), until the calling task is
    /// cancelled: the application runs it among its services (`formattest serve` does). Without
    /// it the log grows to the writer's automatic checkpoint (`walAutocheckpointPages`, about
    /// 40 MB), where that checkpoint runs inside a commit.
    public func runHousekeeping() async {
        await self.checkpointer.run()
    }
}
