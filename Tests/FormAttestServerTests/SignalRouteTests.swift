//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import CanonicalJSON
import Crypto
import FormAttestFlows
import FormAttestForm
import FormAttestServer
import Foundation
import Testing

/// The iOS 27 signals over HTTP: the simulated device of the demo sends each shape, the answers
/// expose the signals, and each policy of the service accepts and refuses as the library does.
struct SignalRouteTests {
    static func text(_ value: String) -> JSONValue { .string(JSONString(value)) }
    static let cdHash = Array(SHA256.hash(data: Array("release 3.0".utf8)))

    /// `device` for /api/dev/simulate.
    static func device(
        os: String = "ios27",
        category: String = "app-store",
        version: String = "3.0",
        cdHash: [UInt8]? = Self.cdHash,
        spelling: String = "apple",
        assertionMap: Bool = true,
        assertionFlags: Int = 0x40
    ) -> JSONValue {
        var members: [(String, JSONValue)] = [
            ("os", Self.text(os)), ("validationCategory", Self.text(category)), ("bundleVersion", Self.text(version)),
            ("spelling", Self.text(spelling)),
            ("assertionMap", .bool(assertionMap)), ("assertionFlags", .number(Double(assertionFlags))),
        ]
        if let cdHash { members.append(("cdHash", Self.text(hex(cdHash)))) }
        return .object(JSONObject(constantMembers: members))
    }

    /// Attests a key with `device`, then submits it: (keyId, answer).
    static func register(_ client: ServiceHarness.Client, device: JSONValue) async throws -> (String, ServiceHarness.Client.Answer) {
        let form = ServiceHarness.form()
        let simulated = try await client.post("/api/dev/simulate", [("action", Self.text("attest")), ("form", form), ("device", device)])
        #expect(simulated.status == 200)
        let keyID = try #require(simulated.json?["keyId"]?.stringValue)
        let answer = try await client.post(
            "/api/appattest/attest",
            [
                ("username", Self.text("alice")), ("keyId", Self.text(keyID)), ("attestationObject", simulated.json?["attestationObject"] ?? .null),
                ("form", form),
            ]
        )
        return (keyID, answer)
    }

    /// Signs a fresh form with `device`, then submits it.
    static func assert(_ client: ServiceHarness.Client, keyID: String, device: JSONValue) async throws -> ServiceHarness.Client.Answer {
        let form = ServiceHarness.form()
        let simulated = try await client.post(
            "/api/dev/simulate", [("action", Self.text("assert")), ("keyId", Self.text(keyID)), ("form", form), ("device", device)])
        #expect(simulated.status == 200)
        return try await client.post(
            "/api/appattest/assert",
            [("username", Self.text("alice")), ("keyId", Self.text(keyID)), ("assertion", simulated.json?["assertion"] ?? .null), ("form", form)]
        )
    }

    @Test("the answers expose the signals (category, bundle version, CDHash, macOS access control); the OpenAPI document describes them")
    func exposed() async throws {
        let harness = try ServiceHarness()
        try await harness.run { client in
            let (keyID, registered) = try await Self.register(client, device: Self.device(os: "macos27", category: "developer-id"))
            #expect(registered.status == 200)
            let extensions = registered.json?["extensions"]
            #expect(extensions?["validationCategory"]?["value"] == .number(6))
            #expect(extensions?["validationCategory"]?["name"]?.stringValue == "developer-id")
            #expect(extensions?["bundleVersion"]?.stringValue == "3.0")
            #expect(extensions?["cdHash"]?.stringValue == hex(Self.cdHash))
            #expect(extensions?["cdHashType"] == .number(2))
            #expect(registered.json?["macosAccessControl"]?.stringValue == Base64URL.encode(SimulatedDevice.sampleAccessControl))

            let asserted = try await Self.assert(
                client, keyID: keyID, device: Self.device(category: "11", spelling: "documentation", assertionFlags: 0))
            #expect(asserted.status == 200)
            #expect(asserted.json?["extensions"]?["validationCategory"]?["value"] == .number(11))
            #expect(asserted.json?["extensions"]?["validationCategory"]?["name"] == .null)

            // Without signals, no extensions member; a bad device is a 400.
            let bare = try await Self.assert(client, keyID: keyID, device: Self.device(assertionMap: false))
            #expect(bare.status == 200)
            #expect(bare.json?["extensions"] == nil)
            let legacy = try await Self.register(client, device: Self.device(os: "ios26")).1
            #expect(legacy.json?["extensions"] == nil)
            #expect(legacy.json?["macosAccessControl"] == nil)
            for bad: JSONValue in [
                .object(JSONObject(constantMembers: [("os", Self.text("ios99"))])),
                .object(JSONObject(constantMembers: [("validationCategory", Self.text("appstore"))])),
                .object(JSONObject(constantMembers: [("cdHash", Self.text("xyz"))])),
                .object(JSONObject(constantMembers: [("assertionFlags", .number(256))])),
                .object(JSONObject(constantMembers: [("colour", Self.text("red"))])),
                Self.text("ios27"),
            ] {
                let refused = try await client.post(
                    "/api/dev/simulate", [("action", Self.text("attest")), ("form", ServiceHarness.form()), ("device", bad)])
                #expect(refused.status == 400)
                #expect(refused.errorCode == "invalid_request")
            }
        }
        try await OpenAPIConformance.check(harness.recorder)
    }

