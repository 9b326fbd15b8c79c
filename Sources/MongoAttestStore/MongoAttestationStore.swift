//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
public import FormAttestFlows
public import Foundation
import NIOPosix

/// The store (`StepwiseAttestationStore`, and so every narrower protocol) on MongoDB, shared by any number of stateless verifier instances.
///
/// Atomicity comes from MongoDB's single-document operations, never from read-then-write:
/// - keys: `_id` = keyId (unique); the counter advances by `findAndModify` with
///   `{counter: {$lt: new}}` in the query;
/// - challenges: consumed by `findAndModify` with `{used: false, purpose, expiresAt > now,
///   username in [null, user]}` in the query, so that one consumer wins;
/// - form hashes: `_id` = hash; recorded by an upsert whose query only matches an expired record,
///   so an unexpired one makes the insert fail with duplicate key 11000 (a replay).
///
/// A commit applies its parts in a fixed order, the decisive write (the key insert or the
/// counter CAS) last: challenges, then the replay record, then the decision. When a later part
/// fails, the earlier ones are undone (each tagged with the commit's id, so only this commit's
/// writes are touched). If the process dies between parts, what remains is a consumed challenge
/// or a replay record for a form that was never accepted: the client must sign a fresh form.
/// Nothing is ever accepted without its replay record and counter written.
///
/// TTL indexes on `expiresAt` clean up; reads ignore expired records regardless. Collections,
/// `$jsonSchema` validators and indexes are created idempotently at ``connect(connectionString:database:collectionPrefix:)``
/// from the JSON files in schemas/mongodb/. Every blocking libmongoc call runs on NIO's thread
/// pool, never on the caller's executor.
public final class MongoAttestationStore: StepwiseAttestationStore, Sendable {
    let pool: MongoClientPool
    private let keys: String
    private let challenges: String
    private let formHashes: String
    private let rateLimits: String
    private let passkeys: String
    /// The shared evidence log's batches and key registrations (``SharedLogStore``).
    let evidenceLog: String
    let evidenceRegistrations: String
    let evidenceLogStatus: String

    private init(pool: MongoClientPool, collectionPrefix: String) {
        self.pool = pool
        self.keys = collectionPrefix + "keys"
        self.challenges = collectionPrefix + "challenges"
        self.formHashes = collectionPrefix + "form_hashes"
        self.rateLimits = collectionPrefix + "rate_limits"
        self.passkeys = collectionPrefix + "passkeys"
        self.evidenceLog = collectionPrefix + "evidence_log"
        self.evidenceRegistrations = collectionPrefix + "evidence_registrations"
        self.evidenceLogStatus = collectionPrefix + "evidence_log_status"
    }

    /// Connects, checks that the server answers, and creates collections, validators and indexes.
    ///
    /// - Parameters:
    ///   - connectionString: a standard MongoDB URI (`mongodb://` or `mongodb+srv://`); TLS
    ///     options go in it.
    ///   - database: the database; default: the URI's, else `formattest`.
    ///   - collectionPrefix: prefix of the three collections. Default `formattest_`.
    /// - Throws: `StoreError.Code.unavailable` when the server cannot be reached or set up.
    public static func connect(
        connectionString: String,
        database: String? = nil,
        collectionPrefix: String = "formattest_"
    ) async throws(StoreError) -> MongoAttestationStore {
        let pool: MongoClientPool
        do {
            pool = try MongoClientPool(connectionString: connectionString, database: database)
        } catch {
            throw StoreError(code: .unavailable, reason: error.description)
        }
        let store = MongoAttestationStore(pool: pool, collectionPrefix: collectionPrefix)
        try await store.run { () throws in
            _ = try pool.command(.document([("ping", .int32(1))]))
            for schema in try MongoSchema.load() {
                try schema.apply(to: pool, collection: collectionPrefix + schema.collection)
            }
        }
        return store
    }

    // MARK: - The store protocols

    public func insertKey(_ key: StoredKey) async throws(StoreError) {
        try await self.run { () throws in try self.insertKeyDocument(key) }
    }

    public func loadKey(keyID: [UInt8]) async throws(StoreError) -> StoredKey? {
        try await self.run { () throws -> StoredKey? in
            let reply = try self.pool.command(
                .document([("find", .string(self.keys)), ("filter", .document([("_id", .binary(keyID))])), ("limit", .int32(1))])
            )
            return try CommandReply.firstBatch(reply).first.map(self.key)
        }
    }

    public func advanceCounter(keyID: [UInt8], to counter: UInt32, lastUsed: Date) async throws(StoreError) -> Bool {
        try await self.run { () throws -> Bool in
            if try self.casCounter(keyID: keyID, to: counter, at: lastUsed, formHash: nil) { return true }
            guard try self.keyExists(keyID) else { throw StoreError(code: .unknownKey, reason: "no such keyId") }
            return false
        }
    }

    public func requireReattestation(keyID: [UInt8]) async throws(StoreError) {
        try await self.run { () throws in
            let reply = try self.pool.command(
                .document([
                    ("update", .string(self.keys)),
                    (
                        "updates",
                        .array([
                            .document([
                                ("q", .document([("_id", .binary(keyID))])),
                                ("u", .document([("$set", .document([("reattestationRequired", .bool(true))]))])),
                            ])
                        ])
                    ),
                ])
            )
            guard try CommandReply.count(reply) == 1 else { throw StoreError(code: .unknownKey, reason: "no such keyId") }
        }
    }

    public func keys(username: String) async throws(StoreError) -> [StoredKey] {
        try await self.run { () throws -> [StoredKey] in
            let reply = try self.pool.command(
                .document([
                    ("find", .string(self.keys)), ("filter", .document([("username", .string(username))])),
                    ("sort", .document([("createdAt", .int32(1)), ("_id", .int32(1))])), ("limit", .int32(10_000)),
                ])
            )
            return try CommandReply.firstBatch(reply).map(self.key)
        }
    }

    public func countKeys(username: String, _ filter: KeyCountFilter) async throws(StoreError) -> Int {
        var query: [(String, BSONValue)] = [("username", .string(username))]
        switch filter {
        case .all: break
        case .active:
            query += [("revokedAt", .document([("$exists", .bool(false))])), ("reattestationRequired", .document([("$ne", .bool(true))]))]
        case .createdSince(let date): query.append(("createdAt", .document([("$gte", .date(date))])))
        }
        let command = BSONValue.document([("count", .string(self.keys)), ("query", .document(query))])
        return try await self.run { () throws -> Int in
            // The server counts (by the username index); no document, and so no blob, is sent.
            let reply = try self.pool.command(command)
            return try CommandReply.count(reply)
        }
    }

