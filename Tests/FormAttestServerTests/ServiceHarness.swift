//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import CanonicalJSON
import Crypto
import FormAttestDevSimulator
import FormAttestFlows
import FormAttestForm
import FormAttestServer
import FormAttestTestSupport
import FormAttestTokens
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Metrics
import NIOCore
import Prometheus
import RFC3339
import Testing

/// The service in process, with a memory store and a simulated device, recording every response.
struct ServiceHarness {
    /// The test process's metrics, bootstrapped once (as the executable does at start): the
    /// library only emits, and `/metrics` renders this registry.
    static let metrics: PrometheusCollectorRegistry = {
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        return registry
    }()

    static let appID = "ABCDE12345.com.formattest.demo"

    let store = MemoryAttestationStore()
    /// Serve this store instead of ``store`` (a wrapper around it, for faults).
    var storeOverride: (any OperationalAttestationStore)?
    let keys = SigningKeys(current: .init())
    let authority: SimulatedAttestationAuthority
    var configuration: ServerConfiguration
    let recorder = ResponseRecorder()

    init(rotate: Bool = false, devSimulator: Bool = true) throws {
        self.authority = try SimulatedAttestationAuthority(seed: 3)
        self.configuration = ServerConfiguration(
            policy: AppAttestPolicy(
                appIDs: [Self.appID],
                environments: [.development, .production],
                trustAnchors: [AppleAppAttestationRoot.certificate, self.authority.rootCertificate],
                receiptTrustAnchors: [AppleRootCAG3.certificate, self.authority.receiptAuthority.rootCertificate]
            )
        )
        self.configuration.flows = FlowConfiguration(rotateChallenges: rotate)
        self.configuration.healthProbeInterval = .zero  // every /healthz probes the store
        self.configuration.devSimulator = devSimulator
        self.configuration.demoDirectory = repositoryDirectory.appendingPathComponent("demo").path
        self.configuration.metrics = Self.metrics
    }

    func run(_ body: @Sendable (Client) async throws -> Void) async throws {
        let device = SimulatedDevice(authority: self.authority, appID: Self.appID, environment: .development, seed: 21)
        let router = try await FormAttestApplication.router(
            configuration: self.configuration, store: self.storeOverride ?? self.store, signingKeys: self.keys,
            developmentDevice: SimulatedDevelopmentDevice(device: device))
        let app = Application(router: router, logger: Logger(label: "test"))
        let recorder = self.recorder
        try await app.test(.router) { client in
            try await body(Client(client: client, recorder: recorder))
        }
    }

    /// A thin client that decodes JSON answers and records each exchange.
    struct Client: Sendable {
        let client: any TestClientProtocol
        let recorder: ResponseRecorder
        /// Sent as `Authorization: Bearer …` with every request when set.
        var bearer: String?
        /// Extra request headers.
        var headers: HTTPFields = [:]

        init(client: any TestClientProtocol, recorder: ResponseRecorder, bearer: String? = nil) {
            self.client = client
            self.recorder = recorder
            self.bearer = bearer
        }

        /// The same client, authenticating with `bearer` (nil: none).
        func with(bearer: String?, headers: HTTPFields = [:]) -> Client {
            var copy = self
            copy.bearer = bearer
            copy.headers = headers
            return copy
        }

        struct Answer {
            var status: Int
            var body: [UInt8]
            var contentType: String?
            var headers: HTTPFields = [:]
            var json: JSONValue? { try? CanonicalJSON.parse(self.body) }
            var errorCode: String? { self.json?["error"]?["code"]?.stringValue }
        }

        @discardableResult
        func send(_ method: HTTPRequest.Method, _ path: String, template: String, body: [UInt8]? = nil) async throws -> Answer {
            var headers = self.headers
            headers[.contentType] = "application/json"
            if let bearer = self.bearer { headers[.authorization] = "Bearer \(bearer)" }
            let answer = try await self.client.execute(uri: path, method: method, headers: headers, body: body.map { ByteBuffer(bytes: $0) }) {
                response in
                Answer(
                    status: Int(response.status.code), body: Array(response.body.readableBytesView), contentType: response.headers[.contentType],
                    headers: response.headers)
            }
            self.recorder.record(method: method.rawValue, path: template, status: answer.status, contentType: answer.contentType, body: answer.body)
            return answer
        }

        func post(_ path: String, _ object: [(String, JSONValue)]) async throws -> Answer {
            try await self.send(.post, path, template: path, body: JSONValue.object(JSONObject(constantMembers: object)).canonicalBytes)
        }
    }

    // MARK: - Forms and the simulated device over the API

    static func form(
        user: String = "alice", amount: String = "10.00", nonce: String = UUID().uuidString, at date: Date = Date(), challenge: String? = nil,
        action: String = "transfer"
    ) -> JSONValue {
        var members: [(String, JSONValue)] = [
            ("action", .string(JSONString(action))), ("amount", .string(JSONString(amount))), ("to", .string(JSONString("bob"))),
            ("username", .string(JSONString(user))), ("timestamp", .string(JSONString(RFC3339UTC.format(date)))),
            ("nonce", .string(JSONString(nonce))),
        ]
        if let challenge { members.append(("challenge", .string(JSONString(challenge)))) }
        return .object(JSONObject(constantMembers: members))
    }

    /// Simulates an attestation over `form`, then submits it: (keyId, answer).
    static func register(_ client: Client, form: JSONValue, user: String = "alice") async throws -> (String, Client.Answer) {
        let simulated = try await client.post("/api/dev/simulate", [("action", .string(JSONString("attest"))), ("form", form)])
        #expect(simulated.status == 200)
        let keyID = try #require(simulated.json?["keyId"]?.stringValue)
        let attestation = try #require(simulated.json?["attestationObject"]?.stringValue)
        let answer = try await client.post(
            "/api/appattest/attest",
            [
                ("username", .string(JSONString(user))), ("keyId", .string(JSONString(keyID))),
                ("attestationObject", .string(JSONString(attestation))), ("form", form),
            ]
        )
        return (keyID, answer)
    }

    static func assertion(_ client: Client, keyID: String, form: JSONValue) async throws -> String {
        let simulated = try await client.post(
            "/api/dev/simulate", [("action", .string(JSONString("assert"))), ("keyId", .string(JSONString(keyID))), ("form", form)])
        return try #require(simulated.json?["assertion"]?.stringValue)
    }
}

/// Every exchange the tests saw, for the OpenAPI conformance check.
final class ResponseRecorder: @unchecked Sendable {
    private let lock = NSLock()
    private var lines: [String] = []

    func record(method: String, path: String, status: Int, contentType: String?, body: [UInt8]) {
        let entry: [String: Any] = [
            "method": method.lowercased(), "path": path, "status": status, "contentType": contentType ?? "",
            "body": String(decoding: body, as: UTF8.self),
        ]
        let data = (try? JSONSerialization.data(withJSONObject: entry, options: [.sortedKeys])) ?? Data()
        self.lock.withLock { self.lines.append(String(decoding: data, as: UTF8.self)) }
    }

    var jsonLines: String { self.lock.withLock { self.lines.joined(separator: "\n") + "\n" } }
    var count: Int { self.lock.withLock { self.lines.count } }
}
