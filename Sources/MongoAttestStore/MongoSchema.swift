//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

internal import CLibMongoC
import Foundation

/// One collection's definition from schemas/mongodb/*.json: its `$jsonSchema` validator and
/// its indexes. The same files document the collections.
struct MongoSchema {
    let collection: String
    let validator: BSONValue
    let indexes: [BSONValue]

    /// The bundled schema files (`schemas/mongodb` at the top of the repository is a link to them).
    static func load() throws(MongoError) -> [MongoSchema] {
        guard let directory = Bundle.module.url(forResource: "schemas", withExtension: nil),
            let names = try? FileManager.default.contentsOfDirectory(atPath: directory.path)
        else {
            throw MongoError(code: -1, message: "the MongoDB schema files are missing from the bundle")
        }
        return try names.filter { $0.hasSuffix(".json") }.sorted().map { name throws(MongoError) in
            guard let data = FileManager.default.contents(atPath: directory.appendingPathComponent(name).path) else {
                throw MongoError(code: -1, message: "schema file \(name) cannot be read")
            }
            let fields = try Self.parse(Array(data), name: name)
            guard case .string(let collection)? = fields[field: "collection"], let validator = fields[field: "validator"],
                case .array(let indexes)? = fields[field: "indexes"]
            else {
                throw MongoError(code: -1, message: "schema file \(name) is not {collection, validator, indexes}")
            }
            return MongoSchema(collection: collection, validator: try Self.normalized(validator), indexes: try indexes.map(Self.normalized))
        }
    }

    /// A bundled schema file (plain JSON, written by FormAttest) parsed by libbson's JSON reader.
    private static func parse(_ bytes: [UInt8], name: String) throws(MongoError) -> BSONFields {
        var error = bson_error_t()
        let document = bytes.withUnsafeBufferPointer { buffer in bson_new_from_json(buffer.baseAddress, buffer.count, &error) }
        guard let document else { throw MongoError(error, context: "schema file \(name) is not JSON") }
        defer { bson_destroy(document) }
        return try BSONReader.fields(of: document)
    }

    /// Creates the collection with its validator (or updates the validator), then its indexes.
    /// Idempotent: running it on every start is safe.
    func apply(to pool: MongoClientPool, collection name: String) throws(MongoError) {
        // Create, or update the validator of an existing collection. Another instance may create
        // it between the check and the create: then the create fails and the re-check finds it.
        var created = false
        if try !Self.exists(name, pool) {
            do {
                _ = try pool.command(.document([("create", .string(name)), ("validator", self.validator)]))
                created = true
            } catch {
                guard try Self.exists(name, pool) else { throw error }
            }
        }
        if !created {
            // Bring an existing collection's validator up to date. A server without collMod
            // (CommandNotFound, 59; mongoeco says "unsupported wire command") keeps the validator
            // it was created with: validators document and guard the shape, and correctness never
            // depends on them.
            do {
                _ = try pool.command(.document([("collMod", .string(name)), ("validator", self.validator)]))
            } catch  where error.code == 59 || error.message.contains("unsupported wire command") {
            }
        }
        if !self.indexes.isEmpty {
            _ = try pool.command(.document([("createIndexes", .string(name)), ("indexes", .array(self.indexes))]))
        }
    }

    private static func exists(_ name: String, _ pool: MongoClientPool) throws(MongoError) -> Bool {
        let reply = try pool.command(
            .document([("listCollections", .int32(1)), ("filter", .document([("name", .string(name))])), ("nameOnly", .bool(true))])
        )
        guard case .document(let cursor)? = reply[field: "cursor"], case .array(let batch)? = cursor[field: "firstBatch"] else {
            throw MongoError(code: -1, message: "listCollections returned no cursor.firstBatch")
        }
        return !batch.isEmpty
    }

    /// A schema value as the validator and index commands take it: objects get a sorted key
    /// order, numbers must be 32-bit integers (index directions, TTL seconds, minimums).
    private static func normalized(_ value: BSONValue) throws(MongoError) -> BSONValue {
        switch value {
        case .string, .bool, .null, .int32: return value
        case .int64(let integer):
            guard let narrow = Int32(exactly: integer) else { throw MongoError(code: -1, message: "schema numbers must be 32-bit integers") }
            return .int32(narrow)
        case .double(let number):
            guard let narrow = Int32(exactly: number) else { throw MongoError(code: -1, message: "schema numbers must be 32-bit integers") }
            return .int32(narrow)
        case .array(let values): return .array(try values.map(Self.normalized))
        case .document(let fields):
            return .document(try fields.sorted { $0.0 < $1.0 }.map { field throws(MongoError) in (field.0, try Self.normalized(field.1)) })
        case .binary, .date, .unreadable: throw MongoError(code: -1, message: "unsupported JSON value in a schema file")
        }
    }
}