    public func keys(username: String, after position: KeyPosition?, limit: Int) async throws(StoreError) -> [StoredKey] {
        var filter: [(String, BSONValue)] = [("username", .string(username))]
        if let position {
            filter.append(
                (
                    "$or",
                    .array([
                        .document([("createdAt", .document([("$gt", .date(position.createdAt))]))]),
                        .document([("createdAt", .date(position.createdAt)), ("_id", .document([("$gt", .binary(position.keyID))]))]),
                    ])
                ))
        }
        let limit = Int32(clamping: max(limit, 0))
        guard limit > 0 else { return [] }
        let command = BSONValue.document([
            ("find", .string(self.keys)), ("filter", .document(filter)),
            ("sort", .document([("createdAt", .int32(1)), ("_id", .int32(1))])), ("limit", .int32(limit)), ("batchSize", .int32(limit)),
        ])
        return try await self.run { () throws -> [StoredKey] in
            let reply = try self.pool.command(command)
            return try CommandReply.firstBatch(reply).map(self.key)
        }
    }

    public func revokeKey(keyID: [UInt8], at date: Date) async throws(StoreError) {
        try await self.run { () throws in
            // Only an active key takes the time; an already revoked one keeps its first.
            _ = try self.pool.command(
                .document([
                    ("update", .string(self.keys)),
                    (
                        "updates",
                        .array([
                            .document([
                                ("q", .document([("_id", .binary(keyID)), ("revokedAt", .document([("$exists", .bool(false))]))])),
                                ("u", .document([("$set", .document([("revokedAt", .date(date))]))])),
                            ])
                        ])
                    ),
                ])
            )
            guard try self.keyExists(keyID) else { throw StoreError(code: .unknownKey, reason: "no such keyId") }
        }
    }

    public func countRequest(in window: RateLimitWindow) async throws(StoreError) -> Int {
        let id = Self.windowID(window)
        return try await self.run { () throws -> Int in
            do {
                return try self.incrementWindow(id, expiresAt: window.expiresAt)
            } catch let error as MongoError where error.isDuplicateKey {
                // Two first requests raced to insert the window: the loser's upsert failed on the
                // unique _id; now the document exists, and the retry is a plain increment.
                return try self.incrementWindow(id, expiresAt: window.expiresAt)
            }
        }
    }

    public func refundRequest(in window: RateLimitWindow) async throws(StoreError) {
        let id = Self.windowID(window)
        try await self.run { () throws in
            // One conditional update: never below zero, and a window that is gone stays gone.
            let reply = try self.pool.command(
                .document([
                    ("update", .string(self.rateLimits)),
                    (
                        "updates",
                        .array([
                            .document([
                                ("q", .document([("_id", .binary(id)), ("count", .document([("$gt", .int64(0))]))])),
                                ("u", .document([("$inc", .document([("count", .int64(-1))]))])),
                            ])
                        ])
                    ),
                ])
            )
            _ = try CommandReply.count(reply)
        }
    }

    /// A rate-limit window's _id: the window's id, then its start (ms since 1970, 8 bytes big-endian).
    private static func windowID(_ window: RateLimitWindow) -> [UInt8] {
        let milliseconds = UInt64(bitPattern: Int64((window.start.timeIntervalSince1970 * 1000).rounded(.down)))
        return window.id + (0..<8).map { UInt8(truncatingIfNeeded: milliseconds >> (56 - 8 * $0)) }
    }

    /// One findAndModify with upsert: the increment and the read are one atomic step on one
    /// document, across every instance.
    private func incrementWindow(_ id: [UInt8], expiresAt: Date) throws -> Int {
        let reply = try self.pool.command(
            .document([
                ("findAndModify", .string(self.rateLimits)),
                ("query", .document([("_id", .binary(id))])),
                ("update", .document([("$inc", .document([("count", .int64(1))])), ("$setOnInsert", .document([("expiresAt", .date(expiresAt))]))])),
                ("upsert", .bool(true)),
                ("new", .bool(true)),
            ])
        )
        guard let value = try CommandReply.value(reply) else {
            throw StoreError(code: .unavailable, reason: "findAndModify returned no rate-limit document")
        }
        let window = try StoredDocument(value, kind: "rate-limit window", collection: self.rateLimits)
        return try window.required("count", window.count)
    }

    public func replaceReceipt(keyID: [UInt8], previous: [UInt8], with receipt: [UInt8]) async throws(StoreError) -> Bool {
        try await self.run { () throws -> Bool in
            let reply = try self.pool.command(
                .document([
                    ("findAndModify", .string(self.keys)),
                    ("query", .document([("_id", .binary(keyID)), ("receipt", .binary(previous))])),
                    ("update", .document([("$set", .document([("receipt", .binary(receipt))]))])),
                    ("new", .bool(true)),
                ])
            )
            if try CommandReply.value(reply) != nil { return true }
            guard try self.keyExists(keyID) else { throw StoreError(code: .unknownKey, reason: "no such keyId") }
            return false
        }
    }

    public func issueChallenge(_ challenge: IssuedChallenge) async throws(StoreError) {
        try await self.run { () throws in
            do {
                _ = try self.pool.command(
                    .document([
                        ("insert", .string(self.challenges)),
                        (
                            "documents",
                            .array([
                                Self.challengeDocument(challenge)
                            ])
                        ),
                    ])
                )
            } catch let error as MongoError where error.isDuplicateKey {
                throw StoreError(code: .duplicateChallenge, reason: "the challenge value was issued before")
            }
        }
    }

    /// A new challenge's document (the challenges collection's one shape).
    private static func challengeDocument(_ challenge: IssuedChallenge) -> BSONValue {
        .document([
            ("_id", .binary(challenge.value)),
            ("purpose", .string(challenge.purpose.rawValue)),
            ("username", challenge.username.map(BSONValue.string) ?? .null),
            ("issuedAt", .date(challenge.issuedAt)),
            ("expiresAt", .date(challenge.expiresAt)),
            ("used", .bool(false)),
        ])
    }

    public func consumeChallenge(_ claim: ChallengeClaim, now: Date) async throws(StoreError) {
        try await self.run { () throws in
            guard try self.consume(claim, now: now, commitID: Self.commitID()) else { throw Self.challengeInvalid }
        }
    }

