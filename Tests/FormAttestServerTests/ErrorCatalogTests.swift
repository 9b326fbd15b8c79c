//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestServer
import FormAttestTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

/// The error table (docs/errors.md is generated from ``ErrorCatalog``) stays complete and true.
struct ErrorCatalogTests {
    @Test("every error code written in the service's sources is in the table")
    func sourcesCovered() throws {
        let codes = Set(ErrorCatalog.entries.map(\.code))
        var found: [String: String] = [:]
        for module in [
            "FormAttestServer", "FormAttestFlows", "FormAttestForm", "AppAttest", "AppleReceiptExchange", "SQLiteAttestStore", "MongoAttestStore",
        ] {
            let directory = repositoryDirectory.appendingPathComponent("Sources/\(module)")
            let enumerator = try #require(FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil))
            for case let url as URL in enumerator where url.pathExtension == "swift" {
                let text = try String(contentsOf: url, encoding: .utf8)
                // `code: "replay"` (APIError, FlowError) and `case x = "snake_case"` of the code types.
                let pattern = try NSRegularExpression(pattern: #"code: "([a-z_]+)"|case [A-Za-z]+ = "([a-z_]+)""#)
                for match in pattern.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
                    for group in 1...2 {
                        guard let range = Range(match.range(at: group), in: text) else { continue }
                        found[String(text[range])] = url.lastPathComponent
                    }
                }
            }
        }
        // Raw values that are not error codes: enumerations of other things.
        let notErrors: Set<String> = [
            "identity_provider", "trusted_backend", "form", "pool", "development", "production", "app_id", "apple-appattest",
            // The outcome label of an accepted request in formattest_flow_outcomes_total.
            "ok",
            // Stores' codes renamed by FlowError(StoreError) before any client sees them.
            "duplicate_key", "stale_counter", "revoked", "passkey_exists",
        ]
        let missing = found.keys.filter { !codes.contains($0) && !notErrors.contains($0) }.sorted()
        #expect(found.count > 60)
        #expect(missing.isEmpty, "not in ErrorCatalog: \(missing.map { "\($0) (\(found[$0] ?? ""))" })")
    }

    @Test("one status per code, a meaning and an action for each; the statuses are the service's")
    func entriesComplete() {
        // One status per code. The verifier refuses a counter not above the stored one (401
        // `counter_not_increasing`); a commit whose counter another request advanced meanwhile is
        // the flows' `counter_out_of_order` (409), as a form delivered after a later one is.
        #expect(ErrorCatalog.conflicts.isEmpty, "\(ErrorCatalog.conflicts)")
        #expect(ErrorCatalog.entries.filter { $0.code == "counter_not_increasing" }.map(\.status) == [401])
        #expect(ErrorCatalog.entries.filter { $0.code == "counter_out_of_order" }.map(\.status) == [409])
        for entry in ErrorCatalog.entries {
            #expect(!entry.meaning.isEmpty && !entry.action.isEmpty, "\(entry.code)")
        }
        let status = Dictionary(ErrorCatalog.entries.map { ($0.code, $0.status) }) { first, _ in first }
        let expected: [String: Int] = [
            "request_timeout": 408, "body_too_large": 413, "replay": 409, "nonce_mismatch": 401, "malformed_attestation": 400,
            "store_unavailable": 503,
            "timestamp_outside_window": 422, "requires_reattestation": 428, "rate_limited": 429, "session_mismatch": 403, "unauthenticated": 401,
            "key_already_registered": 409, "receipt_exchange_unavailable": 502, "not_found": 404,
        ]
        for (code, value) in expected {
            #expect(status[code] == value, "\(code): \(String(describing: status[code]))")
        }
        #expect(!ErrorCatalog.markdownTable.contains("| ... |") && ErrorCatalog.markdownTable.contains("| 408 | `request_timeout` |"))
    }

    @Test("with an operators' listener the public router answers /metrics and /admin/* 404; the operators' router serves them")
    func operatorRouter() async throws {
        var harness = try ServiceHarness()
        let secret = String(repeating: "s", count: 32)
        harness.configuration.adminSecrets = try BackendSecrets(fileText: secret)
        harness.configuration.adminListener = (host: "127.0.0.1", port: 9)
        try await harness.run { client in
            let metrics = try await client.send(.get, "/metrics", template: "/metrics")
            let admin = try await client.with(bearer: secret).send(.get, "/admin/users/alice/keys", template: "/admin/users/{username}/keys")
            let health = try await client.send(.get, "/healthz", template: "/healthz")
            #expect(metrics.status == 404 && admin.status == 404 && health.status == 200, "\(metrics.status) \(admin.status) \(health.status)")
        }
        let operators = Application(
            router: FormAttestApplication.operatorRouter(configuration: harness.configuration, store: harness.store), logger: Logger(label: "test"))
        try await operators.test(.router) { client in
            try await client.execute(uri: "/metrics", method: .get) { #expect($0.status == .ok) }
            try await client.execute(uri: "/admin/users/alice/keys", method: .get, headers: [.authorization: "Bearer \(secret)"]) {
                #expect($0.status == .ok)
            }
            try await client.execute(uri: "/admin/users/alice/keys", method: .get) { #expect($0.status == .unauthorized) }
            try await client.execute(uri: "/healthz", method: .get) { #expect($0.status == .notFound) }
        }
        harness.configuration.adminListener = nil
        try await harness.run { client in
            let metrics = try await client.send(.get, "/metrics", template: "/metrics")
            #expect(metrics.status == 200)
        }
    }

    @Test("every operation of schemas/openapi.yaml declares 408 and 413")
    func openAPIStatuses() async throws {
        let check = try await PythonCheck(venv: ".venv-interop", overrideVariable: "FORMATTEST_INTEROP_PYTHON").run(
            "e2e/interop/check_openapi_statuses.py", [repositoryDirectory.appendingPathComponent("schemas/openapi.yaml").path]
        )
        #expect(check.status == 0, "\(check.output)")
        #expect(check.output.contains(" operations, 0 lacking"), "\(check.output)")
    }
}
