//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import AppleReceiptExchange
import AsyncHTTPClient
import Crypto
import FormAttestFlows
import FormAttestForm
import Foundation
import RFC3339
import ReceiptExchangeFake
import Testing

/// The receipt exchange client and the risk-metric flow, against a local fake of Apple's endpoint.
struct ReceiptExchangeTests {
    static let appID = "ABCDE12345.com.formattest.bank"
    static let now = Date(timeIntervalSince1970: 1_795_341_600)

    /// A registered key, its flows and store, a DeviceCheck key and the fake that trusts it.
    struct Setup {
        let authority: SimulatedAttestationAuthority
        let device: SimulatedDevice
        let store: MemoryAttestationStore
        let flows: FormFlows
        let deviceCheckKey = P256.Signing.PrivateKey()
        let fake: FakeAppleExchange

        init() throws {
            self.authority = try SimulatedAttestationAuthority(seed: 21)
            self.device = SimulatedDevice(authority: self.authority, appID: ReceiptExchangeTests.appID, environment: .production, seed: 5)
            self.store = MemoryAttestationStore()
            let verifier = try AppAttestVerifier(
                policy: AppAttestPolicy(
                    appIDs: [ReceiptExchangeTests.appID],
                    environments: [.production],
                    trustAnchors: [self.authority.rootCertificate],
                    receiptTrustAnchors: [self.authority.receiptAuthority.rootCertificate]
                )
            )
            self.flows = FormFlows(verifier: verifier, store: self.store)
            self.fake = FakeAppleExchange(
                authority: self.authority.receiptAuthority,
                deviceCheckKey: self.deviceCheckKey.publicKey,
                now: ReceiptExchangeTests.now
            )
        }

        /// Registers key `index` through the attestation flow (its receipt is stored with it).
        func register(_ index: Int = 0) async throws -> StoredKey {
            let key = self.device.key(index)
            let form = Array(
                #"{"amount":1,"nonce":"r\#(index)","timestamp":"\#(RFC3339UTC.format(ReceiptExchangeTests.now))","to":"bob","username":"alice"}"#.utf8
            )
            let hash = try SignedForm(jsonBytes: form).clientDataHash
            _ = try await self.flows.attest(
                FormFlows.AttestRequest(
                    username: "alice",
                    keyID: key.keyID,
                    attestationObject: try self.device.attest(key, clientDataHash: hash, at: ReceiptExchangeTests.now),
                    form: form
                ),
                now: ReceiptExchangeTests.now
            )
            return try #require(try await self.store.loadKey(keyID: key.keyID))
        }

        /// The default deadline is generous: these tests check what an answer means, and the
        /// whole suite's system tests load the machine (the deadline's own tests pass theirs).
        func client(_ url: String, timeout: Duration = .seconds(30)) -> AppleReceiptExchangeClient {
            AppleReceiptExchangeClient(
                httpClient: .shared,
                credentials: .init(teamID: "ABCDE12345", keyID: "KEY1234567", privateKey: self.deviceCheckKey),
                endpoints: [.production: url, .development: url],
                timeout: timeout,
                now: { ReceiptExchangeTests.now }
            )
        }
    }

    static func expectExchangeError(
        _ code: ReceiptExchangeError.Code,
        sourceLocation: SourceLocation = #_sourceLocation,
        _ body: () async throws -> Void
    ) async {
        do {
            try await body()
            Issue.record("expected \(code), the exchange answered", sourceLocation: sourceLocation)
        } catch let error as ReceiptExchangeError {
            #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("expected \(code), got \(error)", sourceLocation: sourceLocation)
        }
    }

    static func expectFlowError(
        _ code: String,
        sourceLocation: SourceLocation = #_sourceLocation,
        _ body: () async throws -> Void
    ) async {
        do {
            try await body()
            Issue.record("expected \(code), the refresh succeeded", sourceLocation: sourceLocation)
        } catch let error as FlowError {
            #expect(error.code.identifier == code, "\(error)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("expected \(code), got \(error)", sourceLocation: sourceLocation)
        }
    }

