//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import CanonicalJSON
import FormAttestFlows
import FormAttestForm
import FormAttestServer
import FormAttestTestSupport
import FormAttestTokens
import Foundation
import HTTPTypes
import JWTKit
import Testing

/// Every endpoint and every error status, in process; then each recorded response is checked
/// against schemas/openapi.yaml (e2e/interop/check_openapi.py).
struct RouteTests {
    static func text(_ value: String) -> JSONValue { .string(JSONString(value)) }

    @Test("the whole API: flows, tokens, errors by status, health, metrics, JWKS, demo files; all match the OpenAPI document")
    func api() async throws {
        let harness = try ServiceHarness()
        let store = harness.store
        let keys = harness.keys
        try await harness.run { client in
            // Challenges.
            let challenge = try await client.send(.get, "/api/appattest/challenge?purpose=form&username=alice", template: "/api/appattest/challenge")
            #expect(challenge.status == 200)
            #expect(challenge.json?["purpose"]?.stringValue == "form")
            let challengeText = try #require(challenge.json?["challenge"]?.stringValue)
            #expect(Base64URL.decode(challengeText)?.count == 32)
            let badPurpose = try await client.send(.get, "/api/appattest/challenge?purpose=other", template: "/api/appattest/challenge")
            #expect(badPurpose.status == 400)

            // Register a key while signing a form that answers the challenge.
            let registrationForm = ServiceHarness.form(challenge: challengeText)
            let (keyID, registered) = try await ServiceHarness.register(client, form: registrationForm)
            #expect(registered.status == 200)
            #expect(registered.json?["verified"] == .bool(true))
            #expect(registered.json?["counter"] == .number(0))
            #expect(registered.json?["formHash"]?.stringValue == Base64URL.encode(try SignedForm(value: registrationForm).clientDataHash))
            #expect(registered.json?["formats"]?["fido2Wrapper"]?["type"]?.stringValue == "wrapped-attestation")
            let token = try #require(registered.json?["formats"]?["serverAttestation"]?.stringValue)

            // The token verifies with the published JWKS.
            let jwks = try await client.send(.get, "/.well-known/jwks.json", template: "/.well-known/jwks.json")
            #expect(jwks.status == 200)
            let collection = JWTKeyCollection()
            try await collection.add(jwksJSON: String(decoding: jwks.body, as: UTF8.self))
            let claims = try await collection.verify(token, as: ServerAttestationClaims.self)
            #expect(claims.subject.value == "alice")
            #expect(claims.keyID == keyID)
            #expect(jwks.json?["keys"] == keys.jwks["keys"])

            // Sign forms with the key.
            let payment = ServiceHarness.form(amount: "25.00")
            let assertion = try await ServiceHarness.assertion(client, keyID: keyID, form: payment)
            let assertBody: [(String, JSONValue)] = [
                ("username", Self.text("alice")), ("keyId", Self.text(keyID)), ("assertion", Self.text(assertion)), ("form", payment),
            ]
            let signed = try await client.post("/api/appattest/assert", assertBody)
            #expect(signed.status == 200)
            #expect(signed.json?["counter"] == .number(1))
            #expect(signed.json?["formats"]?["serverAttestation"]?.stringValue != nil)

            // 409: the same form again.
            let replay = try await client.post("/api/appattest/assert", assertBody)
            #expect(replay.status == 409)
            #expect(replay.errorCode == "replay")

            // 401: a signature over another form; an unknown key.
            let otherForm = ServiceHarness.form(amount: "9999.00")
            let tampered = try await client.post(
                "/api/appattest/assert",
                [
                    ("username", Self.text("alice")), ("keyId", Self.text(keyID)),
                    ("assertion", Self.text(try await ServiceHarness.assertion(client, keyID: keyID, form: payment))), ("form", otherForm),
                ])
            #expect(tampered.status == 401)
            #expect(tampered.errorCode == "signature_invalid")
            let unknown = try await client.post(
                "/api/appattest/assert",
                [
                    ("username", Self.text("alice")), ("keyId", Self.text(Base64URL.encode([UInt8](repeating: 1, count: 32)))),
                    ("assertion", Self.text(assertion)), ("form", payment),
                ])
            #expect(unknown.status == 401)
            #expect(unknown.errorCode == "key_mismatch")

            // 422: an old form; another user's form.
            let old = ServiceHarness.form(at: Date().addingTimeInterval(-3600))
            let stale = try await client.post(
                "/api/appattest/assert",
                [
                    ("username", Self.text("alice")), ("keyId", Self.text(keyID)),
                    ("assertion", Self.text(try await ServiceHarness.assertion(client, keyID: keyID, form: old))), ("form", old),
                ])
            #expect(stale.status == 422)
            #expect(stale.errorCode == "timestamp_outside_window")
            let bobs = ServiceHarness.form(user: "bob")
            let binding = try await client.post(
                "/api/appattest/assert",
                [
                    ("username", Self.text("alice")), ("keyId", Self.text(keyID)),
                    ("assertion", Self.text(try await ServiceHarness.assertion(client, keyID: keyID, form: bobs))), ("form", bobs),
                ])
            #expect(binding.status == 422)
            #expect(binding.errorCode == "binding_mismatch")

            // 400: duplicate names or a lone surrogate anywhere in the body, bad base64, missing fields.
            for raw in [
                #"{"username":"alice","keyId":"AA","assertion":"AA","form":{"to":"bob","to":"eve"}}"#,
                #"{"username":"alice","keyId":"AA","assertion":"AA","form":{"to":"\ud800"}}"#,
                #"{"username":"alice","username":"bob"}"#,
            ] {
                let refused = try await client.send(.post, "/api/appattest/assert", template: "/api/appattest/assert", body: Array(raw.utf8))
                #expect(refused.status == 400)
                #expect(refused.errorCode == "invalid_json")
            }
            let badBase64 = try await client.post(
                "/api/appattest/assert",
                [("username", Self.text("alice")), ("keyId", Self.text("%%%")), ("assertion", Self.text(assertion)), ("form", payment)])
            #expect(badBase64.status == 400)
            #expect(badBase64.errorCode == "invalid_request")
            let missing = try await client.post("/api/appattest/attest", [("username", Self.text("alice"))])
            #expect(missing.status == 400)

            // 413: a body over 64 KiB.
            let huge = try await client.send(
                .post, "/api/appattest/assert", template: "/api/appattest/assert", body: Array(repeating: UInt8(ascii: " "), count: 65 * 1024))
            #expect(huge.status == 413)
            #expect(huge.errorCode == "body_too_large")

            // 409: a form signed earlier (lower counter) arrives after a later one was accepted: refused,
            // the key kept (the default counter rule; HostileStateRouteTests has the strict one's 428).
            let earlier = ServiceHarness.form(amount: "1.00")
            let earlierAssertion = try await ServiceHarness.assertion(client, keyID: keyID, form: earlier)
            let later = ServiceHarness.form(amount: "2.00")
            let laterAssertion = try await ServiceHarness.assertion(client, keyID: keyID, form: later)
            let accepted = try await client.post(
                "/api/appattest/assert",
                [("username", Self.text("alice")), ("keyId", Self.text(keyID)), ("assertion", Self.text(laterAssertion)), ("form", later)])
            #expect(accepted.status == 200)
            let backwards = try await client.post(
                "/api/appattest/assert",
                [("username", Self.text("alice")), ("keyId", Self.text(keyID)), ("assertion", Self.text(earlierAssertion)), ("form", earlier)])
            #expect(backwards.status == 409)
            #expect(backwards.errorCode == "counter_out_of_order")

            // Inspect: the three views, no verdict; malformed input is shown, not refused.
            let simulated = try await client.post("/api/dev/simulate", [("action", Self.text("attest")), ("form", ServiceHarness.form())])
            let object = simulated.json?["attestationObject"] ?? .null
            let expectedRoots = ["semantic": "attestation object", "forensic": "attestation object", "tree": "map(3)"]
            for (mode, label) in expectedRoots {
                let inspect = try await client.post("/api/appattest/inspect", [("attestationObject", object), ("mode", Self.text(mode))])
                #expect(inspect.status == 200)
                #expect(inspect.json?["mode"]?.stringValue == mode)
                #expect(inspect.json?["root"]?["label"]?.stringValue == label)
                #expect(inspect.json?["text"]?.stringValue?.isEmpty == false)
                #expect(inspect.json?["verified"] == nil)
            }
            let truncated = try await client.post("/api/appattest/inspect", [("assertion", Self.text("oWE"))])
            #expect(truncated.status == 200)
            #expect(truncated.json?["root"]?["value"]?.stringValue?.hasPrefix("undecodable") == true)
            let twoObjects = try await client.post("/api/appattest/inspect", [("assertion", Self.text("oWE")), ("receipt", Self.text("MAA"))])
            #expect(twoObjects.status == 400)
            let badMode = try await client.post("/api/appattest/inspect", [("assertion", Self.text("oWE")), ("mode", Self.text("verdict"))])
            #expect(badMode.status == 400)

            // Health, metrics, demo files, unknown routes.
            let health = try await client.send(.get, "/healthz", template: "/healthz")
            #expect(health.status == 200)
            let metrics = try await client.send(.get, "/metrics", template: "/metrics")
            #expect(metrics.status == 200)
            #expect(String(decoding: metrics.body, as: UTF8.self).contains("formattest_flow_outcomes_total"))
            let demo = try await client.send(.get, "/appattest-demo.html", template: "/appattest-demo.html")
            #expect(demo.status == 200)
            let notFound = try await client.send(.get, "/nope", template: "/nope")
            #expect(notFound.status == 404)
            #expect(notFound.errorCode == "not_found")

            // 503: the store is down; health says so too; nothing is accepted.
            await store.setUnavailable(true)
            let down = try await client.post(
                "/api/appattest/assert",
                [
                    ("username", Self.text("alice")), ("keyId", Self.text(keyID)),
                    ("assertion", Self.text(try await ServiceHarness.assertion(client, keyID: keyID, form: ServiceHarness.form()))),
                    ("form", ServiceHarness.form()),
                ])
            #expect(down.status == 503)
            #expect(down.errorCode == "store_unavailable")
            let unhealthy = try await client.send(.get, "/healthz", template: "/healthz")
            #expect(unhealthy.status == 503)
            await store.setUnavailable(false)
        }
        try await OpenAPIConformance.check(harness.recorder)
    }