    /// A policy of the service, a device it accepts and the same device with one change.
    struct Case: Sendable, CustomStringConvertible {
        let description: String
        let configure: @Sendable (inout AppAttestPolicy) -> Void
        let accepted: JSONValue
        let refused: JSONValue
        let code: String
    }

    static let cases: [Case] = [
        Case(
            description: "validation categories",
            configure: { $0.validationCategories = .only([.appStore]) },
            accepted: device(), refused: device(category: "testflight"), code: "validation_category_not_allowed"
        ),
        Case(
            description: "minimum bundle version",
            configure: { $0.minimumBundleVersion = BundleVersion("3.0") },
            accepted: device(version: "3.0.0"), refused: device(version: "2.99"), code: "bundle_version_too_old"
        ),
        Case(
            description: "allowed CDHashes",
            configure: { $0.allowedCDHashes = .init([SignalRouteTests.cdHash]) },
            accepted: device(), refused: device(cdHash: Array(SHA256.hash(data: Array("release 2.9".utf8)))), code: "cdhash_not_allowed"
        ),
        Case(
            description: "allowed CDHashes by bundle version",
            configure: { $0.allowedCDHashes = .init(byBundleVersion: [BundleVersion("3.0")!: [SignalRouteTests.cdHash]]) },
            accepted: device(), refused: device(version: "3.1"), code: "cdhash_not_allowed"
        ),
        Case(
            description: "require the CDHash",
            configure: { $0.requireCDHash = true },
            accepted: device(), refused: device(cdHash: nil), code: "cdhash_not_allowed"
        ),
        Case(
            description: "require the iOS 27 signals",
            configure: { $0.requireExtensions = true },
            accepted: device(spelling: "documentation"), refused: device(os: "ios26"), code: "extensions_required"
        ),
    ]

    @Test(
        "each policy of the service: attestations and assertions (AT set and clear), in both spellings, accepted, and refused with one change (401)",
        arguments: cases, ["apple", "documentation"]
    )
    func policy(_ policyCase: Case, spelling: String) async throws {
        var harness = try ServiceHarness()
        policyCase.configure(&harness.configuration.policy)
        let accepted = Self.with(policyCase.accepted, ["spelling": Self.text(spelling)])
        let refused = Self.with(policyCase.refused, ["spelling": Self.text(spelling)])
        try await harness.run { client in
            let (keyID, registered) = try await Self.register(client, device: accepted)
            #expect(registered.status == 200, "\(registered.json.map { String(decoding: $0.canonicalBytes, as: UTF8.self) } ?? "")")
            let refusal = try await Self.register(client, device: refused).1
            #expect(refusal.status == 401)
            #expect(refusal.errorCode == policyCase.code)

            for flags in [0x40, 0x00] {
                let signed = try await Self.assert(client, keyID: keyID, device: Self.with(accepted, ["assertionFlags": .number(Double(flags))]))
                #expect(signed.status == 200, "flags \(flags)")
                let rejected = try await Self.assert(client, keyID: keyID, device: Self.with(refused, ["assertionFlags": .number(Double(flags))]))
                #expect(rejected.status == 401, "flags \(flags)")
                #expect(rejected.errorCode == policyCase.code, "flags \(flags)")
            }
        }
        try await OpenAPIConformance.check(harness.recorder)
    }

    @Test("macOS 27: a required access control accepts the exact value and refuses another")
    func accessControl() async throws {
        var harness = try ServiceHarness()
        harness.configuration.policy.requiredAccessControl = SimulatedDevice.sampleAccessControl
        try await harness.run { client in
            #expect(try await Self.register(client, device: Self.device(os: "macos27")).1.status == 200)
            let refused = try await Self.register(client, device: Self.device(os: "ios27")).1
            #expect(refused.status == 401)
            #expect(refused.errorCode == "access_control_mismatch")
        }
    }

    /// `device` with the members of `changes` replacing its own (an ios26 device has none to change).
    static func with(_ device: JSONValue, _ changes: [String: JSONValue]) -> JSONValue {
        guard case .object(let object) = device, object["os"]?.stringValue != "ios26" else { return device }
        let members = object.members.map { ($0.name.string, changes[$0.name.string] ?? $0.value) }
        return .object(JSONObject(constantMembers: members))
    }
}
