//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import FormAttestFlows
import Foundation
import GRDB
import GRDBSQLite

/// Reading keys: the one SELECT every key is read with, and its rows as ``StoredKey``s.
///
/// Every request reads its key, so this is on the service's hot path. GRDB binds the argument; the
/// rows are stepped and read with SQLite's C API, column by position, in place. (A `Row` cursor
/// built a case-insensitive index of the 17 column names for every read, and decoded each value
/// through `DatabaseValueConvertible`: in a profile of the service under load, most of the key's
/// read went there; docs/performance.md has the figures.)
///
/// A value of the wrong type (a corrupt or foreign database) fails closed, as
/// ``StoreError/Code/unavailable``: nothing is defaulted, clamped or decoded lossily.
enum KeyRows {
    /// The columns a key is read from, in the order ``select`` names them: a key's row and its
    /// registration's blobs.
    enum Column: Int32, CaseIterable {
        case keyID, username, publicKey, counter, appID, environment, createdAt, lastUsed, reattestationRequired, revokedAt
        case validationCategory, bundleVersion, cdHash, cdHashType, counterFormHash
        case receipt, attestationObject, attestationClientDataHash

        var qualifiedName: String {
            switch self {
            case .keyID: "keys.key_id"
            case .username: "keys.username"
            case .publicKey: "keys.public_key"
            case .counter: "keys.counter"
            case .appID: "keys.app_id"
            case .environment: "keys.environment"
            case .createdAt: "keys.created_at"
            case .lastUsed: "keys.last_used"
            case .reattestationRequired: "keys.reattestation_required"
            case .revokedAt: "keys.revoked_at"
            case .validationCategory: "keys.validation_category"
            case .bundleVersion: "keys.bundle_version"
            case .cdHash: "keys.cd_hash"
            case .cdHashType: "keys.cd_hash_type"
            case .counterFormHash: "keys.counter_form_hash"
            case .receipt: "key_registrations.receipt"
            case .attestationObject: "key_registrations.attestation_object"
            case .attestationClientDataHash: "key_registrations.attestation_client_data_hash"
            }
        }
    }

    /// A key's row with its registration's blobs; callers append their `WHERE` (with one `?`) and
    /// order. A LEFT JOIN: a key whose registration row is missing reads its receipt as NULL and
    /// is refused (``StoreError/Code/unavailable``), never dropped as if there were no such key.
    static let select = """
        SELECT \(Column.allCases.map(\.qualifiedName).joined(separator: ", "))
        FROM keys LEFT JOIN key_registrations ON key_registrations.key_id = keys.key_id
        """

    /// Runs `statement` (``select`` and its clauses) with `argument` bound to its one parameter;
    /// its rows as keys, in order.
    static func fetch(_ statement: Statement, _ argument: some DatabaseValueConvertible) throws -> [StoredKey] {
        try Self.fetch(statement, arguments: [argument])
    }

