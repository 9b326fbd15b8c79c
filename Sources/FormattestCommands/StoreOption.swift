//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import ArgumentParser
public import FormAttestFlows
import Foundation
import Logging
import MongoAttestStore
import SQLiteAttestStore

/// `--store sqlite:PATH | mongodb://... | mongodb+srv://... | memory`, shared by every command
/// that keeps state. The MongoDB URI may also come from FORMATTEST_MONGODB_URI.
public struct StoreOptions: ParsableArguments {
    @Option(
        name: .customLong("store"),
        help: "sqlite:PATH (default sqlite:./formattest-data/formattest.sqlite), a MongoDB URI, or memory."
    )
    var store: String?

    @Option(name: .customLong("mongodb-database"), help: "MongoDB database name (default: the URI's, else formattest).")
    public var mongoDatabase: String?

    @Option(name: .customLong("mongodb-collection-prefix"), help: "Prefix of the MongoDB collections.")
    var mongoCollectionPrefix = "formattest_"

    public init() {}

    /// The store location after flags and environment.
    var location: String {
        self.store ?? ProcessInfo.processInfo.environment["FORMATTEST_MONGODB_URI"] ?? "sqlite:\(SQLiteAttestationStore.defaultPath)"
    }

    /// Opens the store; fails closed (exit 2 with the reason) when it cannot be reached.
    public func open() async throws -> any OperationalAttestationStore {
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
            throw UsageError("the store \(Self.redacted(location)) is unavailable: \(error.reason)")
        }
        throw UsageError("--store takes sqlite:PATH, a mongodb:// URI or memory")
    }

    /// The location without credentials, for messages and logs: a URI's user information (all
    /// before the last `@` of its authority) becomes `***`.
    static func redacted(_ location: String) -> String {
        guard let scheme = location.range(of: "://") else { return location }
        let rest = location[scheme.upperBound...]
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        guard let at = rest[..<authorityEnd].lastIndex(of: "@") else { return location }
        return String(location[..<scheme.upperBound]) + "***" + String(rest[at...])
    }
}
