//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

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
            guard let data = FileManager.default.contents(atPath: directory.appendingPathComponent(name).path),
                let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any],
                let collection = object["collection"] as? String, let validator = object["validator"],
                let indexes = object["indexes"] as? [Any]
            else {
                throw MongoError(code: -1, message: "schema file \(name) is not {collection, validator, indexes}")
            }
            return MongoSchema(collection: collection, validator: try Self.bson(validator), indexes: try indexes.map(Self.bson))
        }
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
            } catch where error.code == 59 || error.message.contains("unsupported wire command") {
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
        return !((((reply["cursor"] as? [String: Any])?["firstBatch"]) as? [Any]) ?? []).isEmpty
    }

    /// Plain JSON to BSON: objects get a sorted key order, numbers must be 32-bit integers.
    private static func bson(_ value: Any) throws(MongoError) -> BSONValue {
        switch value {
        case let string as String: return .string(string)
        case let number as NSNumber:
            // The schema files hold integers only (index directions, TTL seconds, minimums).
            guard let integer = Int32(exactly: number.doubleValue) else {
                throw MongoError(code: -1, message: "schema numbers must be 32-bit integers")
            }
            return .int32(integer)
        case let array as [Any]: return .array(try array.map(Self.bson))
        case let object as [String: Any]:
            return .document(try object.keys.sorted().map { key throws(MongoError) in (key, try Self.bson(object[key] as Any)) })
        case is NSNull: return .null
        default: throw MongoError(code: -1, message: "unsupported JSON value in a schema file")
        }
    }
}
