//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import FormAttestFlows
import Foundation

/// The evidence log shared by every instance (``SharedLogStore``): a collection of batches, one
/// document each, `_id` the index of the batch's first leaf, claimed by a plain insert (duplicate
/// key 11000: another instance's batch holds it). Inserts wait for a majority of the replica set
/// and reads see only what a majority holds, so a failover never takes back an index an instance
/// was told it holds (which would let two instances' logs fork).
extension MongoAttestationStore: SharedLogStore {
    private static let majority: (String, BSONValue) = ("writeConcern", .document([("w", .string("majority"))]))
    private static let readMajority: (String, BSONValue) = ("readConcern", .document([("level", .string("majority"))]))

    public func insertLogBatch(_ batch: LogBatch) async throws(StoreError) -> Bool {
        guard let first = Int64(exactly: batch.first), let end = Int64(exactly: batch.end), !batch.leaves.isEmpty,
            batch.leaves.reduce(0, { $0 + $1.count }) <= LogBatch.maximumBytes
        else {
            throw StoreError(
                code: .unavailable, reason: "MongoDB: a log batch must start below 2^63 and hold 1 to \(LogBatch.maximumBytes) bytes of leaves")
        }
        let command = BSONValue.document([
            ("insert", .string(self.evidenceLog)),
            (
                "documents",
                .array([
                    .document([
                        ("_id", .int64(first)), ("end", .int64(end)), ("leaves", .array(batch.leaves.map(BSONValue.binary))),
                        ("registrations", .array(batch.registrations.map(BSONValue.binary))), ("rootAfter", .binary(batch.rootAfter)),
                        ("insertedAt", .date(batch.insertedAt)),
                    ])
                ])
            ),
            Self.majority,
        ])
        let pool = self.pool
        return try await self.run { () throws -> Bool in
            do {
                _ = try pool.command(command)
                return true
            } catch let error as MongoError where error.isDuplicateKey {
                return false
            }
        }
    }

    public func takeBackLogBatch(first: UInt64, rootAfter: [UInt8]) async throws(StoreError) -> Bool {
        let command = BSONValue.document([
            ("delete", .string(self.evidenceLog)),
            (
                "deletes",
                .array([
                    .document([
                        ("q", .document([("_id", .int64(Int64(clamping: first))), ("rootAfter", .binary(rootAfter))])), ("limit", .int32(1)),
                    ])
                ])
            ),
            Self.majority,
        ])
        let pool = self.pool
        return try await self.run { () throws -> Bool in try CommandReply.count(try pool.command(command)) == 1 }
    }

    public func logBatches(from first: UInt64, limit: Int) async throws(StoreError) -> [LogBatch] {
        let filter = BSONValue.document([("_id", .document([("$gte", .int64(Int64(clamping: first)))]))])
        return try await self.findLogBatches(filter: filter, ascending: true, limit: max(1, limit))
    }

    public func logBatchExtent(before index: UInt64) async throws(StoreError) -> LogBatchExtent? {
        let filter = BSONValue.document([("_id", .document([("$lt", .int64(Int64(clamping: index)))]))])
        return try await self.findLogBatchExtents(filter: filter, ascending: false, limit: 1).first
    }

    public func logBatchExtents(from first: UInt64, before end: UInt64, limit: Int) async throws(StoreError) -> [LogBatchExtent] {
        let filter = BSONValue.document([
            ("_id", .document([("$gte", .int64(Int64(clamping: first))), ("$lt", .int64(Int64(clamping: end)))]))
        ])
        return try await self.findLogBatchExtents(filter: filter, ascending: true, limit: max(1, limit))
    }

    /// Batches' extents: `_id`, `end` and `rootAfter` only (an index scan of `_id`, no leaves read).
    private func findLogBatchExtents(filter: BSONValue, ascending: Bool, limit: Int) async throws(StoreError) -> [LogBatchExtent] {
        let collection = self.evidenceLog
        let command = BSONValue.document([
            ("find", .string(collection)), ("filter", filter), ("sort", .document([("_id", .int32(ascending ? 1 : -1))])),
            ("projection", .document([("end", .int32(1)), ("rootAfter", .int32(1))])), ("limit", .int32(Int32(clamping: limit))),
            ("singleBatch", .bool(true)), Self.readMajority,
        ])
        let pool = self.pool
        return try await self.run { () throws -> [LogBatchExtent] in
            try CommandReply.firstBatch(try pool.command(command)).map { value throws(StoreError) -> LogBatchExtent in
                let document = try StoredDocument(value, kind: "log batch", collection: collection)
                let first = try document.required("_id", document.index)
                let end = try document.required("end", document.index)
                guard end > first else { throw document.refuse("end", "is not past _id") }
                return LogBatchExtent(first: first, end: end, rootAfter: try document.required("rootAfter", document.binary))
            }
        }
    }