    @Test("pooled registration over HTTP; challenge rotation returns next_challenge on success and on error")
    func pooledAndRotation() async throws {
        let harness = try ServiceHarness(rotate: true)
        try await harness.run { client in
            let pool = try await client.send(.get, "/api/appattest/challenge?purpose=pool", template: "/api/appattest/challenge")
            let poolChallenge = try #require(pool.json?["challenge"]?.stringValue)
            // The main app attests a key over the pool challenge; later an extension signs a form.
            let pooledKey = try await client.post(
                "/api/dev/simulate", [("action", Self.text("attest")), ("poolChallenge", Self.text(poolChallenge))])
            let pooledKeyID = try #require(pooledKey.json?["keyId"]?.stringValue)
            let extensionForm = ServiceHarness.form(amount: "3.00")
            let pooledBody: [(String, JSONValue)] = [
                ("username", Self.text("alice")), ("keyId", Self.text(pooledKeyID)),
                ("attestationObject", pooledKey.json?["attestationObject"] ?? .null), ("poolChallenge", Self.text(poolChallenge)),
                ("assertion", Self.text(try await ServiceHarness.assertion(client, keyID: pooledKeyID, form: extensionForm))),
                ("form", extensionForm),
            ]
            let pooled = try await client.post("/api/appattest/register-pooled", pooledBody)
            #expect(pooled.status == 200)
            #expect(pooled.json?["counter"] == .number(1))
            #expect(pooled.json?["formats"]?["fido2Wrapper"]?["credential"]?["signCount"] == .number(1))
            // The wrapper states what the attestation covered (the pool challenge), so that it
            // verifies on its own; the JWS names the form the assertion signed.
            let original = try #require(pooled.json?["formats"]?["fido2Wrapper"]?["original"])
            #expect(original["clientDataHash"]?.stringValue == poolChallenge)
            let verifier = try AppAttestVerifier(policy: harness.configuration.policy)
            _ = try await verifier.verifyAttestation(
                try #require(Base64URL.decode(original["attestationObject"]?.stringValue ?? "")),
                keyID: try #require(Base64URL.decode(pooledKeyID)),
                clientDataHash: try #require(Base64URL.decode(poolChallenge)),
                at: Date()
            )
            let jws = try #require(pooled.json?["formats"]?["serverAttestation"]?.stringValue)
            let payload = try #require(Base64URL.decode(String(jws.split(separator: ".")[1])))
            #expect(try CanonicalJSON.parse(payload)["form_hash"] == pooled.json?["formHash"])
            #expect(pooled.json?["formHash"]?.stringValue != poolChallenge)
            let reused = try await client.post("/api/appattest/register-pooled", pooledBody)
            #expect(reused.status == 409 || reused.status == 422)

            let (keyID, registered) = try await ServiceHarness.register(client, form: ServiceHarness.form())
            #expect(registered.json?["next_challenge"]?["challenge"]?.stringValue != nil)
            let again = try await client.post(
                "/api/appattest/attest",
                [
                    ("username", Self.text("alice")), ("keyId", Self.text(keyID)), ("attestationObject", Self.text("oA")),
                    ("form", ServiceHarness.form()),
                ]
            )
            #expect(again.status == 400 || again.status == 409)
            #expect(again.json?["next_challenge"]?["challenge"]?.stringValue != nil)
            #expect(Base64URL.decode(poolChallenge)?.count == 32)
        }
        try await OpenAPIConformance.check(harness.recorder)
    }

