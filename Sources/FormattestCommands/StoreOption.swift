//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

package import ArgumentParser
package import FormAttestFlows
import Foundation
import Logging
import MongoAttestStore
import SQLiteAttestStore

/// `--store sqlite:PATH | mongodb://... | mongodb+srv://... | memory`, shared by every command
/// that keeps state. The MongoDB URI may also come from FORMATTEST_MONGODB_URI.
package struct StoreOptions: ParsableArguments {
    @Option(
        name: .customLong("store"),
        help: "sqlite:PATH (default sqlite:./formattest-data/formattest.sqlite), a MongoDB URI, or memory."
    )
    var store: String?

    @Option(name: .customLong("mongodb-database"), help: "MongoDB database name (default: the URI's, else formattest).")
    package var mongoDatabase: String?

    @Option(name: .customLong("mongodb-collection-prefix"), help: "Prefix of the MongoDB collections.")
    var mongoCollectionPrefix = "formattest_"

    package init() {}

    /// The store location after flags and environment.
    var location: String {
        self.store ?? ProcessInfo.processInfo.environment["FORMATTEST_MONGODB_URI"] ?? "sqlite:\(SQLiteAttestationStore.defaultPath)"
    }

    /// The values, checked (``StoreSource/init(location:mongoDatabase:mongoCollectionPrefix:name:)``).
    package var source: StoreSource {
        get throws {
            try StoreSource(location: self.location, mongoDatabase: self.mongoDatabase, mongoCollectionPrefix: self.mongoCollectionPrefix)
        }
    }

    /// Opens the store; fails closed (exit 2 with the reason) when it cannot be reached.
    package func open() async throws -> any OperationalAttestationStore {
        try await self.source.open()
    }
}