    private func findLogBatches(filter: BSONValue, ascending: Bool, limit: Int) async throws(StoreError) -> [LogBatch] {
        let collection = self.evidenceLog
        let command = BSONValue.document([
            ("find", .string(collection)), ("filter", filter), ("sort", .document([("_id", .int32(ascending ? 1 : -1))])),
            ("limit", .int32(Int32(clamping: limit))), ("singleBatch", .bool(true)), Self.readMajority,
        ])
        let pool = self.pool
        return try await self.run { () throws -> [LogBatch] in
            try CommandReply.firstBatch(try pool.command(command)).map { value throws(StoreError) -> LogBatch in
                let document = try StoredDocument(value, kind: "log batch", collection: collection)
                let leaves = try document.required("leaves", document.binaries)
                guard !leaves.isEmpty else { throw document.refuse("leaves", "is empty") }
                let first = try document.required("_id", document.index)
                // The end the predecessor check reads (``logBatchEnd(before:)``) must be the leaves'.
                guard try document.required("end", document.index) == first + UInt64(leaves.count) else {
                    throw document.refuse("end", "is not _id plus the number of leaves")
                }
                return LogBatch(
                    first: first, leaves: leaves,
                    registrations: try document.required("registrations", document.binaries),
                    rootAfter: try document.required("rootAfter", document.binary), insertedAt: try document.required("insertedAt", document.date))
            }
        }
    }

    public func sharedLogStatus() async throws(StoreError) -> SharedLogStatus? {
        let collection = self.evidenceLogStatus
        let command = BSONValue.document([
            ("find", .string(collection)), ("filter", .document([("_id", .string("log"))])), ("limit", .int32(1)),
            ("singleBatch", .bool(true)), Self.readMajority,
        ])
        let pool = self.pool
        return try await self.run { () throws -> SharedLogStatus? in
            guard let value = try CommandReply.firstBatch(try pool.command(command)).first else { return nil }
            let document = try StoredDocument(value, kind: "log status", collection: collection)
            let verifierKey = try document.required("verifierKey", document.string)
            if try document.required("ready", document.bool) { return SharedLogStatus(verifierKey: verifierKey) }
            return SharedLogStatus(
                verifierKey: verifierKey,
                moving: .init(size: try document.required("movingSize", document.index), root: try document.required("movingRoot", document.binary)))
        }
    }

    public func replaceSharedLogStatus(_ old: SharedLogStatus?, with new: SharedLogStatus?) async throws(StoreError) -> Bool {
        let command: BSONValue
        switch (old, new) {
        case (nil, nil): return try await self.sharedLogStatus() == nil
        case (nil, let new?):
            command = .document([
                ("insert", .string(self.evidenceLogStatus)), ("documents", .array([.document(try Self.statusFields(new))])), Self.majority,
            ])
        case (let old?, nil):
            command = .document([
                ("delete", .string(self.evidenceLogStatus)),
                ("deletes", .array([.document([("q", .document(try Self.statusFields(old))), ("limit", .int32(1))])])), Self.majority,
            ])
        case (let old?, let new?):
            // Matched on every field of the old status, its fields set to the new one's; the
            // high-water mark (`answered`) is kept.
            var update: BSONFields = [("$set", .document(Array(try Self.statusFields(new).dropFirst())))]
            if new.moving == nil { update.append(("$unset", .document([("movingSize", .string("")), ("movingRoot", .string(""))]))) }
            command = .document([
                ("update", .string(self.evidenceLogStatus)),
                ("updates", .array([.document([("q", .document(try Self.statusFields(old))), ("u", .document(update))])])),
                Self.majority,
            ])
        }
        let pool = self.pool
        let inserting = old == nil
        return try await self.run { () throws -> Bool in
            do {
                let reply = try pool.command(command)
                return inserting ? true : try CommandReply.count(reply) == 1
            } catch let error as MongoError where error.isDuplicateKey {
                return false
            }
        }
    }

    public func logHighWater() async throws(StoreError) -> LogHighWater {
        let collection = self.evidenceLogStatus
        let command = BSONValue.document([
            ("find", .string(collection)), ("filter", .document([("_id", .string("log"))])),
            ("projection", .document([("answered", .int32(1)), ("hole", .int32(1))])), ("limit", .int32(1)), ("singleBatch", .bool(true)),
            Self.readMajority,
        ])
        let pool = self.pool
        return try await self.run { () throws -> LogHighWater in
            guard let value = try CommandReply.firstBatch(try pool.command(command)).first else { return LogHighWater(answered: 0) }
            let document = try StoredDocument(value, kind: "log status", collection: collection)
            return LogHighWater(answered: try document.index("answered") ?? 0, hole: try document.index("hole"))
        }
    }

