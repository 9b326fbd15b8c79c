//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing

/// The FIDO2 `packed` format by the deployment's own attestation authority: `formattest keys
/// attestation-ca generate`, `formattest wrap --format packed` over every real App Attest
/// attestation, then python-fido2 verifies each (e2e/interop/check_packed.py).
struct PackedTests {
    @Test("every real attestation wrapped as packed verifies with python-fido2 against the deployment's root, and only its")
    func packedInterop() async throws {
        let files = try TemporaryFiles()
        let authority = files.directory.appendingPathComponent("ca").path
        let other = files.directory.appendingPathComponent("other-ca").path
        for directory in [authority, other] {
            let generated = try await Formattest.run([
                "keys", "attestation-ca", "generate", "--dir", directory, "--organization", "FormAttest Test Bank", "--country", "DE",
            ])
            #expect(generated.status == 0, "\(generated.stderr)")
            #expect(generated.stdout.contains("BEGIN CERTIFICATE"))
        }
        // Never replaced; the private keys are the owner's alone.
        let again = try await Formattest.run(["keys", "attestation-ca", "generate", "--dir", authority, "--organization", "X", "--country", "DE"])
        #expect(again.status == 2 && again.stderr.contains("exists"))
        for name in ["root-key.pem", "attestation-key.pem"] {
            let mode = try FileManager.default.attributesOfItem(atPath: authority + "/" + name)[.posixPermissions] as? Int
            #expect(mode == 0o600, "\(name): \(String(mode ?? 0, radix: 8))")
        }
        let shown = try await Formattest.run(["keys", "attestation-ca", "show", "--dir", authority])
        #expect(
            shown.stdout.contains("aaguid: f04a77e5-7a77-4e57-8a66-a7e57ab1e000") && shown.stdout.contains("Authenticator Attestation"),
            "\(shown.stdout)")

        var cases: [[String: Any]] = []
        for sample in try RealSample.withAttestation() {
            let attestation = try files.write(Data(try #require(sample.attestation)).base64EncodedString(), named: "\(sample.name).b64")
            let keyID = Data(try #require(sample.keyID)).base64EncodedString()
            let result = try await Formattest.run([
                "wrap", "--attestation", attestation, "--key-id", keyID, "--app-id", sample.appID,
                "--client-data-hash", hexString(try #require(sample.clientDataHash)),
                "--at", try #require(Formattest.rfc3339(sample.validAt)), "--format", "packed",
                "--attestation-ca", authority, "--rp-id", "bank.example",
            ])
            #expect(result.status == 0, "\(sample.name): \(result.stderr)")
            let packed = try #require(try result.jsonObject()["packedAttestation"] as? [String: Any], "\(result.stdout)")
            cases.append(["name": sample.name, "packed": packed, "keyId": Formattest.base64url(try #require(sample.keyID))])
        }
        // Without the authority, packed is refused before anything is verified.
        let missing = try await Formattest.run([
            "wrap", "--attestation", "x", "--key-id", "AA", "--app-id", "A.b", "--challenge", "c", "--format", "packed",
        ])
        #expect(missing.status == 2 && missing.stderr.contains("--attestation-ca"))

        let casesFile = try files.write(Data(try JSONSerialization.data(withJSONObject: cases)), named: "cases.json")
        let check = try await PythonCheck(venv: ".venv-interop", overrideVariable: "FORMATTEST_INTEROP_PYTHON").run(
            "e2e/interop/check_packed.py", [authority + "/root.pem", other + "/root.pem", "bank.example", casesFile]
        )
        #expect(check.status == 0, "\(check.output)")
        #expect(check.output.contains(" passed, 0 failed"), "\(check.output)")
        #expect(cases.count >= 10)
    }
}
