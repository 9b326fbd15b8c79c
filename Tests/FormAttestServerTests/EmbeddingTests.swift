//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import FormAttestForm
import FormAttestServer
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import SQLiteAttestStore
import Testing

/// FormAttest's routes mounted in an application someone else owns (``FormAttestService``): a
/// group of the integrator's router, beside the integrator's own routes.
struct EmbeddingTests {
    @Test("mounted in a group of the integrator's router: FormAttest answers under the group's path, the integrator's routes as before")
    func mountedInAGroup() async throws {
        var harness = try ServiceHarness(devSimulator: false)
        harness.configuration.demoDirectory = nil
        let formAttest = try await FormAttestService(
            configuration: harness.configuration, store: harness.store, signingKeys: harness.keys, logger: Logger(label: "test"))
        #expect(formAttest.services.count == 2 && formAttest.housekeeping == nil, "the store's shutdown and the purge (memory: no housekeeping)")

        let router = Router(context: AppRequestContext.self)
        router.get("bank/health") { _, _ in "bank ok" }
        formAttest.addRoutes(to: router.group("formattest"))
        let app = Application(router: router, logger: Logger(label: "test"))

        try await app.test(.router) { client in
            // FormAttest's: a challenge, issued by the flows over the store.
            try await client.execute(uri: "/formattest/api/appattest/challenge?purpose=form&username=alice", method: .get) { response in
                #expect(response.status == .ok)
                let answer = try CanonicalJSON.parse(Array(response.body.readableBytesView))
                #expect(answer["purpose"]?.stringValue == "form")
                let challenge = try #require(answer["challenge"]?.stringValue)
                #expect(Base64URL.decode(challenge)?.count == 32)
            }
            // A refusal, in FormAttest's error shape.
            try await client.execute(
                uri: "/formattest/api/appattest/attest", method: .post, headers: [.contentType: "application/json"],
                body: ByteBuffer(repeating: UInt8(ascii: " "), count: 100 * 1024)
            ) { response in
                #expect(response.status == .contentTooLarge)
                let answer = try CanonicalJSON.parse(Array(response.body.readableBytesView))
                #expect(answer["error"]?["code"]?.stringValue == "body_too_large")
            }
            try await client.execute(uri: "/formattest/.well-known/jwks.json", method: .get) { response in
                #expect(response.status == .ok)
                let answer = try CanonicalJSON.parse(Array(response.body.readableBytesView))
                guard case .array(let keys)? = answer["keys"] else { throw EmbeddingTestError.notAnArray }
                #expect(keys.first?["kty"]?.stringValue == "EC")
            }
            try await client.execute(uri: "/formattest/healthz", method: .get) { #expect($0.status == .ok) }
            // The integrator's own route, and nothing of FormAttest's outside its group.
            try await client.execute(uri: "/bank/health", method: .get) { response in
                #expect(response.status == .ok)
                #expect(String(buffer: response.body) == "bank ok")
            }
            // FormAttest's middleware ran for its routes (its metrics counted the challenge's route)
            // and for none of the integrator's.
            try await client.execute(uri: "/formattest/metrics", method: .get) { response in
                #expect(response.status == .ok)
                let text = String(buffer: response.body)
                #expect(text.contains("\"/formattest/api/appattest/challenge\""))
                #expect(!text.contains("/bank/health"))
            }
            try await client.execute(uri: "/api/appattest/challenge?purpose=form", method: .get) { response in
                #expect(response.status == .notFound)
                // The integrator's 404, not FormAttest's JSON error: the group's middleware stays in the group.
                #expect((try? CanonicalJSON.parse(Array(response.body.readableBytesView)))?["error"] == nil)
            }
        }
    }

    @Test(
        "on a store with housekeeping of its own (SQLite's checkpoints) the service's background work runs it, between the store's shutdown and the purge"
    )
    func housekeepingService() async throws {
        let harness = try ServiceHarness()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("embedding-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteAttestationStore(path: directory.appendingPathComponent("formattest.sqlite").path)
        let formAttest = try await FormAttestService(
            configuration: harness.configuration, store: store, signingKeys: harness.keys, logger: Logger(label: "test"))
        #expect(formAttest.housekeeping != nil)
        #expect(formAttest.services.count == 3)
        await store.shutdown()
    }
}

enum EmbeddingTestError: Error {
    case notAnArray
}