    /// Runs `statement` with `arguments` bound to its parameters; its rows as keys, in order.
    static func fetch(_ statement: Statement, arguments: StatementArguments) throws -> [StoredKey] {
        try statement.setArguments(arguments)
        let handle = statement.sqliteStatement
        defer { sqlite3_reset(handle) }
        var keys: [StoredKey] = []
        while true {
            switch sqlite3_step(handle) {
            case SQLITE_DONE:
                return keys
            case SQLITE_ROW:
                keys.append(try Self.key(Cells(handle: handle)))
            case let code:
                throw DatabaseError(
                    resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(sqlite3_db_handle(handle))), sql: statement.sql)
            }
        }
    }

    /// The current row as a key; a row that names an environment FormAttest never writes fails
    /// closed.
    private static func key(_ row: Cells) throws(StoreError) -> StoredKey {
        let stored = try row.required(.environment, row.text)
        guard let environment = AppAttestEnvironment(rawValue: stored) else {
            throw StoreError(
                code: .unavailable, reason: "SQLite: a stored key's environment is \(stored.debugDescription), neither development nor production")
        }
        let signals = KeySignals(
            validationCategory: try row.uint32(.validationCategory),
            bundleVersion: try row.text(.bundleVersion),
            cdHash: try row.blob(.cdHash),
            cdHashType: try row.uint32(.cdHashType)
        )
        // attestation_object and attestation_client_data_hash: both NULL for keys registered before v5.
        var attestation: KeyAttestation?
        if let object = try row.blob(.attestationObject), let hash = try row.blob(.attestationClientDataHash) {
            attestation = KeyAttestation(object: object, clientDataHash: hash)
        }
        return StoredKey(
            keyID: try row.required(.keyID, row.blob),
            username: try row.required(.username, row.text),
            publicKey: try row.required(.publicKey, row.blob),
            counter: try row.required(.counter, row.uint32),
            appID: try row.required(.appID, row.text),
            environment: environment,
            receipt: try row.required(.receipt, row.blob),
            createdAt: Date(timeIntervalSince1970: try row.required(.createdAt, row.real)),
            lastUsed: Date(timeIntervalSince1970: try row.required(.lastUsed, row.real)),
            reattestationRequired: try row.required(.reattestationRequired, row.integer) != 0,
            revokedAt: try row.real(.revokedAt).map(Date.init(timeIntervalSince1970:)),
            lastSignals: signals.isEmpty ? nil : signals,
            attestation: attestation,
            counterFormHash: try row.blob(.counterFormHash)
        )
    }

    /// The current row's values, by ``Column``, read in place (`nil` for NULL). Valid until the
    /// statement steps again or is reset.
    private struct Cells {
        let handle: SQLiteStatement

        private func type(_ column: Column) -> Int32 { sqlite3_column_type(self.handle, column.rawValue) }

        private func refuse(_ column: Column, _ expected: String) -> StoreError {
            StoreError(code: .unavailable, reason: "SQLite: a stored key's \(column.qualifiedName) is not \(expected)")
        }

        /// A NULL pointer for a non-NULL value that SQLite could not allocate (`SQLITE_NOMEM`).
        private func refuseOutOfMemory(_ column: Column) throws(StoreError) {
            if sqlite3_errcode(sqlite3_db_handle(self.handle)) == SQLITE_NOMEM {
                throw StoreError(code: .unavailable, reason: "SQLite: out of memory reading a stored key's \(column.qualifiedName)")
            }
        }

        func required<Value>(_ column: Column, _ read: (Column) throws(StoreError) -> Value?) throws(StoreError) -> Value {
            guard let value = try read(column) else {
                throw StoreError(code: .unavailable, reason: "SQLite: a stored key's \(column.qualifiedName) is NULL")
            }
            return value
        }

        /// A blob, copied once from SQLite's buffer.
        func blob(_ column: Column) throws(StoreError) -> [UInt8]? {
            switch self.type(column) {
            case SQLITE_NULL: return nil
            case SQLITE_BLOB:
                // The pointer first, then the size (SQLite's documented order).
                let pointer = sqlite3_column_blob(self.handle, column.rawValue)
                let count = Int(sqlite3_column_bytes(self.handle, column.rawValue))
                guard let pointer else {
                    // NULL is an empty blob, or SQLite out of memory: never read that as empty.
                    try self.refuseOutOfMemory(column)
                    return []
                }
                return Array(UnsafeRawBufferPointer(start: pointer, count: count))
            default: throw self.refuse(column, "a blob")
            }
        }

        /// Text that is valid UTF-8 (never repaired).
        func text(_ column: Column) throws(StoreError) -> String? {
            switch self.type(column) {
            case SQLITE_NULL: return nil
            case SQLITE_TEXT:
                let pointer = sqlite3_column_text(self.handle, column.rawValue)
                let count = Int(sqlite3_column_bytes(self.handle, column.rawValue))
                guard let pointer else {
                    try self.refuseOutOfMemory(column)
                    return ""
                }
                guard let text = String(validating: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self) else {
                    throw self.refuse(column, "UTF-8 text")
                }
                return text
            default: throw self.refuse(column, "text")
            }
        }

        func integer(_ column: Column) throws(StoreError) -> Int64? {
            switch self.type(column) {
            case SQLITE_NULL: return nil
            case SQLITE_INTEGER: return sqlite3_column_int64(self.handle, column.rawValue)
            default: throw self.refuse(column, "an integer")
            }
        }

        /// An integer in `UInt32`'s range (counters, signal codes): never clamped.
        func uint32(_ column: Column) throws(StoreError) -> UInt32? {
            guard let value = try self.integer(column) else { return nil }
            guard let narrow = UInt32(exactly: value) else { throw self.refuse(column, "a 32-bit unsigned integer") }
            return narrow
        }

        /// A time as seconds since 1970 (a REAL column; SQLite may hand back an integral one as an
        /// integer).
        func real(_ column: Column) throws(StoreError) -> Double? {
            switch self.type(column) {
            case SQLITE_NULL: return nil
            case SQLITE_FLOAT, SQLITE_INTEGER: return sqlite3_column_double(self.handle, column.rawValue)
            default: throw self.refuse(column, "a number")
            }
        }
    }
}
