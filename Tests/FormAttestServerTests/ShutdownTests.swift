//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestFlows
import FormAttestServer
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

struct ShutdownTests {
    @Test("the application owns its store: it serves with it, and a graceful shutdown closes it after the server stopped")
    func gracefulShutdownClosesTheStore() async throws {
        let harness = try ServiceHarness()
        let app = try await FormAttestApplication.make(
            configuration: harness.configuration,
            store: harness.store,
            signingKeys: harness.keys,
            developmentDevice: nil,
            logger: Logger(label: "test")
        )
        try await app.test(.live) { client in
            // /healthz answers 200 only when the store takes a write.
            let response = try await client.execute(uri: "/healthz", method: .get)
            #expect(response.status == .ok)
        }
        // The live test ends with a graceful shutdown of the service group and waits for it.
        do {
            _ = try await harness.store.keys(username: "alice")
            Issue.record("the store still answers after the application shut down")
        } catch {
            #expect(error.code == .unavailable, "\(error)")
        }
    }
}