    public func reportLogHole(at index: UInt64) async throws(StoreError) {
        try await self.updateLogStatus(
            filter: [], update: [("$min", .document([("hole", .int64(Int64(clamping: index)))]))])
    }

    public func clearLogHole(below end: UInt64) async throws(StoreError) {
        try await self.updateLogStatus(
            filter: [("hole", .document([("$lt", .int64(Int64(clamping: end)))]))], update: [("$unset", .document([("hole", .string(""))]))])
    }

    /// One update of the status document (`_id` "log" and `filter`), majority-acknowledged.
    private func updateLogStatus(filter: BSONFields, update: BSONFields) async throws(StoreError) {
        let command = BSONValue.document([
            ("update", .string(self.evidenceLogStatus)),
            ("updates", .array([.document([("q", .document([("_id", .string("log"))] + filter)), ("u", .document(update))])])),
            Self.majority,
        ])
        let pool = self.pool
        try await self.run { () throws in _ = try pool.command(command) }
    }

    @discardableResult
    public func raiseLogHighWater(to end: UInt64) async throws(StoreError) -> UInt64 {
        guard let end = Int64(exactly: end) else { throw StoreError(code: .unavailable, reason: "MongoDB: a log of 2^63 leaves or more") }
        let collection = self.evidenceLogStatus
        let command = BSONValue.document([
            ("findAndModify", .string(collection)), ("query", .document([("_id", .string("log"))])),
            ("update", .document([("$max", .document([("answered", .int64(end))]))])), ("new", .bool(false)),
            ("fields", .document([("answered", .int32(1))])), Self.majority,
        ])
        let pool = self.pool
        return try await self.run { () throws -> UInt64 in
            guard let value = try CommandReply.value(try pool.command(command)) else {
                throw StoreError(
                    code: .unavailable, reason: "MongoDB: the evidence log has no status in \(collection): its high-water mark is not raised")
            }
            return try StoredDocument(value, kind: "log status", collection: collection).index("answered") ?? 0
        }
    }

    /// A status as its document's fields (and as the filter that matches exactly it).
    private static func statusFields(_ status: SharedLogStatus) throws(StoreError) -> BSONFields {
        var fields: BSONFields = [("_id", .string("log")), ("verifierKey", .string(status.verifierKey))]
        if let move = status.moving {
            guard let size = Int64(exactly: move.size) else { throw StoreError(code: .unavailable, reason: "MongoDB: a log of 2^63 leaves or more") }
            fields += [("ready", .bool(false)), ("movingSize", .int64(size)), ("movingRoot", .binary(move.root))]
        } else {
            fields.append(("ready", .bool(true)))
        }
        return fields
    }

    public func storeLogRegistration(id: [UInt8], document: [UInt8]) async throws(StoreError) {
        let command = BSONValue.document([
            ("insert", .string(self.evidenceRegistrations)),
            ("documents", .array([.document([("_id", .binary(id)), ("document", .binary(document))])])), Self.majority,
        ])
        let repair = BSONValue.document([
            ("update", .string(self.evidenceRegistrations)),
            (
                "updates",
                .array([
                    .document([("q", .document([("_id", .binary(id))])), ("u", .document([("$set", .document([("document", .binary(document))]))]))])
                ])
            ),
            Self.majority,
        ])
        let pool = self.pool
        try await self.run { () throws in
            do {
                _ = try pool.command(command)
            } catch let error as MongoError where error.isDuplicateKey {
                // Stored before (by this instance or another). The id is the bytes' SHA-256, so
                // these bytes are the only right ones: written again, they repair a document
                // that was altered.
                _ = try pool.command(repair)
            }
        }
    }

    public func logRegistration(id: [UInt8]) async throws(StoreError) -> [UInt8]? {
        let collection = self.evidenceRegistrations
        let command = BSONValue.document([
            ("find", .string(collection)), ("filter", .document([("_id", .binary(id))])), ("limit", .int32(1)), ("singleBatch", .bool(true)),
            Self.readMajority,
        ])
        let pool = self.pool
        return try await self.run { () throws -> [UInt8]? in
            guard let value = try CommandReply.firstBatch(try pool.command(command)).first else { return nil }
            let document = try StoredDocument(value, kind: "key registration", collection: collection)
            return try document.required("document", document.binary)
        }
    }
}
