//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AttestationStoreContract
import FormAttestFlows
import FormAttestTestSupport
import Foundation
import MongoAttestStore
import Testing

extension MongoTestServer {
    /// A store on a fresh database of the test server.
    static func freshStore() async throws -> MongoAttestationStore {
        try await MongoAttestationStore.connect(connectionString: try Self.uri.get(), database: "formattest_test_\(UUID().uuidString.prefix(8))")
    }
}

/// The store contract on MongoDB (mongoeco in CI, or a real MongoDB via FORMATTEST_MONGODB_URI).
struct MongoStoreTests {
    @Test("MongoDB store passes the contract", arguments: StoreContract.all.map(\.name))
    func contract(check: String) async throws {
        try await StoreContract.run(check) { try await MongoTestServer.freshStore() }
    }

    /// The documents each corruption writes (past the validator, as another writer could).
    static let corruptions: [(StoreCorruption, MongoAttestationStore.TestCollection, String, MongoAttestationStore.TestValue)] = [
        (StoreCorruption(.key, .wrongType, "counter"), .keys, "counter", .string("seven")),
        (StoreCorruption(.key, .outOfRange, "counter"), .keys, "counter", .int64(1 << 32)),
        (StoreCorruption(.key, .outOfRange, "counter"), .keys, "counter", .int64(-1)),
        (StoreCorruption(.key, .outOfRange, "lastSignals.validationCategory"), .keys, "lastSignals.validationCategory", .int64(1 << 32)),
        (StoreCorruption(.key, .wrongType, "createdAt"), .keys, "createdAt", .string("yesterday")),
        (StoreCorruption(.key, .missing, "publicKey"), .keys, "publicKey", .absent),
        (StoreCorruption(.key, .missing, "receipt"), .keys, "receipt", .absent),
        (StoreCorruption(.key, .missing, "attestation.clientDataHash"), .keys, "attestation.clientDataHash", .absent),
        (StoreCorruption(.passkey, .wrongType, "backedUp"), .passkeys, "backedUp", .string("yes")),
        (StoreCorruption(.passkey, .outOfRange, "signCount"), .passkeys, "signCount", .int64(1 << 32)),
        (StoreCorruption(.passkey, .missing, "userHandle"), .passkeys, "userHandle", .absent),
        (StoreCorruption(.replayRecord, .wrongType, "expiresAt"), .formHashes, "expiresAt", .string("soon")),
        (StoreCorruption(.replayRecord, .missing, "expiresAt"), .formHashes, "expiresAt", .absent),
    ]

    @Test(
        "MongoDB: a corrupt document (a wrong type, an out-of-range number, a missing field) is refused on every read (store_unavailable) and changes nothing",
        arguments: 0..<corruptions.count)
    func corruptDocument(index: Int) async throws {
        let (corruption, collection, field, value) = Self.corruptions[index]
        try await StoreContract.corruptData(corruption) {
            let store = try await MongoTestServer.freshStore()
            return CorruptibleStore(store: store) { _, id in
                try await store.overwriteForTesting(collection, id: id, field: field, with: value)
            }
        }
    }

