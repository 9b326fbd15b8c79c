//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestForm
import FormAttestTestSupport
import Foundation
import Testing

/// Issue 30 through the built binary (`formattest-dev serve --dev-simulator` with passkey settings
/// and the policy `*=app-attest,transfer=app-attest+passkey-uv`, a SQLite store): an App Attest key
/// (the simulated device) and a passkey (a software authenticator) confirm a transfer together;
/// the same form again with either factor is 409 replay; a transfer with App Attest alone is 403
/// passkey_required; a passkey assertion over another form is refused.
struct PasskeySystemTests {
    static func hash(_ form: [String: Any]) throws -> [UInt8] {
        try SignedForm(jsonBytes: Array(try JSONSerialization.data(withJSONObject: form))).clientDataHash
    }

    static func object(_ bytes: [UInt8]) throws -> Any { try JSONSerialization.jsonObject(with: Data(bytes)) }

    @Test(
        "a transfer confirmed by App Attest and a passkey through the real service: accepted once, replay with either factor, refused without the passkey or over another form"
    )
    func confirmWithBothFactors() async throws {
        let service = try HostileStateTests.Service([
            "--passkey-rp-id", PasskeyDevice.rpID, "--passkey-origin", PasskeyDevice.origin,
            "--factor-policy", "*=app-attest,transfer=app-attest+passkey-uv",
            // Under the full suite's load the options and the registration came more than the
            // default 120 s apart once (challenge_invalid); the lifetime is not what this tests.
            "--challenge-lifetime", "900",
        ])
        defer { service.stop() }
        try #require(await Formattest.waitForListener(port: service.port, process: service.server.process))
        var device = PasskeyDevice()
        // The passkey's registration: options, then the response to their challenge.
        let (optionsStatus, options) = try await service.send("GET", "/api/passkeys/options?username=alice")
        #expect(optionsStatus == 200, "\(options)")
        let challengeText = try #require((options["challenge"] as? [String: Any])?["challenge"] as? String)
        let challenge = try #require(Base64URL.decode(challengeText))
        let (registered, registration) = try await service.send(
            "POST", "/api/passkeys/register",
            [
                "username": "alice", "challenge": challengeText, "userHandle": options["userHandle"] ?? "",
                "credential": try Self.object(device.register(challenge: challenge)),
            ])
        #expect(registered == 200, "\(registration)")
        // A new key attested over a transfer: the registration accepts its form too, so the
        // transfer's policy holds there (403 passkey_required, nothing stored).
        let transfer = HostileStateTests.Service.form("90.00")
        let (_, attested) = try await service.send("POST", "/api/dev/simulate", ["action": "attest", "form": transfer])
        let (attestStatus, attestAnswer) = try await service.send(
            "POST", "/api/appattest/attest",
            ["username": "alice", "keyId": attested["keyId"] ?? "", "attestationObject": attested["attestationObject"] ?? "", "form": transfer])
        #expect(attestStatus == 403 && service.code(attestAnswer) == "passkey_required", "\(attestStatus) \(attestAnswer)")
        let keyID = try await service.register()

        // A transfer signed by both: accepted.
        var request = try await service.signed(keyID, amount: "250.00")
        let form = try #require(request["form"] as? [String: Any])
        request["passkey"] = try Self.object(device.sign(challenge: try Self.hash(form)))
        let (accepted, answer) = try await service.send("POST", "/api/appattest/assert", request)
        #expect(accepted == 200 && (answer["factors"] as? [String]) == ["app-attest", "passkey"], "\(accepted) \(answer)")

        // The same form again, with the App Attest key alone and with a new passkey assertion alone: 409 replay.
        let (_, again) = try await service.send("POST", "/api/dev/simulate", ["action": "assert", "keyId": keyID, "form": form])
        let keyAlone: [String: Any] = ["username": "alice", "keyId": keyID, "assertion": again["assertion"] ?? "", "form": form]
        let (keyStatus, keyAnswer) = try await service.send("POST", "/api/appattest/assert", keyAlone)
        #expect(keyStatus == 409 && service.code(keyAnswer) == "replay", "\(keyStatus) \(keyAnswer)")
        let passkeyAlone: [String: Any] = [
            "username": "alice", "passkey": try Self.object(device.sign(challenge: try Self.hash(form))), "form": form,
        ]
        let (passkeyStatus, passkeyAnswer) = try await service.send("POST", "/api/appattest/assert", passkeyAlone)
        #expect(passkeyStatus == 409 && service.code(passkeyAnswer) == "replay", "\(passkeyStatus) \(passkeyAnswer)")

        // A new transfer with App Attest alone: 403 passkey_required.
        let unconfirmed = try await service.signed(keyID, amount: "300.00")
        let (missingStatus, missing) = try await service.send("POST", "/api/appattest/assert", unconfirmed)
        #expect(missingStatus == 403 && service.code(missing) == "passkey_required", "\(missingStatus) \(missing)")

        // A passkey assertion over a different form (another amount) with this form: refused.
        var mismatched = try await service.signed(keyID, amount: "400.00")
        mismatched["passkey"] = try Self.object(device.sign(challenge: try Self.hash(HostileStateTests.Service.form("40000.00"))))
        let (mismatchStatus, mismatch) = try await service.send("POST", "/api/appattest/assert", mismatched)
        #expect(mismatchStatus == 401 && service.code(mismatch) == "passkey_challenge_mismatch", "\(mismatchStatus) \(mismatch)")
    }
}
