//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

internal import CLibMongoC
import Foundation

/// A BSON value: what the store writes (commands, documents) and what it reads back from a reply.
/// Documents keep their key order, which MongoDB commands require (the command name comes first).
///
/// Values go to and from `bson_t` directly: written with libbson's `bson_append_*`, read with its
/// typed iterators (`bson_iter_*`), never through Extended JSON text.
indirect enum BSONValue: Sendable {
    case string(String)
    case int32(Int32)
    case int64(Int64)
    case double(Double)
    case bool(Bool)
    case null
    /// Binary of the generic subtype (0x00), the only one FormAttest writes.
    case binary([UInt8])
    /// A UTC datetime (milliseconds since 1970).
    case date(Date)
    case document([(String, BSONValue)])
    case array([BSONValue])
    /// Read only: a value FormAttest never writes (another BSON type, another binary subtype, a
    /// string that is not UTF-8), described for the error that refuses it.
    case unreadable(String)

    /// A date's milliseconds since 1970, rounded down (what MongoDB keeps).
    static func milliseconds(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
    }

    /// What a value is, for error messages.
    var typeDescription: String {
        switch self {
        case .string: "a string"
        case .int32: "a 32-bit integer"
        case .int64: "a 64-bit integer"
        case .double: "a double"
        case .bool: "a boolean"
        case .null: "null"
        case .binary: "binary data"
        case .date: "a date"
        case .document: "a document"
        case .array: "an array"
        case .unreadable(let what): what
        }
    }
}

/// A document's fields, in order.
typealias BSONFields = [(String, BSONValue)]

extension [(String, BSONValue)] {
    /// The first field named `name` (server replies: each name once).
    subscript(field name: String) -> BSONValue? {
        self.first(where: { $0.0 == name })?.1
    }
}

/// An owned `bson_t`, freed when the value goes away.
final class BSONDocument {
    let pointer: OpaquePointer

    /// Builds a document from a ``BSONValue/document(_:)`` with `bson_append_*`.
    init(_ value: BSONValue) throws(MongoError) {
        guard case .document(let fields) = value else {
            throw MongoError(code: -1, message: "building a BSON document: the value is \(value.typeDescription)")
        }
        guard let pointer = bson_new() else { throw MongoError(code: -1, message: "building a BSON document: out of memory") }
        do {
            try Self.append(fields, to: pointer)
        } catch {
            bson_destroy(pointer)
            throw error
        }
        self.pointer = pointer
    }

    deinit {
        bson_destroy(self.pointer)
    }

    private static func append(_ fields: BSONFields, to document: OpaquePointer) throws(MongoError) {
        for (key, value) in fields {
            try Self.append(key, value, to: document)
        }
    }

    private static func append(_ key: String, _ value: BSONValue, to document: OpaquePointer) throws(MongoError) {
        guard !key.utf8.contains(0) else { throw MongoError(code: -1, message: "building a BSON document: a key holds NUL") }
        let appended: Bool
        switch value {
        case .string(let string):
            var string = string
            guard let length = Int32(exactly: string.utf8.count) else {
                throw MongoError(code: -1, message: "building a BSON document: a string too long")
            }
            appended = string.withUTF8 { text in
                text.withMemoryRebound(to: CChar.self) { characters in
                    // The given length, not strlen: the bytes are copied as they are.
                    guard let base = characters.baseAddress else { return bson_append_utf8(document, key, -1, "", 0) }
                    return bson_append_utf8(document, key, -1, base, length)
                }
            }
        case .int32(let integer): appended = bson_append_int32(document, key, -1, integer)
        case .int64(let integer): appended = bson_append_int64(document, key, -1, integer)
        case .double(let number): appended = bson_append_double(document, key, -1, number)
        case .bool(let flag): appended = bson_append_bool(document, key, -1, flag)
        case .null: appended = bson_append_null(document, key, -1)
        case .binary(let bytes):
            guard let length = UInt32(exactly: bytes.count) else { throw MongoError(code: -1, message: "building a BSON document: binary too long") }
            let empty: [UInt8] = [0]
            appended = (bytes.isEmpty ? empty : bytes).withUnsafeBufferPointer { buffer in
                bson_append_binary(document, key, -1, BSON_SUBTYPE_BINARY, buffer.baseAddress, length)
            }
        case .date(let date): appended = bson_append_date_time(document, key, -1, BSONValue.milliseconds(date))
        case .document(let fields):
            appended = try Self.appendChild(key, fields, to: document, array: false)
        case .array(let values):
            appended = try Self.appendChild(key, values.enumerated().map { (String($0.offset), $0.element) }, to: document, array: true)
        case .unreadable(let what):
            throw MongoError(code: -1, message: "building a BSON document: \(what) cannot be written")
        }
        guard appended else { throw MongoError(code: -1, message: "building a BSON document: the document is too large at \(key)") }
    }

    /// A nested document or array, built apart and appended (libbson copies it).
    private static func appendChild(_ key: String, _ fields: BSONFields, to document: OpaquePointer, array: Bool) throws(MongoError) -> Bool {
        guard let child = bson_new() else { throw MongoError(code: -1, message: "building a BSON document: out of memory") }
        defer { bson_destroy(child) }
        try Self.append(fields, to: child)
        return array ? bson_append_array(document, key, -1, child) : bson_append_document(document, key, -1, child)
    }
}

/// A reply document: `bson_t` storage allocated here (libbson's `bson_t` is 128 bytes, 128-byte
/// aligned, and opaque to Swift), initialized by the libmongoc call that fills it, destroyed and
/// freed in `deinit`.
final class BSONReply {
    static let size = 128
    let pointer: OpaquePointer
    private let storage: UnsafeMutableRawPointer

