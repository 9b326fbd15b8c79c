//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestForm
import FormAttestTestSupport
import Foundation
import Testing

/// Issue 30's evidence through the built binaries: `formattest-dev serve --dev-simulator
/// --evidence-dir` with passkey settings archives the record of a transfer confirmed by a passkey
/// alone, and `formattest evidence verify` re-verifies it offline (the WebAuthn registration and
/// assertion run again), with no store and no network.
struct PasskeyEvidenceSystemTests {
    @Test(
        "a transfer confirmed by a passkey alone is archived as a version-3 record that 'evidence verify' accepts (exit 0); changed, or expected for an app id, it is refused (exit 1)"
    )
    func passkeyRecordVerifiesOffline() async throws {
        let files = try TemporaryFiles()
        let evidence = files.directory.appendingPathComponent("evidence")
        try FileManager.default.createDirectory(at: evidence, withIntermediateDirectories: false)
        let service = try HostileStateTests.Service([
            "--passkey-rp-id", PasskeyDevice.rpID, "--passkey-origin", PasskeyDevice.origin,
            "--factor-policy", "*=app-attest,transfer=passkey-uv", "--challenge-lifetime", "900",
            "--evidence-dir", evidence.path,
        ])
        defer { service.stop() }
        try #require(await Formattest.waitForListener(port: service.port, process: service.server.process))
        var device = PasskeyDevice()
        let (_, options) = try await service.send("GET", "/api/passkeys/options?username=alice")
        let challengeText = try #require((options["challenge"] as? [String: Any])?["challenge"] as? String)
        let (registered, registration) = try await service.send(
            "POST", "/api/passkeys/register",
            [
                "username": "alice", "challenge": challengeText, "userHandle": options["userHandle"] ?? "",
                "credential": try PasskeySystemTests.object(device.register(challenge: try #require(Base64URL.decode(challengeText)))),
            ])
        #expect(registered == 200, "\(registration)")

        let form = HostileStateTests.Service.form("250.00")
        let request: [String: Any] = [
            "username": "alice", "passkey": try PasskeySystemTests.object(device.sign(challenge: try PasskeySystemTests.hash(form))), "form": form,
        ]
        let (status, answer) = try await service.send("POST", "/api/appattest/assert", request)
        #expect(status == 200 && (answer["factors"] as? [String]) == ["passkey"], "\(status) \(answer)")
        let id = try #require(answer["evidenceId"] as? String, "\(answer)")
        #expect(answer["evidenceArchived"] as? Bool == true)
        let record = evidence.appendingPathComponent("\(id).json")

        // The server's JWKS, as an auditor keeps it.
        let (_, jwks) = try await service.send("GET", "/.well-known/jwks.json")
        let jwksFile = try files.write(try JSONSerialization.data(withJSONObject: jwks), named: "jwks.json")

        let verified = try await Formattest.run(["evidence", "verify", record.path, "--jwks", jwksFile, "--json"])
        #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
        let parsed = try JSONSerialization.jsonObject(with: Data(verified.stdout.utf8))
        let report = try #require(parsed as? [String: Any], "\(verified.stdout)")
        #expect(report["verified"] as? Bool == true && report["kind"] as? String == "passkey" && report["id"] as? String == id)
        #expect(report["amr"] as? [String] == ["hwk", "user", "mfa"], "\(report)")
        #expect(report["keyId"] == nil, "a passkey alone has no App Attest key")
        let passkey = try #require(report["passkey"] as? [String: Any], "\(report)")
        #expect(passkey["credentialId"] as? String == Base64URL.encode(device.credentialID) && passkey["userVerified"] as? Bool == true)
        #expect(passkey["rpId"] as? String == PasskeyDevice.rpID && passkey["attestationAnchored"] == nil, "\(passkey)")
        let text = try await Formattest.run(["evidence", "verify", record.path, "--jwks", jwksFile])
        #expect(text.status == 0 && text.stdout.contains("kind: passkey") && text.stdout.contains("amr: hwk user mfa"), "\(text.stdout)")

        // A verifier that expects an app id: a passkey alone names none.
        let expecting = try await Formattest.run([
            "evidence", "verify", record.path, "--jwks", jwksFile, "--app-id", "ABCDE12345.com.formattest.demo", "--json",
        ])
        #expect(expecting.status == 1 && expecting.stdout.contains("evidence_policy_mismatch"), "\(expecting.stdout) \(expecting.stderr)")
        // One byte of the archived file changed: refused.
        var bytes = try Array(Data(contentsOf: record))
        let index = try #require(bytes.firstIndex(of: UInt8(ascii: "p")).map { $0 + 40 })
        bytes[index] = bytes[index] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        let changed = try files.write(Data(bytes), named: "changed.json")
        let refused = try await Formattest.run(["evidence", "verify", changed, "--jwks", jwksFile, "--json"])
        #expect(refused.status == 1 && refused.stdout.contains("\"verified\":false"), "\(refused.stdout) \(refused.stderr)")
    }
}