    @Test("the simulated device names a keyId it does not hold (as after a server restart): 404 simulator_unknown_key; a key it holds signs")
    func simulatorUnknownKey() async throws {
        let harness = try ServiceHarness()
        try await harness.run { client in
            let attested = try await client.post("/api/dev/simulate", [("action", Self.text("attest")), ("form", ServiceHarness.form())])
            let keyID = try #require(attested.json?["keyId"]?.stringValue)
            let held = try await client.post(
                "/api/dev/simulate", [("action", Self.text("assert")), ("keyId", Self.text(keyID)), ("form", ServiceHarness.form())])
            #expect(held.status == 200 && held.json?["assertion"]?.stringValue != nil, "\(held.status) \(held.errorCode ?? "")")
            // The same request with a keyId of the same length that the device never made.
            let unknownID = Base64URL.encode([UInt8](repeating: 7, count: try #require(Base64URL.decode(keyID)).count))
            let unknown = try await client.post(
                "/api/dev/simulate", [("action", Self.text("assert")), ("keyId", Self.text(unknownID)), ("form", ServiceHarness.form())])
            #expect(unknown.status == 404)
            #expect(unknown.errorCode == "simulator_unknown_key")
            #expect(unknown.json?["error"]?["message"]?.stringValue?.contains("server restart") == true)
        }
        try await OpenAPIConformance.check(harness.recorder)
    }

    @Test("without --dev-simulator there is no simulate endpoint")
    func noSimulator() async throws {
        let harness = try ServiceHarness(devSimulator: false)
        try await harness.run { client in
            let answer = try await client.post("/api/dev/simulate", [("action", Self.text("attest")), ("form", ServiceHarness.form())])
            #expect(answer.status == 404)
        }
    }
}

/// Runs e2e/interop/check_openapi.py on the recorded exchanges.
enum OpenAPIConformance {
    static func check(_ recorder: ResponseRecorder) async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("exchanges-\(UUID().uuidString).jsonl")
        defer { try? FileManager.default.removeItem(at: file) }
        try Data(recorder.jsonLines.utf8).write(to: file)
        let check = try await PythonCheck(venv: ".venv-interop", overrideVariable: "FORMATTEST_INTEROP_PYTHON").run(
            "e2e/interop/check_openapi.py",
            [repositoryDirectory.appendingPathComponent("schemas/openapi.yaml").path, file.path]
        )
        #expect(check.status == 0, "\(check.output)")
        #expect(check.output.contains("\(recorder.count) passed, 0 failed"), "\(check.output)")
    }
}
