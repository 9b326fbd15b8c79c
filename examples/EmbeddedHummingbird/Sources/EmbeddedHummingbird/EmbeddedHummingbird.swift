//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import FormAttestServer
import FormAttestTokens
import Foundation
import Hummingbird
import Logging
import SQLiteAttestStore

/// A bank's own Hummingbird application: its own route, `GET /bank/health`, and FormAttest's API
/// under `/formattest` (`/formattest/api/appattest/challenge`, ...), with FormAttest's purge and
/// store shutdown in the application's service group.
///
/// Environment: `PORT` (8080), `BANK_DATA` (`bank-data`: the SQLite database and the signing key,
/// generated on the first start), `BANK_APP_ID` (the app id App Attest keys must be for),
/// `BANK_BACKEND_SECRET_FILE` (required: the backend's secrets, which vouch for `username`).
@main
struct EmbeddedHummingbird {
    static func main() async throws {
        let environment = ProcessInfo.processInfo.environment
        let logger = Logger(label: "bank")
        let port = environment["PORT"].flatMap { Int($0) } ?? 8080
        let data = URL(fileURLWithPath: environment["BANK_DATA"] ?? "bank-data", isDirectory: true)

        // FormAttest's configuration: the bank's app, Apple's production environment.
        var configuration = ServerConfiguration(
            policy: AppAttestPolicy(appIDs: [environment["BANK_APP_ID"] ?? "ABCDE12345.com.example.bank"], environments: [.production])
        )
        configuration.issuer = "bank.example"
        configuration.audience = "bank.example"
        configuration.demoDirectory = nil
        // Who vouches for a request's `username`: the bank's backend, by a secret it presents as a
        // bearer token (one per line in the file; 32 characters at least). Never `.none` outside
        // a demo: anyone could then act for any user (docs/threat-model.md).
        guard let secretFile = environment["BANK_BACKEND_SECRET_FILE"] else {
            logger.critical("set BANK_BACKEND_SECRET_FILE: the file of the backend's secrets (who vouches for a request's username)")
            exit(2)
        }
        configuration.callerAuthentication = .trustedBackend(try BackendSecrets(fileText: String(contentsOfFile: secretFile, encoding: .utf8)))

        let store = try SQLiteAttestationStore(path: data.appendingPathComponent("formattest.sqlite").path)
        let signingKeys = try SigningKeyDirectory(directory: data.appendingPathComponent("signing-keys", isDirectory: true)).loadOrCreate()
        let formAttest = try await FormAttestService(configuration: configuration, store: store, signingKeys: signingKeys, logger: logger)

        // The bank's router: its own routes, and FormAttest's in a group of it.
        let router = Router(context: AppRequestContext.self)
        router.get("bank/health") { _, _ in "ok" }
        formAttest.addRoutes(to: router.group("formattest"))

        let app = Application(
            router: router,
            // FormAttest's connection-level protections (per-address cap, header and body
            // deadlines) live in the listener's pipeline: the bank's listener takes them here.
            server: FormAttestApplication.http1(configuration, listener: "api", logger: logger),
            configuration: FormAttestApplication.listener(host: "127.0.0.1", port: port, configuration, logger: logger),
            // The store's shutdown first: the group stops services in reverse order, so the store
            // closes after the server drained its requests.
            services: formAttest.services,
            onServerRunning: FormAttestApplication.serverRunning(listener: "api", logger: logger),
            logger: logger
        )
        try await app.runService()
    }
}