    // MARK: - The client at the HTTP boundary

    @Test("the request is Apple's: POST, base64 receipt body, ES256 JWT with kid, iss and iat")
    func requestShape() async throws {
        let setup = try Setup()
        let key = try await setup.register()
        let response = try await setup.fake.serve { url in
            try await setup.client(url).exchange(key.receipt, environment: .production)
        }
        guard case .newReceipt(let bytes) = response else {
            Issue.record("expected a new receipt, got \(response)")
            return
        }
        #expect(try AppAttestReceipt(berEncoded: bytes).payload.riskMetric == 2)
        let requests = await setup.fake.requests
        try #require(requests.count == 1)
        #expect(requests[0].path == "/v1/attestationData")
        #expect(requests[0].kid == "KEY1234567")
        #expect(requests[0].issuer == "ABCDE12345")
        #expect(requests[0].issuedAt == Self.now)
        #expect(requests[0].receipt == key.receipt)
    }

    @Test("each HTTP answer maps to one outcome: 304, 400, 401, 403, 429, 500, 503, a non-base64 200")
    func statusMapping() async throws {
        let setup = try Setup()
        let key = try await setup.register()
        try await setup.fake.serve { url in
            let client = setup.client(url)
            await setup.fake.set(.status(304))
            let notModified = try await client.exchange(key.receipt, environment: .production)
            #expect(notModified == .notModified)
            let cases: [(FakeAppleExchange.Mode, ReceiptExchangeError.Code)] = [
                (.status(400), .rejected), (.status(401), .unauthorized), (.status(403), .unauthorized),
                (.status(429), .rateLimited), (.status(500), .unavailable), (.status(503), .unavailable),
                (.garbage, .malformedResponse),
            ]
            for (mode, code) in cases {
                await setup.fake.set(mode)
                await Self.expectExchangeError(code) { _ = try await client.exchange(key.receipt, environment: .production) }
            }
        }
    }

    @Test("a JWT signed by another DeviceCheck key is refused by the endpoint (401)")
    func wrongDeviceCheckKey() async throws {
        let setup = try Setup()
        let key = try await setup.register()
        try await setup.fake.serve { url in
            let impostor = AppleReceiptExchangeClient(
                httpClient: .shared,
                credentials: .init(teamID: "ABCDE12345", keyID: "KEY1234567", privateKey: P256.Signing.PrivateKey()),
                endpoints: [.production: url],
                // The same generous deadline as `Setup.client`'s: under the full suite's load the
                // product's 10 s passed once before the local fake answered (unavailable, not 401).
                timeout: .seconds(30),
                now: { Self.now }
            )
            await Self.expectExchangeError(.unauthorized) { _ = try await impostor.exchange(key.receipt, environment: .production) }
        }
    }

    @Test("an unreachable endpoint and a slow one are 'unavailable', within the timeout")
    func unreachableAndSlow() async throws {
        let setup = try Setup()
        let key = try await setup.register()
        // Port 9 (discard): nothing listens there on a test machine.
        await Self.expectExchangeError(.unavailable) {
            _ = try await setup.client("http://127.0.0.1:9/v1/attestationData", timeout: .seconds(1))
                .exchange(key.receipt, environment: .production)
        }
        try await setup.fake.serve { url in
            await setup.fake.set(.delay(.milliseconds(1500)))
            let started = ContinuousClock.now
            await Self.expectExchangeError(.unavailable) {
                _ = try await setup.client(url, timeout: .milliseconds(300)).exchange(key.receipt, environment: .production)
            }
            // The fake answers after 1.5 s: an error (not that answer) means the 300 ms deadline
            // fired. The bound is only that the wait ended (CI's load once stretched it to 11.9 s).
            #expect(ContinuousClock.now - started < .seconds(60))
        }
    }

    // MARK: - The flow

