//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import CanonicalJSON
import Crypto
import FormAttestEvidence
import FormAttestFlows
import FormAttestForm
import FormAttestServer
import FormAttestTestSupport
import FormAttestTokens
import Foundation
import Testing
import TransparencyLog
import WebAuthn

/// Evidence records of forms confirmed with a passkey, through the real service in process: the
/// software authenticator registers over HTTP, signs transfers alone and beside the simulated App
/// Attest device, and each accepted form's archived record verifies offline (version 3).
struct PasskeyEvidenceRouteTests {
    static func text(_ value: String) -> JSONValue { .string(JSONString(value)) }

    /// Transfers need a passkey with UV (App Attest optional), every other form App Attest; evidence
    /// archived in `archive`, and logged in `log` when given.
    static func harness(archive: URL, log: URL? = nil) throws -> ServiceHarness {
        var harness = try ServiceHarness()
        harness.configuration.passkeys = PasskeyDevice.policy()
        harness.configuration.flows.factorPolicy = try FactorPolicy(setting: "*=app-attest,transfer=passkey-uv")
        harness.configuration.policy.requireValidReceipt = true
        let logConfiguration = try log.map {
            EvidenceLogConfiguration(directory: $0.path, signer: try NoteSigner(name: "bank.example/evidence", seed: Array(repeating: 3, count: 32)))
        }
        harness.configuration.evidence = EvidenceConfiguration(archiveDirectory: archive.path, log: logConfiguration)
        return harness
    }

    static func directory(_ name: String) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("\(name)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: false)
        return url
    }

    static func hash(_ form: JSONValue) throws -> [UInt8] { try SignedForm(jsonBytes: form.canonicalBytes).clientDataHash }

    /// The archived record of an answer, verified offline.
    static func verified(
        _ answer: ServiceHarness.Client.Answer, archive: URL, harness: ServiceHarness, registrations: EvidenceRecord.RegistrationResolver? = nil
    ) async throws -> SignedEvidence.Verified {
        try #require(answer.status == 200, "\(String(decoding: answer.body, as: UTF8.self))")
        let id = try #require(answer.json?["evidenceId"]?.stringValue)
        #expect(answer.json?["evidenceArchived"] == .bool(true))
        let file = try Array(Data(contentsOf: archive.appendingPathComponent("\(id).json")))
        let verified = try await SignedEvidence.verify(
            file, signers: try SignedEvidence.signers(jwks: harness.keys.jwks.canonicalBytes), trustAnchors: [harness.authority.rootCertificate],
            receiptTrustAnchors: [harness.authority.receiptAuthority.rootCertificate], registrations: registrations)
        #expect(verified.id == id)
        return verified
    }