/// The store to open: its location and, on MongoDB, its database and the collections' prefix.
/// ``StoreOptions``' values for the commands that keep state, `serve`'s `store`,
/// `mongodb-database` and `mongodb-collection-prefix` settings for `serve`. Its initializer is
/// the one check of the location, whichever command gives it.
package struct StoreSource: Sendable {
    /// `sqlite:PATH`, a `mongodb://` or `mongodb+srv://` URI, or `memory`; it may carry a
    /// password (``redacted(_:)`` for messages and logs).
    package let location: String
    package let mongoDatabase: String?
    package let mongoCollectionPrefix: String

    /// - Parameter name: how a message names the setting of a key: its flag (``Setting/flag(_:)``),
    ///   or on `serve` its flag and its source (``ServeSettings/Resolved/name(_:)``).
    /// - Throws: ``UsageError`` when the location is none of the three kinds (``locationProblem(_:)``),
    ///   without quoting it.
    init(location: String, mongoDatabase: String?, mongoCollectionPrefix: String, name: (String) -> String = Setting.flag) throws {
        if let problem = Self.locationProblem(location) { throw UsageError("\(name("store")): \(problem).") }
        self.location = location
        self.mongoDatabase = mongoDatabase
        self.mongoCollectionPrefix = mongoCollectionPrefix
    }

    /// `serve`'s store settings, through the same check. Without `store`, serve's default: the
    /// SQLite file `formattest.sqlite` in the data directory (`data-dir`).
    ///
    /// - Throws: ``UsageError`` naming the setting with its source.
    package init(_ settings: ServeSettings.Resolved) throws {
        let dataDirectory = URL(fileURLWithPath: settings.text("data-dir")).standardizedFileURL.path
        try self.init(
            location: settings.textIfSet("store") ?? "sqlite:" + URL(fileURLWithPath: dataDirectory).appendingPathComponent("formattest.sqlite").path,
            mongoDatabase: settings.textIfSet("mongodb-database"), mongoCollectionPrefix: settings.text("mongodb-collection-prefix"),
            name: settings.name
        )
    }

    /// Opens the store; fails closed (exit 2 with the reason) when it cannot be reached.
    func open() async throws -> any OperationalAttestationStore {
        let location = self.location
        do {
            if location.hasPrefix("mongodb://") || location.hasPrefix("mongodb+srv://") {
                return try await MongoAttestationStore.connect(
                    connectionString: location,
                    database: self.mongoDatabase,
                    collectionPrefix: self.mongoCollectionPrefix
                )
            }
            if location.hasPrefix("sqlite:") {
                // Its checkpoints and slow transactions at debug level (serve --log-level debug).
                return try SQLiteAttestationStore(path: String(location.dropFirst("sqlite:".count)), logger: Logger(label: "formattest.sqlite"))
            }
            if location == "memory" {
                return MemoryAttestationStore()
            }
        } catch {
            throw UsageError("the store \(Self.redacted(location)) is unavailable: \(Self.scrubbed(error.reason, of: location))")
        }
        throw UsageError("--store takes sqlite:PATH, a mongodb:// URI or memory")
    }

    /// What is wrong with a store location, never quoting it (it may carry a password); nil when
    /// it is one of the three kinds. A MongoDB URI's user name and password must percent-encode
    /// `@` (`%40`), as the URI format requires: with two, the driver would take part of the
    /// password for the host (and print it in its error, and ask the resolver for it).
    static func locationProblem(_ location: String) -> String? {
        if location == "memory" { return nil }
        if location.hasPrefix("sqlite:") {
            return location.utf8.count > "sqlite:".utf8.count ? nil : "sqlite: needs the database file's path (sqlite:PATH)"
        }
        guard location.hasPrefix("mongodb://") || location.hasPrefix("mongodb+srv://") else {
            return "must be sqlite:PATH, a mongodb:// or mongodb+srv:// URI, or memory"
        }
        guard location.utf8.count(where: { $0 == UInt8(ascii: "@") }) <= 1 else {
            return "the MongoDB URI holds more than one @: percent-encode an @ in its user name or password as %40"
        }
        return nil
    }

    /// The location without secrets, for messages and logs: a URI's user information (all before
    /// its `@`) and its options (all after `?`, where a TLS key's password or a cloud session token
    /// may be) become `***`.
    static func redacted(_ location: String) -> String {
        guard let scheme = location.range(of: "://") else { return location }
        var rest = String(location[scheme.upperBound...])
        if let at = rest.lastIndex(of: "@") { rest = "***" + rest[at...] }
        if let query = rest.firstIndex(of: "?") { rest = rest[..<query] + "?***" }
        return String(location[..<scheme.upperBound]) + rest
    }

    /// A driver's error about `location`, with every piece of the location's user information and
    /// options (as written and percent-decoded) replaced by `***`: libmongoc quotes what it could
    /// not parse or resolve.
    static func scrubbed(_ reason: String, of location: String) -> String {
        guard let scheme = location.range(of: "://") else { return reason }
        let rest = location[scheme.upperBound...]
        var secrets: [String] = []
        if let at = rest.lastIndex(of: "@") {
            let userInformation = String(rest[..<at])
            secrets.append(userInformation)
            secrets += userInformation.split(separator: ":").map(String.init)
        }
        if let query = rest.firstIndex(of: "?") {
            for option in rest[rest.index(after: query)...].split(separator: "&") {
                secrets.append(String(option))
                secrets += option.split(separator: "=", maxSplits: 1).dropFirst().flatMap { $0.split(separator: ":").map(String.init) + [String($0)] }
            }
        }
        secrets += secrets.compactMap { $0.removingPercentEncoding }
        var scrubbed = reason
        // Longest first, so that a piece inside another is not left half replaced.
        for secret in Set(secrets).filter({ $0.utf8.count >= 3 }).sorted(by: { $0.utf8.count > $1.utf8.count }) {
            scrubbed = scrubbed.replacingOccurrences(of: secret, with: "***")
        }
        return scrubbed
    }
}