    @Test("the shared evidence log: one batch per first index (a second insert there writes nothing), read in index order; registrations stored once")
    func sharedLog() async throws {
        let store = try await MongoTestServer.freshStore()
        func batch(_ first: UInt64, _ leaves: [String], root: UInt8) -> LogBatch {
            LogBatch(
                first: first, leaves: leaves.map { Array($0.utf8) }, registrations: [[UInt8](repeating: root, count: 32)],
                rootAfter: [UInt8](repeating: root, count: 32), insertedAt: Date(timeIntervalSince1970: 1_800_000_000))
        }
        let zero = batch(0, ["a", "b"], root: 1)
        #expect(try await store.insertLogBatch(zero))
        #expect(try await store.insertLogBatch(batch(0, ["x"], root: 9)) == false)
        let two = batch(2, ["c"], root: 2)
        #expect(try await store.insertLogBatch(two))
        #expect(try await store.logBatches(from: 0, limit: 10) == [zero, two])
        #expect(try await store.logBatches(from: 0, limit: 1) == [zero])
        #expect(try await store.logBatches(from: 1, limit: 10) == [two])
        #expect(try await store.logBatches(from: 3, limit: 10) == [])
        #expect(try await store.logBatches(from: 2, limit: 1) == [two])
        #expect(try await store.logBatches(from: 0, limit: 2).last == two)
        #expect(try await store.logBatches(from: 100, limit: 1).isEmpty)
        // The end and root of the batch before an index, without its leaves.
        #expect(try await store.logBatchExtent(before: 0) == nil)
        #expect(try await store.logBatchExtent(before: 100) == LogBatchExtent(first: 2, end: 3, rootAfter: two.rootAfter))
        #expect(try await store.logBatchExtent(before: 2) == LogBatchExtent(first: 0, end: 2, rootAfter: zero.rootAfter))
        #expect(
            try await store.logBatchExtents(from: 0, before: 3, limit: 10) == [
                LogBatchExtent(first: 0, end: 2, rootAfter: zero.rootAfter), LogBatchExtent(first: 2, end: 3, rootAfter: two.rootAfter),
            ])
        #expect(try await store.logBatchExtents(from: 1, before: 2, limit: 10) == [])
        #expect(try await store.logBatchExtents(from: 0, before: 3, limit: 1).count == 1)
        // A batch over the bytes one document holds is refused before anything is written.
        await #expect(throws: StoreError.self) {
            try await store.insertLogBatch(
                LogBatch(
                    first: 3, leaves: [[UInt8](repeating: 0x41, count: LogBatch.maximumBytes + 1)], registrations: [],
                    rootAfter: [], insertedAt: Date()))
        }
        #expect(try await store.logBatches(from: 3, limit: 10) == [])
        let document = Array("{\"type\":\"formattest-key-registration\"}".utf8)
        let id = [UInt8](repeating: 5, count: 32)
        try await store.storeLogRegistration(id: id, document: document)
        try await store.storeLogRegistration(id: id, document: document)
        #expect(try await store.logRegistration(id: id) == document)
        // A document altered in the database (r10 G5) is refused where it is read, and repaired by
        // the next instance that stores the registration.
        try await store.overwriteForTesting(.evidenceRegistrations, id: id, field: "document", with: .string("garbage"))
        await #expect(throws: StoreError.self) { try await store.logRegistration(id: id) }
        try await store.storeLogRegistration(id: id, document: document)
        #expect(try await store.logRegistration(id: id) == document)
        #expect(try await store.logRegistration(id: [UInt8](repeating: 6, count: 32)) == nil)
        // The log's status: claimed once, a move ended once.
        #expect(try await store.sharedLogStatus() == nil)
        // The high-water mark lives with the status: none without it (r10 G1).
        #expect(try await store.logHighWater() == LogHighWater(answered: 0))
        await #expect(throws: StoreError.self) { try await store.raiseLogHighWater(to: 1) }
        let moving = SharedLogStatus(
            verifierKey: "bank.example/evidence+01020304+AQ", moving: .init(size: 600, root: [UInt8](repeating: 3, count: 32)))
        let ready = SharedLogStatus(verifierKey: "bank.example/evidence+01020304+AQ")
        #expect(try await store.replaceSharedLogStatus(nil, with: moving))
        #expect(try await store.replaceSharedLogStatus(nil, with: SharedLogStatus(verifierKey: "other+01020304+AQ")) == false)
        #expect(try await store.sharedLogStatus() == moving)
        #expect(try await store.replaceSharedLogStatus(ready, with: moving) == false)
        #expect(try await store.replaceSharedLogStatus(moving, with: ready))
        #expect(try await store.replaceSharedLogStatus(moving, with: ready) == false)
        #expect(try await store.sharedLogStatus() == ready)
        // Raised, never lowered, and kept through the status's changes.
        #expect(try await store.raiseLogHighWater(to: 5) == 0)
        #expect(try await store.raiseLogHighWater(to: 3) == 5)
        #expect(try await store.logHighWater() == LogHighWater(answered: 5))
        // A hole reported: the lowest one kept; cleared only by a put-back that reaches past it.
        try await store.reportLogHole(at: 4)
        try await store.reportLogHole(at: 2)
        try await store.reportLogHole(at: 3)
        #expect(try await store.logHighWater() == LogHighWater(answered: 5, hole: 2))
        try await store.clearLogHole(below: 2)
        #expect(try await store.logHighWater().hole == 2)
        #expect(try await store.replaceSharedLogStatus(ready, with: moving))
        #expect(try await store.sharedLogStatus() == moving)
        #expect(try await store.logHighWater() == LogHighWater(answered: 5, hole: 2))
        #expect(try await store.replaceSharedLogStatus(moving, with: ready))
        #expect(try await store.logHighWater() == LogHighWater(answered: 5, hole: 2))
        try await store.clearLogHole(below: 3)
        #expect(try await store.logHighWater() == LogHighWater(answered: 5))
        #expect(try await store.replaceSharedLogStatus(ready, with: moving))
        #expect(try await store.replaceSharedLogStatus(moving, with: nil))
        #expect(try await store.sharedLogStatus() == nil)
        #expect(try await store.logHighWater() == LogHighWater(answered: 0))
        // A batch whose stored end is not its first index plus its leaves is refused where it is read.
        #expect(try await store.logBatches(from: 2, limit: 1) == [two])
        try await store.overwriteForTesting(.evidenceLog, id: [0, 0, 0, 0, 0, 0, 0, 2], field: "end", with: .int64(7))
        await #expect(throws: StoreError.self) { try await store.logBatches(from: 2, limit: 1) }
        // Taken back by its inserter: only the batch at that index with that root.
        #expect(try await store.takeBackLogBatch(first: 2, rootAfter: zero.rootAfter) == false)
        #expect(try await store.takeBackLogBatch(first: 0, rootAfter: two.rootAfter) == false)
        #expect(try await store.takeBackLogBatch(first: 2, rootAfter: two.rootAfter))
        #expect(try await store.logBatchExtents(from: 0, before: 100, limit: 10).map(\.first) == [0])
    }

    @Test("setup is idempotent: connecting twice to one database keeps its data")
    func idempotentSetup() async throws {
        let uri = try MongoTestServer.uri.get()
        let database = "formattest_idem_\(UUID().uuidString.prefix(8))"
        let first = try await MongoAttestationStore.connect(connectionString: uri, database: database)
        try await first.insertKey(StoreContract.key(1))
        let second = try await MongoAttestationStore.connect(connectionString: uri, database: database)
        #expect(try await second.loadKey(keyID: StoreContract.key(1).keyID) != nil)
    }

    @Test("an unreachable server fails closed with store_unavailable, without hanging")
    func unreachable() async throws {
        let started = Date()
        do {
            _ = try await MongoAttestationStore.connect(connectionString: "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=500")
            Issue.record("connected to nothing")
        } catch {
            #expect(error.code == .unavailable)
        }
        // A guard against hanging, not a speed claim: server selection gives up after 0.5 s, but
        // the blocking call waits for a thread of the store's pool, which the MongoDB suites
        // running beside it keep busy (60-102 s were seen in full runs on 2 loaded cores; alone it
        // takes about a second). A hang would never get here.
        #expect(Date().timeIntervalSince(started) < 300)
    }

    @Test("an invalid connection string is refused")
    func invalidURI() async throws {
        do {
            _ = try await MongoAttestationStore.connect(connectionString: "http://example.com")
            Issue.record("accepted an http URI")
        } catch {
            #expect(error.code == .unavailable)
            #expect(error.reason.contains("connection string"))
        }
    }

    @Test("a key document whose environment is neither development nor production is refused (store_unavailable), not defaulted")
    func unknownEnvironment() async throws {
        let store = try await MongoTestServer.freshStore()
        // The same raw write with a known environment reads back: only the environment differs.
        try await store.insertKey(StoreContract.key(1), storingEnvironmentAs: "production")
        #expect(try await store.loadKey(keyID: StoreContract.key(1).keyID)?.environment == .production)
        try await store.insertKey(StoreContract.key(2), storingEnvironmentAs: "staging")
        await StoreContract.expect(.unavailable) { _ = try await store.loadKey(keyID: StoreContract.key(2).keyID) }
        await StoreContract.expect(.unavailable) { _ = try await store.keys(username: "alice") }
    }

    @Test("a backlog batch (insert commands of 500 documents) writes what single writes would: keys, live records, challenges, windows")
    func backlogBatch() async throws {
        let store = try await MongoTestServer.freshStore()
        let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        func id(_ kind: UInt8, _ index: Int) -> [UInt8] { [kind, UInt8(index >> 8), UInt8(index & 0xFF)] + [UInt8](repeating: 0x3C, count: 29) }
        let keys = (0..<3).map {
            StoredKey(
                keyID: id(1, $0), username: "backlog-\($0)", publicKey: [0x04] + [UInt8](repeating: UInt8($0), count: 64), counter: 0,
                appID: "ABCDE12345.com.example", environment: .production, receipt: [UInt8](repeating: 7, count: 2_710), createdAt: now,
                lastUsed: now, attestation: KeyAttestation(object: [UInt8](repeating: 9, count: 4_244), clientDataHash: id(8, $0))
            )
        }
        // More records than one command holds, so that the batch spans two commands.
        let records = (0..<(MongoAttestationStore.backlogCommandSize + 20)).map {
            ReplayRecord(formHash: id(2, $0), expiresAt: now.addingTimeInterval(3600))
        }
        let challenge = IssuedChallenge(value: id(3, 0), purpose: .form, username: nil, issuedAt: now, expiresAt: now.addingTimeInterval(600))
        // Kept an hour: mongoeco's TTL monitor, like MongoDB's, deletes a window whose expiresAt
        // is past by the real clock, and under a loaded full suite this test has taken 201 s.
        let window = RateLimitWindow(id: id(4, 0), start: now, expiresAt: now.addingTimeInterval(3600))
        try await store.insertBacklog(keys: keys, replayRecords: records, challenges: [challenge], rateLimitWindows: [window], now: now)

        #expect(try await store.loadKey(keyID: keys[2].keyID) == keys[2])
        #expect(try await store.isFormHashRecorded(records[records.count - 1].formHash, now: now))
        await StoreContract.expect(.replay) { try await store.recordFormHash(records[7], now: now) }
        try await store.consumeChallenge(ChallengeClaim(value: challenge.value, purpose: .form, username: nil), now: now)
        #expect(try await store.countRequest(in: window) == 2)

        // A key registered before stops the batch with the single write's error.
        await StoreContract.expect(.duplicateKey) { try await store.insertBacklog(keys: [keys[0]], now: now) }
    }
}
