//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttestSimulator
import Crypto
import FormAttestTestSupport
import Foundation
import ReceiptExchangeFake
import Testing

/// `formattest receipt refresh` against a local fake of Apple's receipt exchange.
struct ReceiptCommandTests {
    @Test("refresh stores a verified RECEIPT; a rate limit and a receipt not chaining to G3 are refused (exit 1)")
    func refresh() async throws {
        let files = try TemporaryFiles()
        let store = "sqlite:" + files.directory.appendingPathComponent("keys.sqlite").path
        let appID = "ABCDE12345.com.formattest.demo"
        let registered = try await Formattest.run(["simulate", "register", "--store", store, "--app-id", appID, "--seed", "7"])
        #expect(registered.status == 0, "\(registered.stdout) \(registered.stderr)")
        let authority = try SimulatedAttestationAuthority()
        let keyID = Data(SimulatedDevice(authority: authority, appID: appID, seed: 7).key(0).keyID).base64EncodedString()
        let deviceCheckKey = P256.Signing.PrivateKey()
        let keyPath = try files.write(deviceCheckKey.pemRepresentation, named: "AuthKey.p8")
        let root = try await Formattest.run(["simulate", "root", "--receipt"])
        let rootPath = try files.write(root.stdout, named: "receipt-root.pem")
        let fake = FakeAppleExchange(authority: authority.receiptAuthority, deviceCheckKey: deviceCheckKey.publicKey, now: Date())

        try await fake.serve { url in
            let arguments = [
                "receipt", "refresh", "--store", store, "--key-id", keyID, "--app-id", appID, "--team-id", "ABCDE12345",
                "--apple-key-id", "KEY1234567", "--apple-key", keyPath, "--endpoint", url, "--json",
                // What this checks is the receipt, not the deadline: the fake runs in the test's
                // own process, which CI's load once starved past the default 10 s.
                "--timeout", "120",
            ]
            let refreshed = try await Formattest.run(arguments + ["--receipt-root", rootPath])
            #expect(refreshed.status == 0, "\(refreshed.stdout) \(refreshed.stderr)")
            let report = try refreshed.jsonObject()
            #expect(report["refreshed"] as? Bool == true)
            #expect(report["type"] as? String == "RECEIPT")
            #expect(report["riskMetric"] as? Int == 2)

            await fake.set(.status(429))
            let limited = try await Formattest.run(arguments + ["--receipt-root", rootPath])
            #expect(limited.status == 1)
            #expect((try limited.jsonObject()["error"] as? [String: Any])?["code"] as? String == "receipt_exchange_rate_limited")

            // Apple Root CA - G3 (the default): the simulator's receipt does not chain to it.
            await fake.set(.issue(riskMetric: 5))
            let untrusted = try await Formattest.run(arguments)
            #expect(untrusted.status == 1)
            #expect((try untrusted.jsonObject()["error"] as? [String: Any])?["code"] as? String == "receipt_chain_invalid")
        }
        // The JWT carried the DeviceCheck key id and team id.
        let requests = await fake.requests
        #expect(requests.count == 3)
        #expect(requests.allSatisfy { $0.kid == "KEY1234567" && $0.issuer == "ABCDE12345" })
    }
}