    public func recordFormHash(_ record: ReplayRecord, now: Date) async throws(StoreError) {
        try await self.run { () throws in
            try self.record(record, now: now, commitID: Self.commitID())
        }
    }

    public func isFormHashRecorded(_ formHash: [UInt8], now: Date) async throws(StoreError) -> Bool {
        try await self.run { () throws -> Bool in
            let reply = try self.pool.command(
                .document([
                    ("find", .string(self.formHashes)), ("filter", .document([("_id", .binary(formHash))])),
                    ("projection", .document([("expiresAt", .int32(1))])), ("limit", .int32(1)),
                ])
            )
            // Read by hash alone and the expiry compared here: a record whose expiresAt is not a
            // date (a corrupt or foreign document) fails closed instead of reading as absent, as
            // an `expiresAt > now` filter would (MongoDB compares only values of one type).
            guard let value = try CommandReply.firstBatch(reply).first else { return false }
            let record = try StoredDocument(value, kind: "replay record", collection: self.formHashes)
            let expiresAt = try record.required("expiresAt", record.date)
            return BSONValue.milliseconds(expiresAt) > BSONValue.milliseconds(now)
        }
    }

    public func commitRegistration(_ commit: RegistrationCommit) async throws(StoreError) {
        try await self.run { () throws in
            let id = Self.commitID()
            try self.applyInOrder(claims: commit.challenges, replay: commit.replay, now: commit.now, commitID: id) { () throws in
                try self.insertKeyDocument(commit.key)
            }
            if let limit = commit.maximumActiveKeys {
                try self.revokeBeyond(limit, username: commit.key.username, keeping: commit.key.keyID, at: commit.now, in: self.keys, kind: "key")
            }
        }
    }

    /// After a registration (the decisive write): revokes the user's least recently used active
    /// keys (or passkeys: `collection`) beyond `limit`, the new one kept. Idempotent; a failure
    /// here leaves one too many active until the next registration, never one revoked wrongly.
    private func revokeBeyond(_ limit: Int, username: String, keeping keyID: [UInt8], at date: Date, in collection: String, kind: String) throws {
        let reply = try self.pool.command(
            .document([
                ("find", .string(collection)),
                (
                    "filter",
                    .document([
                        ("username", .string(username)), ("revokedAt", .document([("$exists", .bool(false))])),
                        ("_id", .document([("$ne", .binary(keyID))])),
                    ])
                ),
                ("sort", .document([("lastUsed", .int32(-1)), ("createdAt", .int32(-1)), ("_id", .int32(-1))])),
                ("skip", .int32(Int32(clamping: max(limit - 1, 0)))),
                ("projection", .document([("_id", .int32(1))])),
                ("limit", .int32(1000)),
            ])
        )
        let ids = try CommandReply.firstBatch(reply).map { try self.id(of: $0, kind: kind, collection: collection) }
        guard !ids.isEmpty else { return }
        _ = try self.pool.command(
            .document([
                ("update", .string(collection)),
                (
                    "updates",
                    .array([
                        .document([
                            (
                                "q",
                                .document([
                                    ("_id", .document([("$in", .array(ids.map { .binary($0) }))])),
                                    ("revokedAt", .document([("$exists", .bool(false))])),
                                ])
                            ),
                            ("u", .document([("$set", .document([("revokedAt", .date(date))]))])),
                            ("multi", .bool(true)),
                        ])
                    ])
                ),
            ])
        )
    }

    public func commitAssertion(_ commit: AssertionCommit) async throws(StoreError) {
        guard commit.keyID != nil || commit.passkey != nil else {
            throw StoreError(code: .unknownKey, reason: "the commit names neither a key nor a passkey")
        }
        try await self.run { () throws in
            let id = Self.commitID()
            try self.applyInOrder(claims: commit.challenges, replay: commit.replay, now: commit.now, commitID: id) { () throws in
                // The passkey's compare-and-set first, then the key's (the decision): when the
                // key's fails, the passkey's document is put back as it was.
                var previous: StoredDocument?
                if let use = commit.passkey {
                    previous = try self.casSignCount(use, at: commit.now, commitID: id)
                }
                guard let keyID = commit.keyID else { return }
                do {
                    // Not revoked since the flows loaded it: the revocation is part of the compare-and-set.
                    guard
                        try self.casCounter(
                            keyID: keyID, to: commit.counter, at: commit.now, formHash: commit.replay.formHash, signals: commit.signals,
                            activeOnly: true)
                    else {
                        guard let revoked = try self.revoked(keyID, collection: self.keys, kind: "key") else {
                            throw StoreError(code: .unknownKey, reason: "no such keyId")
                        }
                        throw revoked
                            ? StoreError(code: .keyRevoked, reason: "the key was revoked")
                            : StoreError(code: .staleCounter, reason: "counter \(commit.counter) is not above the stored one")
                    }
                } catch {
                    if let use = commit.passkey, let previous { try? self.restoreSignCount(use, previous: previous, commitID: id) }
                    throw error
                }
            }
        }
    }

    // MARK: - Passkeys

    public func loadPasskey(credentialID: [UInt8]) async throws(StoreError) -> StoredPasskey? {
        try await self.findPasskeys(filter: [("_id", .binary(credentialID))], limit: 1).first
    }

    public func passkeys(username: String) async throws(StoreError) -> [StoredPasskey] {
        try await self.findPasskeys(filter: [("username", .string(username))], limit: 10_000)
    }

    public func passkeys(username: String, after position: KeyPosition?, limit: Int) async throws(StoreError) -> [StoredPasskey] {
        var filter: [(String, BSONValue)] = [("username", .string(username))]
        if let position {
            filter.append(
                (
                    "$or",
                    .array([
                        .document([("createdAt", .document([("$gt", .date(position.createdAt))]))]),
                        .document([("createdAt", .date(position.createdAt)), ("_id", .document([("$gt", .binary(position.keyID))]))]),
                    ])
                ))
        }
        let limit = Int32(clamping: max(limit, 0))
        guard limit > 0 else { return [] }
        return try await self.findPasskeys(filter: filter, limit: limit)
    }

