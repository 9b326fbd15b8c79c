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

/// The store contract on the in-memory store and on SQLite.
struct StoreContractTests {
    static let names = StoreContract.all.map(\.name)

    @Test("memory store passes the contract", arguments: StoreContractTests.names)
    func memory(check: String) async throws {
        try await StoreContract.run(check) { MemoryAttestationStore() }
    }

    @Test("SQLite store passes the contract", arguments: StoreContractTests.names)
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
}
