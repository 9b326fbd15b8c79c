//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

internal import CLibMongoC

/// An error from libmongoc or from the server, with MongoDB's code and message.
public struct MongoError: Error, Sendable, CustomStringConvertible {
    /// MongoDB's error code (11000 is a duplicate key), or libmongoc's.
    public let code: Int
    public let message: String

    /// A duplicate key on a unique index.
    public var isDuplicateKey: Bool { self.code == 11000 }

    init(code: Int, message: String) {
        self.code = code
        self.message = message
    }

    init(_ error: bson_error_t, context: String) {
        var copy = error
        let message = withUnsafeBytes(of: &copy.message) { raw in
            String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
        self.init(code: Int(error.code), message: "\(context): \(message)")
    }

    public var description: String { "MongoDB error \(self.code): \(self.message)" }
}