    public func passkeyCredentials(username: String) async throws(StoreError) -> PasskeyCredentials {
        // Projected to the fields needed: no registration blob is sent.
        func find(_ filter: [(String, BSONValue)], field: String, limit: Int) -> BSONValue {
            .document([
                ("find", .string(self.passkeys)), ("filter", .document(filter)),
                ("sort", .document([("createdAt", .int32(1)), ("_id", .int32(1))])),
                ("projection", .document([(field, .int32(1))])), ("limit", .int32(Int32(limit))), ("batchSize", .int32(Int32(limit))),
            ])
        }
        let first = find([("username", .string(username))], field: "userHandle", limit: 1)
        let active = find(
            [("username", .string(username)), ("revokedAt", .document([("$exists", .bool(false))]))], field: "_id",
            limit: PasskeyCredentials.maximumActive)
        return try await self.run { () throws -> PasskeyCredentials in
            let handle = try CommandReply.firstBatch(try self.pool.command(first)).first.map { value throws(StoreError) -> [UInt8] in
                let document = try StoredDocument(value, kind: "passkey", collection: self.passkeys)
                return try document.required("userHandle", document.binary)
            }
            let ids = try CommandReply.firstBatch(try self.pool.command(active)).map {
                try self.id(of: $0, kind: "passkey", collection: self.passkeys)
            }
            return PasskeyCredentials(userHandle: handle, activeCredentialIDs: ids)
        }
    }

    public func countPasskeys(username: String, _ filter: KeyCountFilter) async throws(StoreError) -> Int {
        var query: [(String, BSONValue)] = [("username", .string(username))]
        switch filter {
        case .all: break
        case .active: query.append(("revokedAt", .document([("$exists", .bool(false))])))
        case .createdSince(let date): query.append(("createdAt", .document([("$gte", .date(date))])))
        }
        let command = BSONValue.document([("count", .string(self.passkeys)), ("query", .document(query))])
        return try await self.run { () throws -> Int in
            // The server counts; no document, and so no registration blob, is sent.
            let reply = try self.pool.command(command)
            return try CommandReply.count(reply)
        }
    }

    public func revokePasskey(credentialID: [UInt8], at date: Date) async throws(StoreError) {
        try await self.run { () throws in
            // Only an active passkey takes the time; an already revoked one keeps its first.
            _ = try self.pool.command(
                .document([
                    ("update", .string(self.passkeys)),
                    (
                        "updates",
                        .array([
                            .document([
                                ("q", .document([("_id", .binary(credentialID)), ("revokedAt", .document([("$exists", .bool(false))]))])),
                                ("u", .document([("$set", .document([("revokedAt", .date(date))]))])),
                            ])
                        ])
                    ),
                ])
            )
            guard try self.revoked(credentialID, collection: self.passkeys, kind: "passkey") != nil else {
                throw StoreError(code: .unknownKey, reason: "no such passkey")
            }
        }
    }

    public func commitPasskeyRegistration(_ commit: PasskeyRegistrationCommit) async throws(StoreError) {
        try await self.run { () throws in
            let id = Self.commitID()
            var consumed: [ChallengeClaim] = []
            do {
                for claim in commit.challenges {
                    guard try self.consume(claim, now: commit.now, commitID: id) else { throw Self.challengeInvalid }
                    consumed.append(claim)
                }
                try self.insertPasskeyDocument(commit.passkey)
            } catch {
                for claim in consumed { try? self.unconsume(claim, commitID: id) }
                throw error
            }
            // A first passkey, checked after its insert: of two first registrations racing, one
            // that finds the other (or any active passkey, or one of another handle) takes itself
            // back. The later insert always finds the earlier, so at most one stays; when each
            // finds the other, neither does, and the user registers again (fails closed).
            if commit.firstPasskey, try self.hasOtherPasskey(commit.passkey) {
                try self.deletePasskeyDocument(commit.passkey.credentialID)
                for claim in consumed { try? self.unconsume(claim, commitID: id) }
                throw StoreError(code: .passkeyExists, reason: "the user has a passkey registered since this one was checked")
            }
            if let limit = commit.maximumActiveCredentials {
                try self.revokeBeyond(
                    limit, username: commit.passkey.username, keeping: commit.passkey.credentialID, at: commit.now, in: self.passkeys, kind: "passkey"
                )
            }
        }
    }

    private func findPasskeys(filter: [(String, BSONValue)], limit: Int32) async throws(StoreError) -> [StoredPasskey] {
        let command = BSONValue.document([
            ("find", .string(self.passkeys)), ("filter", .document(filter)),
            ("sort", .document([("createdAt", .int32(1)), ("_id", .int32(1))])), ("limit", .int32(limit)), ("batchSize", .int32(limit)),
        ])
        return try await self.run { () throws -> [StoredPasskey] in
            let reply = try self.pool.command(command)
            return try CommandReply.firstBatch(reply).map(self.passkey)
        }
    }

    /// Whether the user of `passkey` has another passkey that is active or of another user handle.
    private func hasOtherPasskey(_ passkey: StoredPasskey) throws -> Bool {
        let filter: [(String, BSONValue)] = [
            ("username", .string(passkey.username)), ("_id", .document([("$ne", .binary(passkey.credentialID))])),
            (
                "$or",
                .array([
                    .document([("revokedAt", .document([("$exists", .bool(false))]))]),
                    .document([("userHandle", .document([("$ne", .binary(passkey.userHandle))]))]),
                ])
            ),
        ]
        let reply = try self.pool.command(
            .document([
                ("find", .string(self.passkeys)), ("filter", .document(filter)), ("projection", .document([("_id", .int32(1))])),
                ("limit", .int32(1)), ("batchSize", .int32(1)),
            ]))
        return try !CommandReply.firstBatch(reply).isEmpty
    }

    private func deletePasskeyDocument(_ credentialID: [UInt8]) throws {
        _ = try self.pool.command(
            .document([
                ("delete", .string(self.passkeys)),
                ("deletes", .array([.document([("q", .document([("_id", .binary(credentialID))])), ("limit", .int32(1))])])),
            ]))
    }

