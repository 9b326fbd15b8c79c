//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestFlows
import Foundation
import GRDB

/// Reading passkeys: the one SELECT every passkey is read with, and its rows as
/// ``StoredPasskey``s. As with keys, a value of the wrong type (a corrupt or foreign database)
/// fails closed as ``StoreError/Code/unavailable``: nothing is defaulted, clamped or repaired.
enum PasskeyRows {
    /// A passkey's row with its registration's blobs (absent for none kept); callers append
    /// their `WHERE` and order.
    static let select = """
        SELECT passkeys.credential_id, passkeys.username, passkeys.user_handle, passkeys.public_key, passkeys.sign_count,
            passkeys.backup_eligible, passkeys.backed_up, passkeys.aaguid, passkeys.transports, passkeys.format,
            passkeys.created_at, passkeys.last_used, passkeys.revoked_at,
            passkey_registrations.attestation_object, passkey_registrations.client_data_json
        FROM passkeys LEFT JOIN passkey_registrations ON passkey_registrations.credential_id = passkeys.credential_id
        """

    static func fetch(_ db: Database, sql: String, arguments: StatementArguments) throws -> [StoredPasskey] {
        try Row.fetchAll(db, sql: sql, arguments: arguments).map { row throws(StoreError) in try Self.passkey(row) }
    }

    private static func passkey(_ row: Row) throws(StoreError) -> StoredPasskey {
        let transports = try Self.blob(row, 8, "transports")
        guard let names = StoredPasskey.decodeTransports(transports) else { throw Self.refuse("transports", "a transport list") }
        var registration: PasskeyRegistrationRecord?
        if let object = try Self.optionalBlob(row, 13, "attestation_object"), let clientData = try Self.optionalBlob(row, 14, "client_data_json") {
            registration = PasskeyRegistrationRecord(attestationObject: object, clientDataJSON: clientData)
        }
        guard let signCount = UInt32(exactly: try Self.integer(row, 4, "sign_count")) else {
            throw Self.refuse("sign_count", "a 32-bit unsigned integer")
        }
        return StoredPasskey(
            credentialID: try Self.blob(row, 0, "credential_id"),
            username: try Self.text(row, 1, "username"),
            userHandle: try Self.blob(row, 2, "user_handle"),
            publicKey: try Self.blob(row, 3, "public_key"),
            signCount: signCount,
            backupEligible: try Self.flag(row, 5, "backup_eligible"),
            backedUp: try Self.flag(row, 6, "backed_up"),
            aaguid: try Self.blob(row, 7, "aaguid"),
            transports: names,
            format: try Self.text(row, 9, "format"),
            createdAt: Date(timeIntervalSince1970: try Self.real(row, 10, "created_at")),
            lastUsed: Date(timeIntervalSince1970: try Self.real(row, 11, "last_used")),
            revokedAt: try Self.optionalReal(row, 12, "revoked_at").map(Date.init(timeIntervalSince1970:)),
            registration: registration
        )
    }

    private static func refuse(_ column: String, _ expected: String) -> StoreError {
        StoreError(code: .unavailable, reason: "SQLite: a stored passkey's \(column) is not \(expected)")
    }

    private static func optionalBlob(_ row: Row, _ index: Int, _ name: String) throws(StoreError) -> [UInt8]? {
        switch (row[index] as DatabaseValue).storage {
        case .null: return nil
        case .blob(let data): return Array(data)
        default: throw Self.refuse(name, "a blob")
        }
    }

    private static func blob(_ row: Row, _ index: Int, _ name: String) throws(StoreError) -> [UInt8] {
        guard let value = try Self.optionalBlob(row, index, name) else { throw Self.refuse(name, "a blob (it is NULL)") }
        return value
    }

    private static func text(_ row: Row, _ index: Int, _ name: String) throws(StoreError) -> String {
        guard case .string(let text) = (row[index] as DatabaseValue).storage else { throw Self.refuse(name, "text") }
        return text
    }

    private static func integer(_ row: Row, _ index: Int, _ name: String) throws(StoreError) -> Int64 {
        guard case .int64(let value) = (row[index] as DatabaseValue).storage else { throw Self.refuse(name, "an integer") }
        return value
    }

    private static func flag(_ row: Row, _ index: Int, _ name: String) throws(StoreError) -> Bool {
        switch try Self.integer(row, index, name) {
        case 0: return false
        case 1: return true
        default: throw Self.refuse(name, "0 or 1")
        }
    }

    private static func optionalReal(_ row: Row, _ index: Int, _ name: String) throws(StoreError) -> Double? {
        switch (row[index] as DatabaseValue).storage {
        case .null: return nil
        case .double(let value): return value
        case .int64(let value): return Double(value)
        default: throw Self.refuse(name, "a number")
        }
    }

    private static func real(_ row: Row, _ index: Int, _ name: String) throws(StoreError) -> Double {
        guard let value = try Self.optionalReal(row, index, name) else { throw Self.refuse(name, "a number (it is NULL)") }
        return value
    }
}