    init() {
        self.storage = UnsafeMutableRawPointer.allocate(byteCount: Self.size, alignment: Self.size)
        self.storage.initializeMemory(as: UInt8.self, repeating: 0, count: Self.size)
        self.pointer = OpaquePointer(self.storage)
        // Callers always pass the reply to a libmongoc function, which initializes it in every
        // case ("reply is always initialized"); an empty document until then.
        bson_init(self.pointer)
    }

    deinit {
        bson_destroy(self.pointer)
        self.storage.deallocate()
    }

    /// The reply's fields, read with libbson's iterators.
    func fields() throws(MongoError) -> BSONFields {
        try BSONReader.fields(of: self.pointer)
    }
}

/// Reads a `bson_t` into ``BSONValue``s with libbson's typed iterators (`bson_iter_*`): each
/// value by its BSON type, strings validated as UTF-8 (never repaired), binary of the generic
/// subtype only; anything else is kept as ``BSONValue/unreadable(_:)`` for the reader of that
/// field to refuse.
enum BSONReader {
    /// `bson_iter_t` is 80 bytes, 128-byte aligned, and opaque to Swift, as `bson_t` is.
    private static let iteratorSize = 128
    /// Nesting deeper than this is refused (FormAttest's documents nest 3 levels, replies 5).
    static let maximumDepth = 16

    static func fields(of document: OpaquePointer) throws(MongoError) -> BSONFields {
        // The whole structure first (lengths, terminators, nesting): an iterator that stops at
        // corrupt bytes looks like one at the end of its document.
        var offset = 0
        guard bson_validate(document, BSON_VALIDATE_NONE, &offset) else {
            throw MongoError(code: -1, message: "reading a BSON document: it is malformed at byte \(offset)")
        }
        let iterator = Self.allocateIterator()
        defer { iterator.deallocate() }
        guard bson_iter_init(OpaquePointer(iterator), document) else {
            throw MongoError(code: -1, message: "reading a BSON document: it is malformed")
        }
        return try Self.fields(OpaquePointer(iterator), depth: 0)
    }

    private static func allocateIterator() -> UnsafeMutableRawPointer {
        let storage = UnsafeMutableRawPointer.allocate(byteCount: Self.iteratorSize, alignment: Self.iteratorSize)
        storage.initializeMemory(as: UInt8.self, repeating: 0, count: Self.iteratorSize)
        return storage
    }

    /// The fields from `iterator`'s position to the end of its document.
    private static func fields(_ iterator: OpaquePointer, depth: Int) throws(MongoError) -> BSONFields {
        guard depth < Self.maximumDepth else { throw MongoError(code: -1, message: "reading a BSON document: nested too deeply") }
        var fields: BSONFields = []
        while bson_iter_next(iterator) {
            guard let pointer = bson_iter_key(iterator), let key = String(validatingCString: pointer) else {
                throw MongoError(code: -1, message: "reading a BSON document: a key is not UTF-8")
            }
            fields.append((key, try Self.value(iterator, depth: depth)))
        }
        return fields
    }

    private static func value(_ iterator: OpaquePointer, depth: Int) throws(MongoError) -> BSONValue {
        let type = bson_iter_type(iterator)
        switch type {
        case BSON_TYPE_UTF8:
            var length: UInt32 = 0
            guard let pointer = bson_iter_utf8(iterator, &length) else { return .unreadable("a malformed string") }
            let bytes = UnsafeRawBufferPointer(start: pointer, count: Int(length)).bindMemory(to: UInt8.self)
            guard let string = String(validating: bytes, as: UTF8.self) else { return .unreadable("a string that is not UTF-8") }
            return .string(string)
        case BSON_TYPE_INT32: return .int32(bson_iter_int32(iterator))
        case BSON_TYPE_INT64: return .int64(bson_iter_int64(iterator))
        case BSON_TYPE_DOUBLE: return .double(bson_iter_double(iterator))
        case BSON_TYPE_BOOL: return .bool(bson_iter_bool(iterator))
        case BSON_TYPE_NULL: return .null
        case BSON_TYPE_DATE_TIME:
            return .date(Date(timeIntervalSince1970: Double(bson_iter_date_time(iterator)) / 1000))
        case BSON_TYPE_BINARY:
            var subtype = BSON_SUBTYPE_BINARY
            var length: UInt32 = 0
            var pointer: UnsafePointer<UInt8>?
            bson_iter_binary(iterator, &subtype, &length, &pointer)
            guard subtype == BSON_SUBTYPE_BINARY else { return .unreadable("binary data of subtype \(subtype.rawValue)") }
            guard let pointer else { return length == 0 ? .binary([]) : .unreadable("malformed binary data") }
            return .binary(Array(UnsafeBufferPointer(start: pointer, count: Int(length))))
        case BSON_TYPE_DOCUMENT, BSON_TYPE_ARRAY:
            let child = Self.allocateIterator()
            defer { child.deallocate() }
            guard bson_iter_recurse(iterator, OpaquePointer(child)) else {
                throw MongoError(code: -1, message: "reading a BSON document: a nested document is malformed")
            }
            let fields = try Self.fields(OpaquePointer(child), depth: depth + 1)
            return type == BSON_TYPE_DOCUMENT ? .document(fields) : .array(fields.map(\.1))
        default:
            return .unreadable("a value of BSON type 0x\(String(type.rawValue, radix: 16))")
        }
    }
}