    private func insertPasskeyDocument(_ passkey: StoredPasskey) throws {
        var fields: [(String, BSONValue)] =
            [
                ("_id", .binary(passkey.credentialID)), ("username", .string(passkey.username)), ("userHandle", .binary(passkey.userHandle)),
                ("publicKey", .binary(passkey.publicKey)), ("signCount", .int64(Int64(passkey.signCount))),
                ("backupEligible", .bool(passkey.backupEligible)), ("backedUp", .bool(passkey.backedUp)), ("aaguid", .binary(passkey.aaguid)),
                ("transports", .array(passkey.transports.map(BSONValue.string))), ("format", .string(passkey.format)),
                ("createdAt", .date(passkey.createdAt)), ("lastUsed", .date(passkey.lastUsed)),
            ] + Self.optionalDate("revokedAt", passkey.revokedAt)
        if let registration = passkey.registration {
            fields.append(
                (
                    "registration",
                    .document([
                        ("attestationObject", .binary(registration.attestationObject)), ("clientDataJSON", .binary(registration.clientDataJSON)),
                    ])
                ))
        }
        let command = BSONValue.document([("insert", .string(self.passkeys)), ("documents", .array([.document(fields)]))])
        do {
            _ = try self.pool.command(command)
        } catch {
            guard error.isDuplicateKey else { throw error }
            throw StoreError(code: .duplicateKey, reason: "the credential id is registered")
        }
    }

    /// The sign count's compare-and-set: one findAndModify on the count the assertion was
    /// verified against. Returns the document as it was (for ``restoreSignCount(_:previous:commitID:)``).
    private func casSignCount(_ use: PasskeyUse, at date: Date, commitID: String) throws -> StoredDocument {
        let reply = try self.pool.command(
            .document([
                ("findAndModify", .string(self.passkeys)),
                // Not revoked since the flows loaded it: the revocation is part of the compare-and-set.
                (
                    "query",
                    .document([
                        ("_id", .binary(use.credentialID)), ("signCount", .int64(Int64(use.previousSignCount))),
                        ("revokedAt", .document([("$exists", .bool(false))])),
                    ])
                ),
                (
                    "update",
                    .document([
                        (
                            "$set",
                            .document([
                                ("signCount", .int64(Int64(use.signCount))), ("backedUp", .bool(use.backedUp)), ("lastUsed", .date(date)),
                                ("commit", .string(commitID)),
                            ])
                        )
                    ])
                ),
                ("new", .bool(false)),
            ])
        )
        guard let previous = try CommandReply.value(reply) else {
            guard let revoked = try self.revoked(use.credentialID, collection: self.passkeys, kind: "passkey") else {
                throw StoreError(code: .unknownKey, reason: "no such passkey")
            }
            throw revoked
                ? StoreError(code: .revoked, reason: "the passkey was revoked")
                : StoreError(code: .staleCounter, reason: "the passkey's sign count is no longer \(use.previousSignCount)")
        }
        return try StoredDocument(previous, kind: "passkey", collection: self.passkeys)
    }

    /// Undoes this commit's ``casSignCount(_:at:commitID:)`` (only while no later commit moved it).
    private func restoreSignCount(_ use: PasskeyUse, previous: StoredDocument, commitID: String) throws {
        let backedUp = try previous.required("backedUp", previous.bool)
        let lastUsed = try previous.required("lastUsed", previous.date)
        _ = try self.pool.command(
            .document([
                ("update", .string(self.passkeys)),
                (
                    "updates",
                    .array([
                        .document([
                            ("q", .document([("_id", .binary(use.credentialID)), ("commit", .string(commitID))])),
                            (
                                "u",
                                .document([
                                    (
                                        "$set",
                                        .document([
                                            ("signCount", .int64(Int64(use.previousSignCount))), ("backedUp", .bool(backedUp)),
                                            ("lastUsed", .date(lastUsed)),
                                        ])
                                    ), ("$unset", .document([("commit", .string(""))])),
                                ])
                            ),
                        ])
                    ])
                ),
            ])
        )
    }

    /// Whether a document of `collection` (keys or passkeys) has this id, and whether it is revoked (`nil`: none has it).
    private func revoked(_ id: [UInt8], collection: String, kind: String) throws -> Bool? {
        let reply = try self.pool.command(
            .document([
                ("find", .string(collection)), ("filter", .document([("_id", .binary(id))])),
                ("projection", .document([("revokedAt", .int32(1))])), ("limit", .int32(1)),
            ])
        )
        guard let value = try CommandReply.firstBatch(reply).first else { return nil }
        let document = try StoredDocument(value, kind: kind, collection: collection)
        return try document.date("revokedAt") != nil
    }

    /// A document as a passkey. Fails closed: a missing or mistyped field, or a sign count
    /// beyond 32 bits, is ``StoreError/Code/unavailable``, never a default.
    private func passkey(_ value: BSONValue) throws(StoreError) -> StoredPasskey {
        let document = try StoredDocument(value, kind: "passkey", collection: self.passkeys)
        var registration: PasskeyRegistrationRecord?
        if let record = try document.document("registration") {
            registration = PasskeyRegistrationRecord(
                attestationObject: try record.required("attestationObject", record.binary),
                clientDataJSON: try record.required("clientDataJSON", record.binary)
            )
        }
        return StoredPasskey(
            credentialID: try document.required("_id", document.binary), username: try document.required("username", document.string),
            userHandle: try document.required("userHandle", document.binary), publicKey: try document.required("publicKey", document.binary),
            signCount: try document.required("signCount", document.uint32),
            backupEligible: try document.required("backupEligible", document.bool), backedUp: try document.required("backedUp", document.bool),
            aaguid: try document.required("aaguid", document.binary), transports: try document.required("transports", document.strings),
            format: try document.required("format", document.string), createdAt: try document.required("createdAt", document.date),
            lastUsed: try document.required("lastUsed", document.date), revokedAt: try document.date("revokedAt"), registration: registration
        )
    }

    public func purgeExpired(now: Date, limit: Int) async throws(StoreError) -> PurgeStep {
        // The TTL indexes on `expiresAt` do this work on the server in the background; this is
        // the bounded fallback (a TTL monitor that lags, or one that is off). Each collection's
        // oldest expired ids are found through its TTL index and deleted by id, never with an
        // unbounded multi-document delete; the delete repeats the expiry condition, so a record
        // taken over in between (a form hash re-recorded) is not deleted.
        let limit = max(limit, 1)
        return try await self.run { () throws -> PurgeStep in
            let started = ContinuousClock.now
            var removed = 0
            for (collection, kind) in [(self.challenges, "challenge"), (self.formHashes, "replay record"), (self.rateLimits, "rate-limit window")]
            where removed < limit {
                removed += try self.deleteOldest(collection, kind: kind, field: "expiresAt", atOrBefore: now, limit: limit - removed)
            }
            // Oldest expiry first: a step short of its limit left nothing expired as of `now`.
            return PurgeStep(deleted: removed, duration: started.duration(to: .now), complete: removed < limit)
        }
    }