    @Test("a transfer confirmed by a passkey alone, and one by App Attest and the passkey, each get a version-3 record that verifies offline")
    func passkeyRecords() async throws {
        let archive = try Self.directory("passkey-evidence")
        defer { try? FileManager.default.removeItem(at: archive) }
        let harness = try Self.harness(archive: archive)
        try await harness.run { client in
            var device = PasskeyDevice()
            let registered = try await PasskeyRouteTests.register(device, client)
            try #require(registered.status == 200, "\(String(decoding: registered.body, as: UTF8.self))")

            // The passkey alone.
            let alone = ServiceHarness.form(amount: "250.00")
            let confirmed = try await client.post(
                "/api/appattest/assert",
                [
                    ("username", Self.text("alice")), ("passkey", try PasskeyRouteTests.json(device.sign(challenge: try Self.hash(alone)))),
                    ("form", alone),
                ])
            #expect(confirmed.json?["factors"] == .array([Self.text("passkey")]))
            let first = try await Self.verified(confirmed, archive: archive, harness: harness)
            #expect(first.record.kind == .passkey && first.record.version == 3)
            #expect(first.record.form == alone.canonicalBytes)
            #expect(first.record.methodReferences == ["hwk", "user", "mfa"])
            let passkey = try #require(first.record.passkey)
            #expect(passkey.credentialID == device.credentialID && passkey.assertion.credentialID == device.credentialID)
            #expect(passkey.assertion.userVerified && passkey.policy.requireUserVerification && passkey.policy.relyingPartyID == PasskeyDevice.rpID)
            #expect(passkey.policy.origins == [PasskeyDevice.origin])
            #expect(passkey.registration.verifiedAt <= first.record.verifiedAt)

            // App Attest and the passkey together (a login registers the key: App Attest alone).
            let (keyID, attested) = try await ServiceHarness.register(client, form: ServiceHarness.form(action: "login"))
            #expect(attested.status == 200)
            let both = ServiceHarness.form(amount: "99.00")
            let assertion = try await ServiceHarness.assertion(client, keyID: keyID, form: both)
            let confirmedBoth = try await client.post(
                "/api/appattest/assert",
                [
                    ("username", Self.text("alice")), ("keyId", Self.text(keyID)), ("assertion", Self.text(assertion)),
                    ("passkey", try PasskeyRouteTests.json(device.sign(challenge: try Self.hash(both)))), ("form", both),
                ])
            #expect(confirmedBoth.json?["factors"] == .array([Self.text("app-attest"), Self.text("passkey")]))
            let second = try await Self.verified(confirmedBoth, archive: archive, harness: harness)
            #expect(second.record.kind == .assertion && second.record.version == 3 && second.record.counter == 1)
            #expect(Base64URL.encode(second.record.keyID) == keyID)
            // The JWS and the record state the same factors.
            let token = try #require(confirmedBoth.json?["formats"]?["serverAttestation"]?.stringValue)
            let claims = try CanonicalJSON.parse(try #require(Base64URL.decode(String(token.split(separator: ".")[1]))))
            #expect(claims["amr"] == .array(second.record.methodReferences.map(Self.text)), "\(claims)")

            // A replay is refused and recorded nowhere: three records (the passkey's form, the key's
            // registering login, the form of both).
            let replay = try await client.post(
                "/api/appattest/assert",
                [
                    ("username", Self.text("alice")), ("passkey", try PasskeyRouteTests.json(device.sign(challenge: try Self.hash(alone)))),
                    ("form", alone),
                ])
            #expect(replay.status == 409 && replay.json?["evidenceId"] == nil)
            #expect(try FileManager.default.contentsOfDirectory(atPath: archive.path).count == 3)
        }
        try await OpenAPIConformance.check(harness.recorder)
    }

    @Test("with the evidence log on, a record of both factors references the App Attest key's registration and carries the passkey's")
    func loggedRecords() async throws {
        let archive = try Self.directory("passkey-evidence")
        let log = try Self.directory("passkey-evidence-log")
        defer {
            try? FileManager.default.removeItem(at: archive)
            try? FileManager.default.removeItem(at: log)
        }
        let harness = try Self.harness(archive: archive, log: log)
        try await harness.run { client in
            let device = PasskeyDevice()
            var signer = device
            try #require(try await PasskeyRouteTests.register(device, client).status == 200)
            let (keyID, _) = try await ServiceHarness.register(client, form: ServiceHarness.form(action: "login"))
            let form = ServiceHarness.form(amount: "42.00")
            let assertion = try await ServiceHarness.assertion(client, keyID: keyID, form: form)
            let confirmed = try await client.post(
                "/api/appattest/assert",
                [
                    ("username", Self.text("alice")), ("keyId", Self.text(keyID)), ("assertion", Self.text(assertion)),
                    ("passkey", try PasskeyRouteTests.json(signer.sign(challenge: try Self.hash(form)))), ("form", form),
                ])
            #expect(confirmed.json?["evidenceLogIndex"] != nil, "\(String(decoding: confirmed.body, as: UTF8.self))")
            // The registration is read from the log's directory, where the service stored it.
            let registrations: EvidenceRecord.RegistrationResolver = { id in
                let hex = id.map { String(format: "%02x", $0) }.joined()
                let path = log.appendingPathComponent("registrations/\(hex.prefix(2))/\(hex.dropFirst(2).prefix(2))/\(hex).json")
                return try? Array(Data(contentsOf: path))
            }
            let verified = try await Self.verified(confirmed, archive: archive, harness: harness, registrations: registrations)
            #expect(verified.record.format == .referencingRegistration && verified.record.version == 3 && verified.record.passkey != nil)
        }
    }
}
