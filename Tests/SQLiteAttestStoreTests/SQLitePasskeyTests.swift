//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AttestationStoreContract
import FormAttestFlows
import Foundation
import GRDB
import SQLiteAttestStore
import Testing

/// What only the SQLite store has for passkeys: the migration of a database from before them, and
/// a stored row FormAttest never writes read back fail closed.
struct SQLitePasskeyTests {
    static func passkey(_ id: UInt8, signCount: UInt32 = 0) -> StoredPasskey {
        StoredPasskey(
            credentialID: [UInt8](repeating: id, count: 20), username: "alice", userHandle: [UInt8](repeating: 0xCC, count: 32),
            publicKey: [0xA5, 0x01, 0x02], signCount: signCount, backupEligible: true, backedUp: false,
            aaguid: [UInt8](repeating: 0, count: 16), transports: ["internal"], format: "none",
            createdAt: Date(timeIntervalSince1970: 1_000), lastUsed: Date(timeIntervalSince1970: 1_000)
        )
    }

    @Test("a database of schema v7 (before passkeys) is migrated on open: its keys, challenges and form hashes stay, and passkeys work")
    func migrationFromV7() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-v7-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent("formattest.sqlite").path
        let keyID = [UInt8](repeating: 9, count: 32)
        let challenge = [UInt8](repeating: 0x11, count: 32)
        let formHash = [UInt8](repeating: 0x22, count: 32)
        // Times after the real now: the records are live whatever day the test runs.
        let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        let expiry = now.addingTimeInterval(3600).timeIntervalSince1970
        // The file as v7 left it: its tables and GRDB's record of the seven migrations.
        let old = try DatabaseQueue(path: path)
        try await old.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE keys (
                        key_id BLOB PRIMARY KEY NOT NULL, username TEXT NOT NULL, public_key BLOB NOT NULL,
                        counter INTEGER NOT NULL, app_id TEXT NOT NULL, environment TEXT NOT NULL,
                        created_at REAL NOT NULL, last_used REAL NOT NULL,
                        reattestation_required INTEGER NOT NULL DEFAULT 0, revoked_at REAL,
                        validation_category INTEGER, bundle_version TEXT, cd_hash BLOB, cd_hash_type INTEGER,
                        counter_form_hash BLOB);
                    CREATE INDEX keys_username ON keys(username);
                    CREATE TABLE key_registrations (
                        key_id BLOB PRIMARY KEY NOT NULL, receipt BLOB NOT NULL, attestation_object BLOB, attestation_client_data_hash BLOB);
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
                        ('v5: the attestation that registered each key'), ('v6: the registration''s blobs beside the key, not in its row'),
                        ('v7: the form that set each key''s counter');
                    """
            )
            try db.execute(
                sql: """
                    INSERT INTO keys (key_id, username, public_key, counter, app_id, environment, created_at, last_used)
                    VALUES (?, 'alice', ?, 7, 'ABCDE12345.com.example', 'production', 1000, 2000)
                    """,
                arguments: [Data(keyID), Data([0x04] + [UInt8](repeating: 1, count: 64))]
            )
            try db.execute(sql: "INSERT INTO key_registrations (key_id, receipt) VALUES (?, ?)", arguments: [Data(keyID), Data([1, 2, 3])])
            try db.execute(
                sql: "INSERT INTO challenges (value, purpose, username, issued_at, expires_at) VALUES (?, 'form', 'alice', ?, ?)",
                arguments: [Data(challenge), now.timeIntervalSince1970, expiry])
            try db.execute(sql: "INSERT INTO form_hashes (hash, expires_at) VALUES (?, ?)", arguments: [Data(formHash), expiry])
        }
        try old.close()

        let store = try SQLiteAttestationStore(path: path)
        #expect(try await store.loadKey(keyID: keyID)?.counter == 7)
        #expect(try await store.isFormHashRecorded(formHash, now: now))
        #expect(try await store.passkeys(username: "alice").isEmpty)
        #expect(try await store.countPasskeys(username: "alice", .all) == 0)
        // The old form challenge is still consumed as one, and a passkey challenge is new.
        try await store.issueChallenge(
            IssuedChallenge(
                value: [UInt8](repeating: 0x33, count: 32), purpose: .passkey, username: "alice", issuedAt: now, expiresAt: now.addingTimeInterval(60)
            ))
        try await store.commitPasskeyRegistration(
            PasskeyRegistrationCommit(
                passkey: Self.passkey(1),
                challenges: [ChallengeClaim(value: [UInt8](repeating: 0x33, count: 32), purpose: .passkey, username: "alice")], now: now))
        try await store.commitAssertion(
            AssertionCommit(
                keyID: keyID, counter: 8,
                replay: ReplayRecord(formHash: [UInt8](repeating: 0x44, count: 32), expiresAt: now.addingTimeInterval(3600)),
                challenges: [ChallengeClaim(value: challenge, purpose: .form, username: "alice")], now: now,
                passkey: PasskeyUse(credentialID: Self.passkey(1).credentialID, previousSignCount: 0, signCount: 1, backedUp: false)))
        #expect(try await store.loadKey(keyID: keyID)?.counter == 8)
        #expect(try await store.loadPasskey(credentialID: Self.passkey(1).credentialID)?.signCount == 1)
        await store.shutdown()
    }

    @Test(
        "SQLite: a stored passkey row FormAttest never writes (a transport list past its end, a sign count beyond 32 bits, a flag of 2, a blob for text) is refused (store_unavailable)",
        arguments: [
            "UPDATE passkeys SET transports = x'0561'",
            "UPDATE passkeys SET sign_count = 4294967296",
            "UPDATE passkeys SET backed_up = 2",
            "UPDATE passkeys SET format = x'00'",
        ]
    )
    func corruptRows(statement: String) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-passkey-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("formattest.sqlite").path
        let store = try SQLiteAttestationStore(path: path)
        try await store.commitPasskeyRegistration(PasskeyRegistrationCommit(passkey: Self.passkey(1), challenges: [], now: Date()))
        #expect(try await store.loadPasskey(credentialID: Self.passkey(1).credentialID) == Self.passkey(1))
        let writer = try DatabaseQueue(path: path)
        try await writer.write { db in try db.execute(sql: statement) }
        try writer.close()
        await StoreContract.expect(.unavailable) { _ = try await store.loadPasskey(credentialID: Self.passkey(1).credentialID) }
        await StoreContract.expect(.unavailable) { _ = try await store.passkeys(username: "alice") }
        await store.shutdown()
    }
}