    public func purgeRevoked(before cutoff: Date, limit: Int) async throws(StoreError) -> PurgeStep {
        // Oldest revocation first through each collection's revokedAt index, deleted by id (the
        // registration's blobs are in the document) with the revocation repeated in the delete:
        // nothing but a revoked document is ever deleted.
        let limit = max(limit, 1)
        return try await self.run { () throws -> PurgeStep in
            let started = ContinuousClock.now
            var removed = 0
            for (collection, kind) in [(self.keys, "key"), (self.passkeys, "passkey")] where removed < limit {
                removed += try self.deleteOldest(collection, kind: kind, field: "revokedAt", atOrBefore: cutoff, limit: limit - removed)
            }
            return PurgeStep(deleted: removed, duration: started.duration(to: .now), complete: removed < limit)
        }
    }

    /// One bounded step of a purge: the ids of at most `limit` documents whose `field` is at or
    /// before `bound`, oldest first through the field's index (one field: the schema files' keys
    /// are read in sorted order, so an index has no `_id` before it), then a delete by those ids
    /// that repeats the condition. Returns how many were deleted.
    private func deleteOldest(_ collection: String, kind: String, field: String, atOrBefore bound: Date, limit: Int) throws -> Int {
        let condition: BSONValue = .document([("$lte", .date(bound))])
        let reply = try self.pool.command(
            .document([
                ("find", .string(collection)),
                ("filter", .document([(field, condition)])),
                ("sort", .document([(field, .int32(1))])),
                ("projection", .document([("_id", .int32(1))])),
                ("limit", .int32(Int32(clamping: limit))),
                ("batchSize", .int32(Int32(clamping: limit))),
            ])
        )
        let ids = try CommandReply.firstBatch(reply).map { BSONValue.binary(try self.id(of: $0, kind: kind, collection: collection)) }
        guard !ids.isEmpty else { return 0 }
        let deleted = try self.pool.command(
            .document([
                ("delete", .string(collection)),
                (
                    "deletes",
                    .array([
                        .document([("q", .document([("_id", .document([("$in", .array(ids))])), (field, condition)])), ("limit", .int32(0))])
                    ])
                ),
            ])
        )
        return try CommandReply.count(deleted)
    }

    public func shutdown() async {
        do {
            try await NIOThreadPool.singleton.runIfActive { self.pool.close() }
        } catch {
            // The thread pool is gone (the process is ending): close here, blocking.
            self.pool.close()
        }
    }

    // MARK: - Commit ordering and compensation

    /// Consumes the claims, records the replay, then runs `decide`; undoes what was done when a
    /// later step fails.
    private func applyInOrder(
        claims: [ChallengeClaim],
        replay: ReplayRecord,
        now: Date,
        commitID: String,
        decide: () throws -> Void
    ) throws {
        var consumed: [ChallengeClaim] = []
        var recorded = false
        do {
            for claim in claims {
                guard try self.consume(claim, now: now, commitID: commitID) else { throw Self.challengeInvalid }
                consumed.append(claim)
            }
            try self.record(replay, now: now, commitID: commitID)
            recorded = true
            try decide()
        } catch {
            // Best effort: if MongoDB fails now too, the leftovers only ever refuse (fail closed).
            if recorded { try? self.unrecord(replay, commitID: commitID) }
            for claim in consumed { try? self.unconsume(claim, commitID: commitID) }
            throw error
        }
    }

    private func consume(_ claim: ChallengeClaim, now: Date, commitID: String) throws -> Bool {
        let user: BSONValue = .document([("$in", .array([.null, claim.username.map(BSONValue.string) ?? .null]))])
        let reply = try self.pool.command(
            .document([
                ("findAndModify", .string(self.challenges)),
                (
                    "query",
                    .document([
                        ("_id", .binary(claim.value)), ("used", .bool(false)), ("purpose", .string(claim.purpose.rawValue)),
                        ("expiresAt", .document([("$gt", .date(now))])), ("username", user),
                    ])
                ),
                ("update", .document([("$set", .document([("used", .bool(true)), ("usedBy", .string(commitID))]))])),
                ("new", .bool(true)),
            ])
        )
        return try CommandReply.value(reply) != nil
    }

    private func unconsume(_ claim: ChallengeClaim, commitID: String) throws {
        _ = try self.pool.command(
            .document([
                ("update", .string(self.challenges)),
                (
                    "updates",
                    .array([
                        .document([
                            ("q", .document([("_id", .binary(claim.value)), ("usedBy", .string(commitID))])),
                            ("u", .document([("$set", .document([("used", .bool(false))])), ("$unset", .document([("usedBy", .string(""))]))])),
                        ])
                    ])
                ),
            ])
        )
    }

    private func record(_ record: ReplayRecord, now: Date, commitID: String) throws {
        do {
            // Matches only an expired record with this hash; otherwise the upsert inserts, and an
            // unexpired record makes that insert a duplicate key.
            _ = try self.pool.command(
                .document([
                    ("update", .string(self.formHashes)),
                    (
                        "updates",
                        .array([
                            .document([
                                ("q", .document([("_id", .binary(record.formHash)), ("expiresAt", .document([("$lte", .date(now))]))])),
                                ("u", .document([("$set", .document([("expiresAt", .date(record.expiresAt)), ("commit", .string(commitID))]))])),
                                ("upsert", .bool(true)),
                            ])
                        ])
                    ),
                ])
            )
        } catch  where error.isDuplicateKey {
            throw StoreError(code: .replay, reason: "this form was accepted before")
        }
    }

    private func unrecord(_ record: ReplayRecord, commitID: String) throws {
        _ = try self.pool.command(
            .document([
                ("delete", .string(self.formHashes)),
                (
                    "deletes",
                    .array([.document([("q", .document([("_id", .binary(record.formHash)), ("commit", .string(commitID))])), ("limit", .int32(1))])])
                ),
            ])
        )
    }