    @Test("refresh: the new receipt verifies, carries the risk metric, and replaces the stored one")
    func refreshStoresNewReceipt() async throws {
        let setup = try Setup()
        let key = try await setup.register()
        #expect(try AppAttestReceipt(berEncoded: key.receipt).payload.type == .attest)
        await setup.fake.set(.issue(riskMetric: 4))
        let outcome = try await setup.fake.serve { url in
            try await setup.flows.refreshRiskMetric(keyID: key.keyID, using: setup.client(url), now: Self.now)
        }
        #expect(outcome.refreshed)
        #expect(outcome.receipt.payload.type == .receipt)
        #expect(outcome.receipt.payload.riskMetric == 4)
        // Field 19 (not before) and 21 (expiry) as the exchange wrote them: now + 1 day, now + 90 days.
        let notBefore = try #require(outcome.receipt.payload.notBefore)
        #expect(abs(notBefore.timeIntervalSince(Self.now) - 86_400) < 0.001)
        #expect(abs(outcome.receipt.payload.expirationTime.timeIntervalSince(Self.now) - 90 * 86_400) < 0.001)
        #expect(outcome.receipt.payload.creationTime == Self.now)
        let stored = try #require(try await setup.store.loadKey(keyID: key.keyID))
        #expect(stored.receipt == outcome.receipt.receipt.rawValue)
        #expect(stored.receipt != key.receipt)
        #expect(stored.counter == key.counter)

        // The next refresh sends the new receipt.
        _ = try await setup.fake.serve { url in
            try await setup.flows.refreshRiskMetric(keyID: key.keyID, using: setup.client(url), now: Self.now)
        }
        #expect(await setup.fake.requests.last?.receipt == stored.receipt)
    }

    @Test("refresh: 304 keeps the stored receipt")
    func refreshNotModified() async throws {
        let setup = try Setup()
        let key = try await setup.register()
        await setup.fake.set(.status(304))
        let outcome = try await setup.fake.serve { url in
            try await setup.flows.refreshRiskMetric(keyID: key.keyID, using: setup.client(url), now: Self.now)
        }
        #expect(!outcome.refreshed)
        #expect(outcome.receipt.payload.type == .attest)
        #expect(try await setup.store.loadKey(keyID: key.keyID)?.receipt == key.receipt)
    }

    @Test("refresh: every bad answer is refused and changes nothing")
    func refreshRefusals() async throws {
        let setup = try Setup()
        let key = try await setup.register()
        let otherKey = try await setup.register(1)
        let otherCertificate = try AppAttestReceipt(berEncoded: otherKey.receipt).payload.attestedCertificateDER
        let cases: [(FakeAppleExchange.Mode, String)] = [
            (.status(429), "receipt_exchange_rate_limited"),
            (.status(503), "receipt_exchange_unavailable"),
            (.garbage, "receipt_exchange_malformed_response"),
            (.issueForOtherCertificate(otherCertificate), "receipt_certificate_mismatch"),
            (.issueSignedBy(try SimulatedReceiptAuthority(seed: 999)), "receipt_chain_invalid"),
            (.issueCreated(ago: 301), "receipt_stale"),
        ]
        try await setup.fake.serve { url in
            for (mode, code) in cases {
                await setup.fake.set(mode)
                await Self.expectFlowError(code) {
                    _ = try await setup.flows.refreshRiskMetric(keyID: key.keyID, using: setup.client(url), now: Self.now)
                }
                #expect(try await setup.store.loadKey(keyID: key.keyID) == key, "\(code)")
            }
            // A fresh enough one (300 s) is accepted.
            await setup.fake.set(.issueCreated(ago: 300))
            _ = try await setup.flows.refreshRiskMetric(keyID: key.keyID, using: setup.client(url), now: Self.now)
        }
        await Self.expectFlowError("key_mismatch") {
            _ = try await setup.flows.refreshRiskMetric(
                keyID: [UInt8](repeating: 7, count: 32), using: setup.client("http://127.0.0.1:9/x"), now: Self.now)
        }
    }
}
