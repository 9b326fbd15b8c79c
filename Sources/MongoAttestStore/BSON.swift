//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

internal import CLibMongoC
import Foundation

/// A BSON value as the store writes it. Documents keep their key order, which MongoDB commands
/// require (the command name comes first).
indirect enum BSONValue: Sendable, Hashable {
    case string(String)
    case int32(Int32)
    case int64(Int64)
    case bool(Bool)
    case null
    case binary([UInt8])
    case date(Date)
    case document([(String, BSONValue)])
    case array([BSONValue])

    static func == (lhs: BSONValue, rhs: BSONValue) -> Bool { lhs.extendedJSON == rhs.extendedJSON }
    func hash(into hasher: inout Hasher) { hasher.combine(self.extendedJSON) }

    /// Canonical Extended JSON (v2), which `bson_new_from_json` reads.
    var extendedJSON: String {
        switch self {
        case .string(let value): return Self.quote(value)
        case .int32(let value): return #"{"$numberInt":"\#(value)"}"#
        case .int64(let value): return #"{"$numberLong":"\#(value)"}"#
        case .bool(let value): return value ? "true" : "false"
        case .null: return "null"
        case .binary(let bytes): return #"{"$binary":{"base64":"\#(Data(bytes).base64EncodedString())","subType":"00"}}"#
        case .date(let date):
            return #"{"$date":{"$numberLong":"\#(Int64((date.timeIntervalSince1970 * 1000).rounded(.down)))"}}"#
        case .document(let fields):
            return "{" + fields.map { Self.quote($0.0) + ":" + $0.1.extendedJSON }.joined(separator: ",") + "}"
        case .array(let values):
            return "[" + values.map(\.extendedJSON).joined(separator: ",") + "]"
        }
    }

    private static func quote(_ string: String) -> String {
        var output = "\""
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            case let c where c.value < 0x20: output += String(format: "\\u%04x", c.value)
            default: output.unicodeScalars.append(scalar)
            }
        }
        return output + "\""
    }
}

/// An owned `bson_t`, freed when the value goes away.
final class BSONDocument {
    let pointer: OpaquePointer

    /// Builds a document from a ``BSONValue/document(_:)``.
    init(_ value: BSONValue) throws(MongoError) {
        let json = Array(value.extendedJSON.utf8)
        var error = bson_error_t()
        let pointer = json.withUnsafeBufferPointer { buffer in
            bson_new_from_json(buffer.baseAddress, buffer.count, &error)
        }
        guard let pointer else {
            throw MongoError(error, context: "building a BSON document")
        }
        self.pointer = pointer
    }

    deinit {
        bson_destroy(self.pointer)
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

    /// The reply as a JSON object (from canonical Extended JSON).
    func object() throws(MongoError) -> [String: Any] {
        var length = 0
        guard let json = bson_as_canonical_extended_json(self.pointer, &length) else {
            throw MongoError(code: -1, message: "the reply is not convertible to JSON")
        }
        defer { bson_free(json) }
        let data = Data(bytes: json, count: length)
        guard let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
            throw MongoError(code: -1, message: "the reply is not a JSON object")
        }
        return object
    }
}

/// Reading canonical Extended JSON values out of a reply.
enum ExtendedJSON {
    static func int64(_ value: Any?) -> Int64? {
        guard let object = value as? [String: Any] else { return nil }
        if let text = object["$numberLong"] as? String { return Int64(text) }
        if let text = object["$numberInt"] as? String { return Int64(text) }
        if let text = object["$numberDouble"] as? String { return Double(text).flatMap { Int64(exactly: $0) } }
        return nil
    }

    static func binary(_ value: Any?) -> [UInt8]? {
        guard let object = (value as? [String: Any])?["$binary"] as? [String: Any],
            let base64 = object["base64"] as? String, let data = Data(base64Encoded: base64)
        else { return nil }
        return Array(data)
    }

    static func date(_ value: Any?) -> Date? {
        guard let object = value as? [String: Any], let inner = object["$date"] else { return nil }
        guard let milliseconds = self.int64(inner) else { return nil }
        return Date(timeIntervalSince1970: Double(milliseconds) / 1000)
    }
}