    /// Benchmarks and tests only (`formattest-dev simulate backlog`): stores `keys`,
    /// `replayRecords`, `challenges` and one request in each of `rateLimitWindows`, as the
    /// documents ``insertKey(_:)``, ``recordFormHash(_:now:)``, ``issueChallenge(_:)`` and
    /// ``countRequest(in:)`` write (built by the same functions), with one ordered `insert`
    /// command (insertMany) per ``backlogCommandSize`` documents instead of one command a row.
    /// Rows must be new: a duplicate `_id` stops the batch there with the single write's error
    /// (the documents before it stay: no transaction spans a batch here). The replay records
    /// carry no commit id (none is ever compensated).
    package func insertBacklog(
        keys: [StoredKey] = [],
        replayRecords: [ReplayRecord] = [],
        challenges: [IssuedChallenge] = [],
        rateLimitWindows: [RateLimitWindow] = [],
        now: Date
    ) async throws(StoreError) {
        try await self.run { () throws in
            try self.insertMany(
                self.keys,
                keys.map { .document(Self.keyFields($0)) },
                duplicate: StoreError(code: .duplicateKey, reason: "the keyId is registered")
            )
            try self.insertMany(
                self.formHashes,
                replayRecords.map { .document([("_id", .binary($0.formHash)), ("expiresAt", .date($0.expiresAt))]) },
                duplicate: StoreError(code: .replay, reason: "this form was accepted before")
            )
            try self.insertMany(
                self.challenges,
                challenges.map(Self.challengeDocument),
                duplicate: StoreError(code: .duplicateChallenge, reason: "the challenge value was issued before")
            )
            try self.insertMany(
                self.rateLimits,
                rateLimitWindows.map {
                    .document([("_id", .binary(Self.windowID($0))), ("count", .int64(1)), ("expiresAt", .date($0.expiresAt))])
                },
                duplicate: StoreError(code: .unavailable, reason: "the rate-limit window was stored before")
            )
        }
    }

    /// Documents per `insert` command of ``insertBacklog(keys:replayRecords:challenges:rateLimitWindows:now:)``:
    /// a key with its registration blobs is about 7 KB, so 500 stay far below MongoDB's 16 MB command.
    package static let backlogCommandSize = 500

    private func insertMany(_ collection: String, _ documents: [BSONValue], duplicate: StoreError) throws {
        var start = 0
        while start < documents.count {
            let end = min(start + Self.backlogCommandSize, documents.count)
            let command = BSONValue.document([
                ("insert", .string(collection)), ("documents", .array(Array(documents[start..<end]))), ("ordered", .bool(true)),
            ])
            // A plain catch, as in insertKeyDocument (Swift 6.3.1's SILGen and `catch where`).
            do {
                _ = try self.pool.command(command)
            } catch {
                guard error.isDuplicateKey else { throw error }
                throw duplicate
            }
            start = end
        }
    }

    /// Tests only: inserts `key` with `environment` as its stored environment, past the
    /// collection's validator: a document FormAttest itself never writes, to show that reading it
    /// back fails closed.
    package func insertKey(_ key: StoredKey, storingEnvironmentAs environment: String) async throws(StoreError) {
        try await self.run { () throws in try self.insertKeyDocument(key, storingEnvironmentAs: environment) }
    }

    /// Tests only: a collection ``overwriteForTesting(_:id:field:with:)`` writes to.
    package enum TestCollection: Sendable {
        case keys, passkeys, formHashes, evidenceRegistrations
        /// `id` is the batch's first index (`_id`), eight bytes big-endian.
        case evidenceLog
    }

    /// Tests only: a value ``overwriteForTesting(_:id:field:with:)`` writes, or `absent` to remove
    /// the field.
    package enum TestValue: Sendable {
        case string(String)
        case int64(Int64)
        case absent
    }

    /// Tests only: sets or removes one field (a dotted path reaches into a nested document) of the
    /// document whose `_id` is `id`, past the collection's validator: a document FormAttest itself
    /// never writes, to show that reading it back fails closed.
    package func overwriteForTesting(_ collection: TestCollection, id: [UInt8], field: String, with value: TestValue) async throws(StoreError) {
        let name =
            switch collection {
            case .keys: self.keys
            case .passkeys: self.passkeys
            case .formHashes: self.formHashes
            case .evidenceRegistrations: self.evidenceRegistrations
            case .evidenceLog: self.evidenceLog
            }
        let key: BSONValue =
            collection == .evidenceLog ? .int64(id.reduce(0) { $0 << 8 | Int64($1) }) : .binary(id)
        let update: BSONValue =
            switch value {
            case .string(let string): .document([("$set", .document([(field, .string(string))]))])
            case .int64(let integer): .document([("$set", .document([(field, .int64(integer))]))])
            case .absent: .document([("$unset", .document([(field, .string(""))]))])
            }
        try await self.run { () throws in
            let reply = try self.pool.command(
                .document([
                    ("update", .string(name)), ("updates", .array([.document([("q", .document([("_id", key)])), ("u", update)])])),
                    ("bypassDocumentValidation", .bool(true)),
                ])
            )
            guard try CommandReply.count(reply) == 1 else { throw StoreError(code: .unknownKey, reason: "no document with that _id") }
        }
    }

    private func insertKeyDocument(_ key: StoredKey, storingEnvironmentAs rawEnvironment: String? = nil) throws {
        let fields = Self.keyFields(key, storingEnvironmentAs: rawEnvironment)
        let command = BSONValue.document(
            [("insert", .string(self.keys)), ("documents", .array([.document(fields)]))]
                + (rawEnvironment == nil ? [] : [("bypassDocumentValidation", .bool(true))])
        )
        // A plain catch: `catch where` here crashes Swift 6.3.1's SILGen (an ownership error on
        // the typed MongoError) once the document is built before the `do`.
        do {
            _ = try self.pool.command(command)
        } catch {
            guard error.isDuplicateKey else { throw error }
            throw StoreError(code: .duplicateKey, reason: "the keyId is registered")
        }
    }

    /// A key's document (the keys collection's one shape).
    private static func keyFields(_ key: StoredKey, storingEnvironmentAs rawEnvironment: String? = nil) -> [(String, BSONValue)] {
        var fields: [(String, BSONValue)] =
            [
                ("_id", .binary(key.keyID)), ("username", .string(key.username)), ("publicKey", .binary(key.publicKey)),
                ("counter", .int64(Int64(key.counter))), ("appId", .string(key.appID)),
                ("environment", .string(rawEnvironment ?? key.environment.rawValue)),
                ("receipt", .binary(key.receipt)), ("createdAt", .date(key.createdAt)), ("lastUsed", .date(key.lastUsed)),
                ("reattestationRequired", .bool(key.reattestationRequired)),
            ] + Self.optionalDate("revokedAt", key.revokedAt)
        if let signals = key.lastSignals.flatMap(Self.signalsDocument) { fields.append(("lastSignals", signals)) }
        if let attestation = key.attestation {
            fields.append(
                ("attestation", .document([("object", .binary(attestation.object)), ("clientDataHash", .binary(attestation.clientDataHash))])))
        }
        if let hash = key.counterFormHash { fields.append(("counterFormHash", .binary(hash))) }
        return fields
    }

