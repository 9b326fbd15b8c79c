//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

internal import CLibMongoC
import Foundation

/// One libmongoc client pool per store (one per process in the service), owning its URI and
/// pool and freeing them in ``close()`` (or `deinit`, if never closed). Every call blocks;
/// callers run it off the event loop.
final class MongoClientPool: @unchecked Sendable {
    // Invariant: `uri` and `pool` are created in init, never reassigned, and destroyed once: by
    // close() when no command is running (`running` == 0), or in deinit if close() never ran.
    // mongoc_client_pool_t is thread-safe; each popped client is used by one thread at a time.
    private let uri: OpaquePointer
    private let pool: OpaquePointer
    let databaseName: String
    /// Guards `closed`, `destroyed` and `running`; close() waits on it for `running` to reach 0.
    private let state = NSCondition()
    private var closed = false
    private var destroyed = false
    private var running = 0

    private static let initializeDriver: Void = {
        mongoc_init()
        // libmongoc logs connection attempts at DEBUG level to stderr by default; keep only
        // warnings, errors and critical messages (levels 0-2).
        mongoc_log_set_handler(
            { level, domain, message, userData in
                if level.rawValue <= MONGOC_LOG_LEVEL_WARNING.rawValue {
                    mongoc_log_default_handler(level, domain, message, userData)
                }
            }, nil)
    }()

    /// Opens a pool.
    ///
    /// - Parameters:
    ///   - connectionString: a standard MongoDB URI; TLS and every other option go through it
    ///     (`tls=true`, `tlsCAFile=...`, `replicaSet=...`).
    ///   - database: the database name; default: the URI's, else `formattest`.
    ///   - timeout: server selection and connect timeout unless the URI sets them, so that an
    ///     unreachable server fails a request quickly (fail closed) instead of hanging it.
    init(connectionString: String, database: String?, timeoutMilliseconds: Int32 = 2000) throws(MongoError) {
        Self.initializeDriver
        var error = bson_error_t()
        guard let uri = mongoc_uri_new_with_error(connectionString, &error) else {
            throw MongoError(error, context: "invalid MongoDB connection string")
        }
        for option in ["serverSelectionTimeoutMS", "connectTimeoutMS"] where !mongoc_uri_has_option(uri, option) {
            _ = mongoc_uri_set_option_as_int32(uri, option, timeoutMilliseconds)
        }
        guard let pool = mongoc_client_pool_new_with_error(uri, &error) else {
            mongoc_uri_destroy(uri)
            throw MongoError(error, context: "cannot create the client pool")
        }
        // Error API 2: server errors carry the server's own codes (11000 for duplicate keys).
        guard mongoc_client_pool_set_error_api(pool, 2) else {
            mongoc_client_pool_destroy(pool)
            mongoc_uri_destroy(uri)
            throw MongoError(code: -1, message: "cannot select libmongoc's error API 2")
        }
        _ = mongoc_client_pool_set_appname(pool, "formattest")
        self.uri = uri
        self.pool = pool
        self.databaseName = database ?? mongoc_uri_get_database(uri).map { String(cString: $0) } ?? "formattest"
    }

    deinit {
        if !self.destroyed {
            mongoc_client_pool_destroy(self.pool)
            mongoc_uri_destroy(self.uri)
        }
    }

    /// Refuses every later command, waits for the running ones, then frees the pool and the URI.
    /// Idempotent. Blocks; callers run it off the event loop.
    func close() {
        self.state.lock()
        defer { self.state.unlock() }
        self.closed = true
        while self.running > 0 { self.state.wait() }
        guard !self.destroyed else { return }
        mongoc_client_pool_destroy(self.pool)
        mongoc_uri_destroy(self.uri)
        self.destroyed = true
    }

    /// Runs one database command and returns its reply.
    ///
    /// - Throws: ``MongoError`` for a failed command, for the first write error in the reply
    ///   (such as 11000), or for a write concern error.
    func command(_ command: BSONValue) throws(MongoError) -> BSONFields {
        try self.enter()
        defer { self.leave() }
        let document = try BSONDocument(command)
        guard let client = mongoc_client_pool_pop(self.pool) else {
            throw MongoError(code: -1, message: "no client available from the pool")
        }
        defer { mongoc_client_pool_push(self.pool, client) }
        guard let database = mongoc_client_get_database(client, self.databaseName) else {
            throw MongoError(code: -1, message: "cannot open database \(self.databaseName)")
        }
        defer { mongoc_database_destroy(database) }
        let reply = BSONReply()
        var error = bson_error_t()
        let succeeded = mongoc_database_command_with_opts(database, document.pointer, nil, nil, reply.pointer, &error)
        guard succeeded else {
            throw MongoError(error, context: "command failed")
        }
        let fields = try reply.fields()
        if case .array(let errors)? = fields[field: "writeErrors"], let first = errors.first {
            throw Self.serverError(first, default: "write error")
        }
        if let concern = fields[field: "writeConcernError"] {
            throw Self.serverError(concern, default: "write concern error")
        }
        return fields
    }

    /// A write error's or write concern error's `{code, errmsg}`.
    private static func serverError(_ value: BSONValue, default message: String) -> MongoError {
        guard case .document(let fields) = value else { return MongoError(code: -1, message: message) }
        let code: Int
        switch fields[field: "code"] {
        case .int32(let value)?: code = Int(value)
        case .int64(let value)?: code = Int(value)
        case .double(let value)?: code = Int(exactly: value) ?? -1
        default: code = -1
        }
        guard case .string(let text)? = fields[field: "errmsg"] else { return MongoError(code: code, message: message) }
        return MongoError(code: code, message: text)
    }

    /// Counts a command as running, unless the pool is closed.
    private func enter() throws(MongoError) {
        self.state.lock()
        defer { self.state.unlock() }
        guard !self.closed else { throw MongoError(code: -1, message: "the store is shut down") }
        self.running += 1
    }

    private func leave() {
        self.state.lock()
        defer { self.state.unlock() }
        self.running -= 1
        if self.running == 0 { self.state.broadcast() }
    }
}
