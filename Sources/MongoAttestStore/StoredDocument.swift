//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestFlows
import Foundation

/// One stored document read field by field, failing closed as the SQLite store does: a required
/// field that is missing, a field of another BSON type than FormAttest writes, or a number out of
/// its range is ``StoreError/Code/unavailable``, naming the collection and the field. Nothing is
/// defaulted, clamped or converted (an optional field is absent, never `null`).
struct StoredDocument {
    /// What the document is, for errors: "key", "passkey", "replay record".
    let kind: String
    let collection: String
    private let fields: BSONFields
    /// The path of a nested document (`lastSignals.`), for errors.
    private let prefix: String

    /// `value` as a document of `collection`; anything else is refused.
    init(_ value: BSONValue, kind: String, collection: String) throws(StoreError) {
        try self.init(value, kind: kind, collection: collection, prefix: "")
    }

    private init(_ value: BSONValue, kind: String, collection: String, prefix: String) throws(StoreError) {
        self.kind = kind
        self.collection = collection
        self.prefix = prefix
        guard case .document(let fields) = value else {
            throw StoreError(
                code: .unavailable, reason: "MongoDB: a stored \(kind) in \(collection) is \(value.typeDescription), not a document")
        }
        self.fields = fields
    }

    /// The refusal of field `name`.
    func refuse(_ name: String, _ problem: String) -> StoreError {
        StoreError(code: .unavailable, reason: "MongoDB: a stored \(self.kind)'s \(self.prefix)\(name) in \(self.collection) \(problem)")
    }

    /// The field's value; `nil` when absent. A field stored twice is refused (which one a reader
    /// takes is not defined).
    private func value(_ name: String) throws(StoreError) -> BSONValue? {
        var found: BSONValue?
        for (key, value) in self.fields where key == name {
            guard found == nil else { throw self.refuse(name, "is stored twice") }
            found = value
        }
        return found
    }

    /// `read(name)`, which must be present.
    func required<Value>(_ name: String, _ read: (String) throws(StoreError) -> Value?) throws(StoreError) -> Value {
        guard let value = try read(name) else { throw self.refuse(name, "is missing") }
        return value
    }

    private func wrongType(_ name: String, _ value: BSONValue, _ expected: String) -> StoreError {
        self.refuse(name, "is \(value.typeDescription), not \(expected)")
    }

    func binary(_ name: String) throws(StoreError) -> [UInt8]? {
        guard let value = try self.value(name) else { return nil }
        guard case .binary(let bytes) = value else { throw self.wrongType(name, value, "binary data") }
        return bytes
    }

    func string(_ name: String) throws(StoreError) -> String? {
        guard let value = try self.value(name) else { return nil }
        guard case .string(let string) = value else { throw self.wrongType(name, value, "a string") }
        return string
    }

    func bool(_ name: String) throws(StoreError) -> Bool? {
        guard let value = try self.value(name) else { return nil }
        guard case .bool(let flag) = value else { throw self.wrongType(name, value, "a boolean") }
        return flag
    }

    func date(_ name: String) throws(StoreError) -> Date? {
        guard let value = try self.value(name) else { return nil }
        guard case .date(let date) = value else { throw self.wrongType(name, value, "a date") }
        return date
    }

    /// An integer (32- or 64-bit BSON) in `UInt32`'s range: counters, signal codes. Never clamped.
    func uint32(_ name: String) throws(StoreError) -> UInt32? {
        guard let integer = try self.integer(name) else { return nil }
        guard let narrow = UInt32(exactly: integer) else { throw self.refuse(name, "is \(integer), not a 32-bit unsigned integer") }
        return narrow
    }

    /// A count: an integer (32- or 64-bit BSON), 0 or more.
    func count(_ name: String) throws(StoreError) -> Int? {
        guard let integer = try self.integer(name) else { return nil }
        guard let count = Int(exactly: integer), count >= 0 else { throw self.refuse(name, "is \(integer), not a count") }
        return count
    }

    private func integer(_ name: String) throws(StoreError) -> Int64? {
        guard let value = try self.value(name) else { return nil }
        switch value {
        case .int32(let integer): return Int64(integer)
        case .int64(let integer): return integer
        default: throw self.wrongType(name, value, "an integer")
        }
    }

    /// A leaf index: a 64-bit integer, 0 or more.
    func index(_ name: String) throws(StoreError) -> UInt64? {
        guard let integer = try self.integer(name) else { return nil }
        guard let index = UInt64(exactly: integer) else { throw self.refuse(name, "is \(integer), not an index") }
        return index
    }

    /// An array of binary data.
    func binaries(_ name: String) throws(StoreError) -> [[UInt8]]? {
        guard let value = try self.value(name) else { return nil }
        guard case .array(let values) = value else { throw self.wrongType(name, value, "an array of binary data") }
        return try values.map { element throws(StoreError) -> [UInt8] in
            guard case .binary(let bytes) = element else { throw self.wrongType(name, element, "an array of binary data") }
            return bytes
        }
    }

    /// An array of strings.
    func strings(_ name: String) throws(StoreError) -> [String]? {
        guard let value = try self.value(name) else { return nil }
        guard case .array(let values) = value else { throw self.wrongType(name, value, "an array of strings") }
        return try values.map { element throws(StoreError) -> String in
            guard case .string(let string) = element else { throw self.wrongType(name, element, "an array of strings") }
            return string
        }
    }

    /// A nested document, read as this one is.
    func document(_ name: String) throws(StoreError) -> StoredDocument? {
        guard let value = try self.value(name) else { return nil }
        guard case .document = value else { throw self.wrongType(name, value, "a document") }
        return try StoredDocument(value, kind: self.kind, collection: self.collection, prefix: self.prefix + name + ".")
    }
}

/// Reading a command's reply: the server's envelope (`cursor.firstBatch`, `value`, `n`). A reply
/// of another shape is ``StoreError/Code/unavailable``; the documents inside are read by
/// ``StoredDocument``.
enum CommandReply {
    private static func malformed(_ what: String) -> StoreError {
        StoreError(code: .unavailable, reason: "MongoDB: the reply's \(what) is missing or malformed")
    }

    /// A `find`'s first batch.
    static func firstBatch(_ reply: BSONFields) throws(StoreError) -> [BSONValue] {
        guard case .document(let cursor)? = reply[field: "cursor"], case .array(let batch)? = cursor[field: "firstBatch"] else {
            throw Self.malformed("cursor.firstBatch")
        }
        return batch
    }

    /// A `findAndModify`'s document, or `nil` when nothing matched (`value: null`).
    static func value(_ reply: BSONFields) throws(StoreError) -> BSONValue? {
        switch reply[field: "value"] {
        case .document(let fields)?: return .document(fields)
        case .null?, nil: return nil
        default: throw Self.malformed("value")
        }
    }

    /// A write's or count's `n`.
    static func count(_ reply: BSONFields) throws(StoreError) -> Int {
        switch reply[field: "n"] {
        case .int32(let n)? where n >= 0: return Int(n)
        case .int64(let n)? where n >= 0: return Int(n)
        case .double(let n)? where n >= 0: guard let exact = Int(exactly: n) else { throw Self.malformed("n") }; return exact
        default: throw Self.malformed("n")
        }
    }
}