    /// `activeOnly`: an assertion's commit, which a key revoked since the flows loaded it must not pass.
    private func casCounter(
        keyID: [UInt8], to counter: UInt32, at date: Date, formHash: [UInt8]?, signals: KeySignals? = nil, activeOnly: Bool = false
    )
        throws -> Bool
    {
        // The form's hash and the signals, when the assertion carried any, are set by the same
        // findAndModify as the counter: one document, all or none.
        var fields: [(String, BSONValue)] = [("counter", .int64(Int64(counter))), ("lastUsed", .date(date))]
        if let document = signals.flatMap(Self.signalsDocument) { fields.append(("lastSignals", document)) }
        var update: [(String, BSONValue)] = []
        if let formHash {
            fields.append(("counterFormHash", .binary(formHash)))
            update = [("$set", .document(fields))]
        } else {
            // A counter moved without a form: the hash of an older counter must not stay beside it.
            update = [("$set", .document(fields)), ("$unset", .document([("counterFormHash", .string(""))]))]
        }
        var query: [(String, BSONValue)] = [("_id", .binary(keyID)), ("counter", .document([("$lt", .int64(Int64(counter)))]))]
        if activeOnly { query.append(("revokedAt", .document([("$exists", .bool(false))]))) }
        let reply = try self.pool.command(
            .document([
                ("findAndModify", .string(self.keys)),
                ("query", .document(query)),
                ("update", .document(update)),
                ("new", .bool(true)),
            ])
        )
        return try CommandReply.value(reply) != nil
    }

    /// `{validationCategory?, bundleVersion?, cdHash?, cdHashType?}`, or `nil` without any signal.
    private static func signalsDocument(_ signals: KeySignals) -> BSONValue? {
        var fields: [(String, BSONValue)] = []
        if let category = signals.validationCategory { fields.append(("validationCategory", .int64(Int64(category)))) }
        if let version = signals.bundleVersion { fields.append(("bundleVersion", .string(version))) }
        if let hash = signals.cdHash { fields.append(("cdHash", .binary(hash))) }
        if let type = signals.cdHashType { fields.append(("cdHashType", .int64(Int64(type)))) }
        return fields.isEmpty ? nil : .document(fields)
    }

    private func keyExists(_ keyID: [UInt8]) throws -> Bool {
        let reply = try self.pool.command(
            .document([("find", .string(self.keys)), ("filter", .document([("_id", .binary(keyID))])), ("limit", .int32(1))])
        )
        return try !CommandReply.firstBatch(reply).isEmpty
    }

    /// A document as a key. Fails closed: a missing required field, a field of another type or a
    /// number out of range (a counter or signal beyond 32 bits: never clamped), or an environment
    /// FormAttest never writes is ``StoreError/Code/unavailable``, never "no such key".
    private func key(_ value: BSONValue) throws(StoreError) -> StoredKey {
        let document = try StoredDocument(value, kind: "key", collection: self.keys)
        let storedEnvironment = try document.required("environment", document.string)
        guard let environment = AppAttestEnvironment(rawValue: storedEnvironment) else {
            throw StoreError(
                code: .unavailable,
                reason: "MongoDB: a stored key's environment is \(storedEnvironment.debugDescription), neither development nor production"
            )
        }
        // Absent until a key's attestation or assertion carries signals; each signal optional.
        var signals: KeySignals?
        if let stored = try document.document("lastSignals") {
            let read = KeySignals(
                validationCategory: try stored.uint32("validationCategory"), bundleVersion: try stored.string("bundleVersion"),
                cdHash: try stored.binary("cdHash"), cdHashType: try stored.uint32("cdHashType")
            )
            signals = read.isEmpty ? nil : read
        }
        // Absent for keys registered before FormAttest kept it; when present, both parts are.
        var attestation: KeyAttestation?
        if let stored = try document.document("attestation") {
            attestation = KeyAttestation(
                object: try stored.required("object", stored.binary), clientDataHash: try stored.required("clientDataHash", stored.binary))
        }
        return StoredKey(
            keyID: try document.required("_id", document.binary), username: try document.required("username", document.string),
            publicKey: try document.required("publicKey", document.binary), counter: try document.required("counter", document.uint32),
            appID: try document.required("appId", document.string), environment: environment,
            receipt: try document.required("receipt", document.binary), createdAt: try document.required("createdAt", document.date),
            lastUsed: try document.required("lastUsed", document.date),
            // Absent in documents written before the field existed: false.
            reattestationRequired: try document.bool("reattestationRequired") ?? false,
            revokedAt: try document.date("revokedAt"),
            lastSignals: signals,
            attestation: attestation,
            // Absent for keys stored before FormAttest kept it, and after a counter moved without a form.
            counterFormHash: try document.binary("counterFormHash")
        )
    }

    /// A document's `_id` (binary: every collection's), from a projection.
    private func id(of value: BSONValue, kind: String, collection: String) throws(StoreError) -> [UInt8] {
        let document = try StoredDocument(value, kind: kind, collection: collection)
        return try document.required("_id", document.binary)
    }

    private static func commitID() -> String { UUID().uuidString }

    /// `[(name, date)]` when there is a date, else nothing: an optional field of a document.
    private static func optionalDate(_ name: String, _ date: Date?) -> [(String, BSONValue)] {
        guard let date else { return [] }
        return [(name, .date(date))]
    }

    private static var challengeInvalid: StoreError {
        StoreError(code: .challengeInvalid, reason: "the challenge is unknown, used, expired, or for another purpose or user")
    }

    // MARK: - Running blocking calls

    /// Runs blocking work on NIO's thread pool: ``StoreError`` outcomes pass through, and any
    /// MongoDB or driver failure becomes ``StoreError/Code/unavailable``.
    func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws(StoreError) -> T {
        do {
            return try await NIOThreadPool.singleton.runIfActive { try work() }
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(code: .unavailable, reason: "\(error)")
        }
    }
}
