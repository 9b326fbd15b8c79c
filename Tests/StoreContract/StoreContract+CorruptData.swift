//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
public import FormAttestFlows
import Foundation
public import Testing

/// One record changed behind the store's back (another writer, a damaged file, an older or newer
/// FormAttest): a field of the wrong type, a number out of range, a required field missing.
public struct StoreCorruption: Sendable, CustomTestStringConvertible {
    public enum Record: String, Sendable {
        case key
        case passkey
        case replayRecord = "replay record"
    }

    public enum Fault: String, Sendable {
        case wrongType = "of the wrong type"
        case outOfRange = "out of range"
        case missing
    }

    public let record: Record
    public let fault: Fault
    /// The store's own name of what is changed (a column, a document field, a row).
    public let field: String

    public init(_ record: Record, _ fault: Fault, _ field: String) {
        self.record = record
        self.fault = fault
        self.field = field
    }

    public var testDescription: String { "\(self.record.rawValue): \(self.field) \(self.fault.rawValue)" }
}

/// A store with the means to corrupt one of its records straight in its database.
public struct CorruptibleStore: Sendable {
    public let store: any StepwiseAttestationStore
    /// Writes `corruption` to the record whose id (keyId, credential id or form hash) is given.
    public let corrupt: @Sendable (StoreCorruption, [UInt8]) async throws -> Void

    public init(
        store: any StepwiseAttestationStore,
        corrupt: @escaping @Sendable (StoreCorruption, [UInt8]) async throws -> Void
    ) {
        self.store = store
        self.corrupt = corrupt
    }
}

extension StoreContract {
    /// The corrupt-data check: a key, a passkey and a replay record are stored beside a second of
    /// each; one of the first is corrupted in the database; every read of it answers
    /// ``StoreError/Code/unavailable`` (never "no such key", a default or a clamped value), and
    /// no read changes any state: the corrupt record stays as it is, the others read back as
    /// stored. The same reads before the corruption succeed, so the corruption alone makes the
    /// difference.
    public static func corruptData(_ corruption: StoreCorruption, _ make: @Sendable () async throws -> CorruptibleStore) async throws {
        try await $t0.withValue(Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))) {
            let corruptible = try await make()
            let store = corruptible.store
            var first = key(1)
            // The optional parts too, so that a corrupt signal or attestation is read.
            first.lastSignals = KeySignals(validationCategory: 4, bundleVersion: "1.0", cdHash: [0xAB], cdHashType: 2)
            first.attestation = KeyAttestation(object: [1, 2, 3], clientDataHash: hash(7))
            let second = key(2)
            try await store.insertKey(first)
            try await store.insertKey(second)
            try await store.commitPasskeyRegistration(PasskeyRegistrationCommit(passkey: passkey(1), challenges: [], now: t0))
            try await store.commitPasskeyRegistration(PasskeyRegistrationCommit(passkey: passkey(2), challenges: [], now: t0))
            try await store.recordFormHash(ReplayRecord(formHash: hash(1), expiresAt: t0.addingTimeInterval(hour)), now: t0)
            try await store.recordFormHash(ReplayRecord(formHash: hash(2), expiresAt: t0.addingTimeInterval(hour)), now: t0)

            // Before: every read succeeds.
            let reads = Self.reads(of: corruption.record, store)
            for read in reads { try await read.body() }
            #expect(try await store.loadKey(keyID: first.keyID) == first)
            #expect(try await store.loadPasskey(credentialID: passkey(1).credentialID) == passkey(1))
            #expect(try await store.isFormHashRecorded(hash(1), now: t0))

            let id: [UInt8] =
                switch corruption.record {
                case .key: first.keyID
                case .passkey: passkey(1).credentialID
                case .replayRecord: hash(1)
                }
            try await corruptible.corrupt(corruption, id)

            // After: every read of the corrupt record fails closed, twice (nothing was repaired).
            for _ in 0..<2 {
                for read in reads {
                    await expect(.unavailable, { try await read.body() }, sourceLocation: read.location)
                }
            }
            // The others are untouched.
            #expect(try await store.loadKey(keyID: second.keyID) == second)
            #expect(try await store.loadPasskey(credentialID: passkey(2).credentialID) == passkey(2))
            #expect(try await store.isFormHashRecorded(hash(2), now: t0))
            #expect(try await store.countKeys(username: "alice", .all) == 2)
            #expect(try await store.countPasskeys(username: "alice", .all) == 2)
            switch corruption.record {
            case .key:
                #expect(try await store.loadPasskey(credentialID: passkey(1).credentialID) == passkey(1))
                #expect(try await store.isFormHashRecorded(hash(1), now: t0))
            case .passkey:
                #expect(try await store.loadKey(keyID: first.keyID) == first)
                #expect(try await store.isFormHashRecorded(hash(1), now: t0))
            case .replayRecord:
                #expect(try await store.loadKey(keyID: first.keyID) == first)
                #expect(try await store.loadPasskey(credentialID: passkey(1).credentialID) == passkey(1))
            }
        }
    }

    private struct Read {
        let body: @Sendable () async throws -> Void
        let location: SourceLocation
    }

    /// Every read that returns the record.
    private static func reads(of record: StoreCorruption.Record, _ store: any StepwiseAttestationStore) -> [Read] {
        func read(_ body: @escaping @Sendable () async throws -> Void, location: SourceLocation = #_sourceLocation) -> Read {
            Read(body: body, location: location)
        }
        switch record {
        case .key:
            return [
                read { _ = try await store.loadKey(keyID: key(1).keyID) },
                read { _ = try await store.keys(username: "alice") },
                read { _ = try await store.keys(username: "alice", after: nil, limit: 10) },
            ]
        case .passkey:
            return [
                read { _ = try await store.loadPasskey(credentialID: passkey(1).credentialID) },
                read { _ = try await store.passkeys(username: "alice") },
                read { _ = try await store.passkeys(username: "alice", after: nil, limit: 10) },
            ]
        case .replayRecord:
            return [read { _ = try await store.isFormHashRecorded(hash(1), now: t0) }]
        }
    }
}
