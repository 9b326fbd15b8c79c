//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import FormAttestFlows
import FormAttestForm
import FormAttestServer
import FormAttestTestSupport
import Foundation
import HTTPTypes
import Testing
import WebAuthn

/// Passkeys over HTTP, in process: the options, the registration, and `POST /api/appattest/assert`
/// with a `passkey` member, under the factor policy `*=app-attest,transfer=app-attest+passkey-uv`
/// (ServiceHarness's forms are transfers).
struct PasskeyRouteTests {
    static func text(_ value: String) -> JSONValue { .string(JSONString(value)) }

    static func harness(passkeys: Bool = true) throws -> ServiceHarness {
        var harness = try ServiceHarness()
        if passkeys {
            harness.configuration.passkeys = PasskeyDevice.policy()
            harness.configuration.flows.factorPolicy = try FactorPolicy(setting: "*=app-attest,transfer=app-attest+passkey-uv")
        }
        return harness
    }

    static func hash(_ form: JSONValue) throws -> [UInt8] { try SignedForm(jsonBytes: form.canonicalBytes).clientDataHash }

    static func json(_ bytes: [UInt8]) throws -> JSONValue { try CanonicalJSON.parse(bytes) }

    /// Options, then the registration of `device` for alice: the registration's answer. `approver`,
    /// one of alice's passkeys, signs the challenge as the registration's approval.
    static func register(
        _ device: PasskeyDevice, _ client: ServiceHarness.Client, approver: PasskeyDevice? = nil
    ) async throws -> ServiceHarness.Client.Answer {
        let options = try await client.send(.get, "/api/passkeys/options?username=alice", template: "/api/passkeys/options")
        #expect(options.status == 200, "\(String(decoding: options.body, as: UTF8.self))")
        #expect(options.json?["challenge"]?["purpose"]?.stringValue == "passkey" && options.json?["rpId"]?.stringValue == PasskeyDevice.rpID)
        let challenge = try #require(options.json?["challenge"]?["challenge"]?.stringValue)
        let userHandle = try #require(options.json?["userHandle"]?.stringValue)
        var members: [(String, JSONValue)] = [
            ("username", Self.text("alice")), ("challenge", Self.text(challenge)), ("userHandle", Self.text(userHandle)),
            ("credential", try Self.json(device.register(challenge: try #require(Base64URL.decode(challenge))))),
        ]
        if var approver { members.append(("approval", try Self.json(approver.sign(challenge: try #require(Base64URL.decode(challenge)))))) }
        return try await client.post("/api/passkeys/register", members)
    }

    @Test("a passkey registered over HTTP and an App Attest key confirm a transfer together; the same form again with either factor is 409 replay")
    func bothFactors() async throws {
        let harness = try Self.harness()
        try await harness.run { client in
            var device = PasskeyDevice()
            let registered = try await Self.register(device, client)
            #expect(registered.status == 200, "\(String(decoding: registered.body, as: UTF8.self))")
            #expect(registered.json?["credentialId"]?.stringValue == Base64URL.encode(device.credentialID))
            #expect(registered.json?["transports"] == .array([Self.text("internal"), Self.text("hybrid")]))
            let (keyID, attested) = try await ServiceHarness.register(client, form: ServiceHarness.form(action: "login"))
            #expect(attested.status == 200)

            let form = ServiceHarness.form()
            let assertion = try await ServiceHarness.assertion(client, keyID: keyID, form: form)
            let passkey = try Self.json(device.sign(challenge: try Self.hash(form)))
            let both = try await client.post(
                "/api/appattest/assert",
                [
                    ("username", Self.text("alice")), ("keyId", Self.text(keyID)), ("assertion", Self.text(assertion)), ("passkey", passkey),
                    ("form", form),
                ])
            #expect(both.status == 200, "\(String(decoding: both.body, as: UTF8.self))")
            #expect(both.json?["factors"] == .array([Self.text("app-attest"), Self.text("passkey")]))
            #expect(both.json?["passkey"]?["userVerified"] == .bool(true) && both.json?["keyId"]?.stringValue == keyID)
            // The server-signed JWS states both factors: amr and the passkey claim.
            let token = try #require(both.json?["formats"]?["serverAttestation"]?.stringValue)
            let parts = token.split(separator: ".")
            let claims = try CanonicalJSON.parse(try #require(Base64URL.decode(String(parts[1]))))
            #expect(claims["amr"] == .array(["hwk", "user", "mfa"].map(Self.text)), "\(claims)")
            #expect(claims["passkey"]?["cred_id"]?.stringValue == Base64URL.encode(device.credentialID))
            #expect(claims["passkey"]?["uv"] == .bool(true) && claims["key_id"]?.stringValue == keyID)

            // The same form again: the key alone, the passkey alone, both (new assertions each).
            let again = try await ServiceHarness.assertion(client, keyID: keyID, form: form)
            let keyAlone = try await client.post(
                "/api/appattest/assert",
                [("username", Self.text("alice")), ("keyId", Self.text(keyID)), ("assertion", Self.text(again)), ("form", form)])
            #expect(keyAlone.status == 409 && keyAlone.errorCode == "replay", "\(keyAlone.status) \(keyAlone.errorCode ?? "")")
            let passkeyAlone = try await client.post(
                "/api/appattest/assert",
                [("username", Self.text("alice")), ("passkey", try Self.json(device.sign(challenge: try Self.hash(form)))), ("form", form)])
            #expect(passkeyAlone.status == 409 && passkeyAlone.errorCode == "replay", "\(passkeyAlone.status) \(passkeyAlone.errorCode ?? "")")
        }
        // Every answer above (options, registration, Confirmed, Asserted-path errors) as the
        // OpenAPI document describes it.
        try await OpenAPIConformance.check(harness.recorder)
    }

    @Test(
        "r14 F1: eight first passkeys of one user registered at once (each over its own options): one is stored and the others refused, as one after the other"
    )
    func firstPasskeysRaced() async throws {
        var harness = try Self.harness()
        let store = WriteFailingStore(inner: harness.store)
        harness.storeOverride = store
        try await harness.run { client in
            // Eight options (challenges and first user handles) and eight registrations, built first.
            var bodies: [[(String, JSONValue)]] = []
            for id in UInt8(1)...8 {
                let options = try await client.send(.get, "/api/passkeys/options?username=alice", template: "/api/passkeys/options")
                let challenge = try #require(options.json?["challenge"]?["challenge"]?.stringValue)
                let userHandle = try #require(options.json?["userHandle"]?.stringValue)
                bodies.append([
                    ("username", Self.text("alice")), ("challenge", Self.text(challenge)), ("userHandle", Self.text(userHandle)),
                    ("credential", try Self.json(PasskeyDevice(id: id).register(challenge: try #require(Base64URL.decode(challenge))))),
                ])
            }
            // Each registration reads alice's passkeys (none) before any of them commits.
            await store.holdPasskeyReads(until: 8)
            let answers = try await withThrowingTaskGroup(of: (Int, String?).self) { group in
                for body in bodies {
                    group.addTask {
                        let answer = try await client.post("/api/passkeys/register", body)
                        return (answer.status, answer.errorCode)
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(answers.filter { $0.0 == 200 }.count == 1, "\(answers)")
            // Every one passed the flows' check (no passkey yet): the store's commit refuses the rest.
            #expect(answers.filter { $0.0 != 200 }.allSatisfy { $0 == (403, "passkey_approval_required") }, "\(answers)")
            #expect(try await store.inner.passkeyCredentials(username: "alice").activeCredentialIDs.count == 1)
        }
    }

    @Test(
        "under the passkey policy a transfer with App Attest alone is 403 passkey_required, a passkey over another form 401, a login needs App Attest alone"
    )
    func policyAndMismatch() async throws {
        let harness = try Self.harness()
        try await harness.run { client in
            var device = PasskeyDevice()
            #expect(try await Self.register(device, client).status == 200)
            let (keyID, _) = try await ServiceHarness.register(client, form: ServiceHarness.form(action: "login"))
            let transfer = ServiceHarness.form()
            let assertion = try await ServiceHarness.assertion(client, keyID: keyID, form: transfer)
            let alone = try await client.post(
                "/api/appattest/assert",
                [("username", Self.text("alice")), ("keyId", Self.text(keyID)), ("assertion", Self.text(assertion)), ("form", transfer)])
            #expect(alone.status == 403 && alone.errorCode == "passkey_required", "\(alone.status) \(alone.errorCode ?? "")")
            // The passkey signed another form (the amount changed): refused, and nothing recorded.
            let other = try Self.json(device.sign(challenge: try Self.hash(ServiceHarness.form(amount: "9999.00"))))
            let mismatch = try await client.post(
                "/api/appattest/assert",
                [
                    ("username", Self.text("alice")), ("keyId", Self.text(keyID)), ("assertion", Self.text(assertion)), ("passkey", other),
                    ("form", transfer),
                ])
            #expect(mismatch.status == 401 && mismatch.errorCode == "passkey_challenge_mismatch", "\(mismatch.status) \(mismatch.errorCode ?? "")")
            #expect(try await harness.store.isFormHashRecorded(try Self.hash(transfer), now: Date()) == false)
            // A form that is not a transfer needs App Attest alone, through the same endpoint as before.
            let login = ServiceHarness.form(action: "login")
            let loginAssertion = try await ServiceHarness.assertion(client, keyID: keyID, form: login)
            let accepted = try await client.post(
                "/api/appattest/assert",
                [("username", Self.text("alice")), ("keyId", Self.text(keyID)), ("assertion", Self.text(loginAssertion)), ("form", login)])
            #expect(accepted.status == 200 && accepted.json?["factors"] == nil, "\(accepted.status)")
            // Its JWS states the App Attest key alone, as before passkeys: no amr, no passkey claim.
            let token = try #require(accepted.json?["formats"]?["serverAttestation"]?.stringValue)
            let claims = try CanonicalJSON.parse(try #require(Base64URL.decode(String(token.split(separator: ".")[1]))))
            #expect(claims["amr"] == nil && claims["passkey"] == nil && claims["key_id"]?.stringValue == keyID)
        }
    }

    @Test(
        "a registration is refused with its code: a used challenge 422, another origin 401, a malformed body 400; without passkey settings 422 passkeys_disabled"
    )
    func registrationRefusals() async throws {
        let harness = try Self.harness()
        try await harness.run { client in
            let options = try await client.send(.get, "/api/passkeys/options?username=alice", template: "/api/passkeys/options")
            let challenge = try #require(options.json?["challenge"]?["challenge"]?.stringValue)
            let userHandle = try #require(options.json?["userHandle"]?.stringValue)
            var foreign = PasskeyDevice()
            foreign.origin = "https://evil.example"
            func register(_ device: PasskeyDevice, approvedBy approver: PasskeyDevice? = nil) async throws -> ServiceHarness.Client.Answer {
                var members: [(String, JSONValue)] = [
                    ("username", Self.text("alice")), ("challenge", Self.text(challenge)), ("userHandle", Self.text(userHandle)),
                    ("credential", try Self.json(device.register(challenge: try #require(Base64URL.decode(challenge))))),
                ]
                if var approver { members.append(("approval", try Self.json(approver.sign(challenge: try #require(Base64URL.decode(challenge)))))) }
                return try await client.post("/api/passkeys/register", members)
            }
            let origin = try await register(foreign)
            #expect(origin.status == 401 && origin.errorCode == "passkey_origin_not_allowed", "\(origin.status) \(origin.errorCode ?? "")")
            let genuine = PasskeyDevice()
            #expect(try await register(genuine).status == 200)
            let used = try await register(PasskeyDevice(id: 2), approvedBy: genuine)
            #expect(used.status == 422 && used.errorCode == "challenge_invalid", "\(used.status) \(used.errorCode ?? "")")
            let malformed = try await client.post(
                "/api/passkeys/register",
                [
                    ("username", Self.text("alice")), ("challenge", Self.text(challenge)), ("userHandle", Self.text(userHandle)),
                    ("credential", Self.text("x")),
                ])
            #expect(malformed.status == 400 && malformed.errorCode == "invalid_request", "\(malformed.status) \(malformed.errorCode ?? "")")
        }
        let disabled = try Self.harness(passkeys: false)
        try await disabled.run { client in
            let options = try await client.send(.get, "/api/passkeys/options?username=alice", template: "/api/passkeys/options")
            #expect(options.status == 422 && options.errorCode == "passkeys_disabled", "\(options.status) \(options.errorCode ?? "")")
        }
    }
    @Test(
        "the registration's answer carries the FIDO2 wrapper's passkey counterpart: the credential as stored, the registration as sent, verifiable again"
    )
    func fido2Wrapper() async throws {
        let harness = try Self.harness()
        try await harness.run { client in
            var device = PasskeyDevice()
            device.flags |= 0x08 | 0x10  // a synced passkey: BE and BS
            let registered = try await Self.register(device, client)
            try #require(registered.status == 200, "\(String(decoding: registered.body, as: UTF8.self))")
            let wrapper = try #require(registered.json?["formats"]?["fido2Wrapper"])
            #expect(wrapper["type"]?.stringValue == "wrapped-attestation" && wrapper["version"] == .number(1))
            let credential = try #require(wrapper["credential"])
            let id = Base64URL.encode(device.credentialID)
            #expect(credential["id"]?.stringValue == id && credential["rawId"]?.stringValue == id)
            #expect(credential["type"]?.stringValue == "public-key" && credential["publicKeyAlgorithm"] == .number(-7))
            #expect(
                credential["attestationFormat"]?.stringValue == "none" && credential["aaguid"]?.stringValue == "00000000-0000-0000-0000-000000000000")
            #expect(credential["backupEligible"] == .bool(true) && credential["backedUp"] == .bool(true))
            #expect(credential["transports"] == .array([Self.text("internal"), Self.text("hybrid")]))
            #expect(credential["userVerified"] == nil, "a ceremony's flag, not the credential's")
            let original = try #require(wrapper["original"])
            #expect(original["fmt"]?.stringValue == "none" && original["credentialId"]?.stringValue == id)
            #expect(original["rpId"]?.stringValue == PasskeyDevice.rpID && original["attestationAnchored"] == nil)
            // The registration as sent verifies again from the wrapper alone, to the same key: the
            // clientDataJSON (its challenge) and the attestation object are the client's bytes.
            let clientDataJSON = try #require(original["clientDataJSON"]?.stringValue.flatMap(Base64URL.decode))
            let challenge = try #require(try Self.json(clientDataJSON)["challenge"]?.stringValue.flatMap(Base64URL.decode))
            let response = JSONValue.object(
                JSONObject(constantMembers: [
                    ("id", Self.text(id)), ("rawId", Self.text(id)), ("type", Self.text("public-key")),
                    (
                        "response",
                        .object(
                            JSONObject(constantMembers: [
                                ("clientDataJSON", Self.text(Base64URL.encode(clientDataJSON))),
                                ("attestationObject", try #require(original["attestationObject"])),
                            ]))
                    ),
                ])
            ).canonicalBytes
            let verifier = try WebAuthnVerifier(policy: PasskeyDevice.policy())
            let again = try await verifier.verifyRegistration(json: response, challenge: challenge, at: Date())
            #expect(Base64URL.encode(again.publicKey.cborEncoded) == credential["publicKey"]?.stringValue)
            #expect(again.credentialID == device.credentialID)
        }
        try await OpenAPIConformance.check(harness.recorder)
    }

    @Test(
        "operators list a user's passkeys a page at a time and revoke one: its next assertion is 401 passkey_revoked; bad ids 400, unknown 404, no secret 401"
    )
    func adminPasskeys() async throws {
        let adminSecret = String(repeating: "z", count: 48)
        var harness = try Self.harness()
        harness.configuration.adminSecrets = try BackendSecrets(fileText: adminSecret)
        // A passkey alone confirms a form here: the refusal below is the revocation's.
        harness.configuration.flows.factorPolicy = try FactorPolicy(setting: "*=passkey")
        let store = harness.store
        try await harness.run { client in
            var first = PasskeyDevice(id: 1)
            let second = PasskeyDevice(id: 2)
            #expect(try await Self.register(first, client).status == 200)
            // A second passkey needs the first's approval.
            let unapproved = try await Self.register(second, client)
            #expect(
                unapproved.status == 403 && unapproved.errorCode == "passkey_approval_required", "\(unapproved.status) \(unapproved.errorCode ?? "")")
            let approved = try await Self.register(second, client, approver: first)
            #expect(approved.status == 200, "\(approved.status) \(approved.errorCode ?? "")")
            let admin = client.with(bearer: adminSecret)
            let template = "/admin/users/{username}/passkeys"
            var seen: [String] = []
            var after: String?
            var pages = 0
            repeat {
                let page = try await admin.send(
                    .get, "/admin/users/alice/passkeys?limit=1" + (after.map { "&after=\($0)" } ?? ""), template: template)
                try #require(page.status == 200, "\(page.status) \(page.errorCode ?? "")")
                #expect(page.json?["totalPasskeys"] == .number(2) && page.json?["activePasskeys"] == .number(2))
                #expect(page.json?["recentRegistrations"] == .number(2))
                guard case .array(let entries)? = page.json?["passkeys"] else { Issue.record("no passkeys array"); return }
                #expect(entries.count == 1 && entries.first?["status"]?.stringValue == "active")
                seen += entries.compactMap { $0["credentialId"]?.stringValue }
                after = page.json?["next"]?.stringValue
                pages += 1
            } while after != nil && pages < 5
            #expect(Set(seen) == [Base64URL.encode(first.credentialID), Base64URL.encode(second.credentialID)] && pages == 2)

            // Revoked by an operator: listed as revoked, and its next assertion refused.
            let id = Base64URL.encode(first.credentialID)
            let revoked = try await admin.send(.post, "/admin/passkeys/\(id)/revoke", template: "/admin/passkeys/{credentialId}/revoke")
            #expect(revoked.status == 200 && revoked.json?["credentialId"]?.stringValue == id, "\(revoked.status) \(revoked.errorCode ?? "")")
            let revokedAt = try #require(revoked.json?["revokedAt"]?.stringValue)
            let twice = try await admin.send(.post, "/admin/passkeys/\(id)/revoke", template: "/admin/passkeys/{credentialId}/revoke")
            #expect(twice.status == 200 && twice.json?["revokedAt"]?.stringValue == revokedAt, "the first revocation's time is kept")
            let listing = try await admin.send(.get, "/admin/users/alice/passkeys", template: template)
            #expect(listing.json?["activePasskeys"] == .number(1) && listing.json?["totalPasskeys"] == .number(2))
            let form = ServiceHarness.form(action: "login")
            let refused = try await client.post(
                "/api/appattest/assert",
                [("username", Self.text("alice")), ("passkey", try Self.json(first.sign(challenge: try Self.hash(form)))), ("form", form)])
            #expect(refused.status == 401 && refused.errorCode == "passkey_revoked", "\(refused.status) \(refused.errorCode ?? "")")

            // An id nobody registered; ids that are not 1 to 1023 bytes of base64url; no secret.
            let unknown = try await admin.send(
                .post, "/admin/passkeys/\(Base64URL.encode([UInt8](repeating: 7, count: 16)))/revoke",
                template: "/admin/passkeys/{credentialId}/revoke")
            #expect(unknown.status == 404 && unknown.errorCode == "unknown_passkey", "\(unknown.status) \(unknown.errorCode ?? "")")
            for bad in ["x", "%2B%2F", String(repeating: "A", count: 1366), "AA=A"] {
                let answer = try await admin.send(.post, "/admin/passkeys/\(bad)/revoke", template: "/admin/passkeys/{credentialId}/revoke")
                #expect(
                    answer.status == 400 && answer.errorCode == "invalid_request", "\(bad.prefix(10)): \(answer.status) \(answer.errorCode ?? "")")
            }
            for query in ["limit=0", "after=x", "after=\(Base64URL.encode([UInt8](repeating: 7, count: 16)))", "limit=1&limit=2"] {
                let answer = try await admin.send(.get, "/admin/users/alice/passkeys?" + query, template: template)
                #expect(answer.status == 400, "\(query): \(answer.status)")
            }
            // Another user's passkey is not a position in alice's listing.
            let bobs = try await admin.send(.get, "/admin/users/bob/passkeys?after=\(Base64URL.encode(second.credentialID))", template: template)
            #expect(bobs.status == 400 && bobs.errorCode == "invalid_request")
            let anonymous = try await client.send(.get, "/admin/users/alice/passkeys", template: template)
            #expect(anonymous.status == 401)
            let anonymousRevoke = try await client.send(
                .post, "/admin/passkeys/\(Base64URL.encode(second.credentialID))/revoke", template: "/admin/passkeys/{credentialId}/revoke")
            #expect(anonymousRevoke.status == 401)
            #expect(try await store.loadPasskey(credentialID: second.credentialID)?.revokedAt == nil, "nothing changed")
        }
    }
}
