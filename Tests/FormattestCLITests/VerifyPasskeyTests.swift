//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
import FormAttestTestSupport
import Foundation
import Testing

/// `formattest verify passkey-registration` and `verify passkey-assertion`: the recorded responses
/// of Tests/Fixtures/webauthn verify or are refused as their recorders expect, through the binary;
/// `--form` takes the challenge from the form's RFC 8785 hash; exit codes 0, 1 and 2.
struct VerifyPasskeyTests {
    static let fixtures = PasskeyRecording.directory

    static func arguments(_ recorded: PasskeyRecording, rpID: String? = nil) -> [String] {
        var arguments = ["--response", recorded.url.path, "--challenge", recorded.challenge, "--rp-id", rpID ?? recorded.rpId, "--json"]
        for origin in recorded.origins { arguments += ["--origin", origin] }
        if let at = recorded.at { arguments += ["--at", at] }
        for root in recorded.roots ?? [] { arguments += ["--root", PasskeyRecording.directory.appendingPathComponent(root).path] }
        if let publicKey = recorded.publicKey { arguments += ["--public-key", publicKey] }
        if let count = recorded.previousSignCount { arguments += ["--previous-sign-count", String(count)] }
        if recorded.requireUserVerification == true { arguments.append("--require-user-verification") }
        return arguments
    }

    static func check(_ result: Formattest.Result, _ expect: PasskeyRecording.Expectation) throws {
        let json = try result.jsonObject()
        #expect(json["verified"] as? Bool == expect.verified, "\(result.stdout) \(result.stderr)")
        if expect.verified {
            #expect(result.status == 0)
            if let format = expect.format { #expect(json["format"] as? String == format) }
            if let count = expect.signCount { #expect(json["signCount"] as? Int == Int(count)) }
            if let aaguid = expect.aaguid { #expect(json["aaguid"] as? String == aaguid) }
            if let id = expect.credentialId { #expect(json["credentialId"] as? String == id) }
            if let key = expect.publicKey { #expect(json["publicKey"] as? String == key) }
            if let anchored = expect.attestationAnchored { #expect(json["attestationAnchored"] as? Bool == anchored) }
        } else {
            #expect(result.status == 1)
            let error = try #require(json["error"] as? [String: Any])
            #expect(error["code"] as? String == expect.error)
            #expect((error["message"] as? String)?.isEmpty == false)
        }
    }

    @Test("verify passkey-registration: each recorded registration as its recorder expects", arguments: PasskeyRecording.registrations)
    func registration(_ recorded: PasskeyRecording) async throws {
        let result = try await Formattest.run(["verify", "passkey-registration"] + Self.arguments(recorded))
        try Self.check(result, recorded.expect)
    }

    @Test("verify passkey-assertion: each recorded assertion as its recorder expects", arguments: PasskeyRecording.authentications)
    func assertion(_ recorded: PasskeyRecording) async throws {
        let result = try await Formattest.run(["verify", "passkey-assertion"] + Self.arguments(recorded))
        try Self.check(result, recorded.expect)
    }

    /// An assertion by a software passkey whose challenge is SHA-256 of `canonical` (the form's RFC 8785 bytes).
    static func formAssertion(files: TemporaryFiles) throws -> (response: String, publicKey: String) {
        let key = P256.Signing.PrivateKey()
        let challenge = Data(SHA256.hash(data: Array(VerifyFormTests.canonical.utf8)))
        func base64url(_ data: Data) -> String {
            data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
        }
        let clientData = Data(#"{"type":"webauthn.get","challenge":"\#(base64url(challenge))","origin":"https://bank.example"}"#.utf8)
        let authData = Data(SHA256.hash(data: Data("bank.example".utf8))) + Data([0x05, 0, 0, 0, 9])
        let signature = try key.signature(for: authData + Data(SHA256.hash(data: clientData))).derRepresentation
        let response = #"""
            {"id":"AQID","rawId":"AQID","type":"public-key","response":{"clientDataJSON":"\#(base64url(clientData))",\#
            "authenticatorData":"\#(base64url(authData))","signature":"\#(base64url(signature))"}}
            """#
        let point = key.publicKey.x963Representation
        let cose = Data([0xA5, 0x01, 0x02, 0x03, 0x26, 0x20, 0x01, 0x21, 0x58, 0x20]) + point[1..<33] + Data([0x22, 0x58, 0x20]) + point[33..<65]
        return (try files.write(response, named: "assertion-\(UUID().uuidString).json"), base64url(cose))
    }

    @Test("verify passkey-assertion --form: the challenge is the form's RFC 8785 hash; one byte changed is refused at the challenge")
    func form() async throws {
        let files = try TemporaryFiles()
        let (response, publicKey) = try Self.formAssertion(files: files)
        func run(_ form: String) async throws -> Formattest.Result {
            try await Formattest.run([
                "verify", "passkey-assertion", "--response", response, "--public-key", publicKey,
                "--form", try files.write(form, named: "form-\(UUID().uuidString).json"),
                "--origin", "https://bank.example", "--rp-id", "bank.example", "--require-user-verification", "--json",
            ])
        }
        let accepted = try await run(VerifyFormTests.form)
        #expect(accepted.status == 0, "\(accepted.stdout) \(accepted.stderr)")
        #expect(try accepted.jsonObject()["signCount"] as? Int == 9)
        #expect(try accepted.jsonObject()["userVerified"] as? Bool == true)
        let refused = try await run(VerifyFormTests.changed)
        #expect(refused.status == 1, "\(refused.stdout) \(refused.stderr)")
        #expect((try refused.jsonObject()["error"] as? [String: Any])?["code"] as? String == "passkey_challenge_mismatch")
    }

    @Test("text output names the verdict; a refusal names its code")
    func text() async throws {
        let recorded = try #require(PasskeyRecording.authentications.first { $0.file == "authentication-es256.json" && $0.expect.verified })
        let accepted = try await Formattest.run(["verify", "passkey-assertion"] + Self.arguments(recorded).filter { $0 != "--json" })
        #expect(accepted.status == 0 && accepted.stdout.hasPrefix("verified: passkey assertion"), "\(accepted.stdout)")
        let refused = try await Formattest.run(
            ["verify", "passkey-assertion"] + Self.arguments(recorded, rpID: "other.example").filter { $0 != "--json" }
        )
        #expect(refused.status == 1 && refused.stdout.hasPrefix("rejected: passkey_rp_id_mismatch"), "\(refused.stdout)")
    }

    @Test("usage errors exit 2: both or neither of --challenge and --form, no --origin, bad base64url, a missing file, a bad time")
    func usage() async throws {
        let response = Self.fixtures.appendingPathComponent("registration-none-localhost.json").path
        let base = ["verify", "passkey-registration", "--response", response, "--rp-id", "localhost"]
        let cases: [[String]] = [
            base + ["--origin", "http://localhost:5000"],
            base + ["--origin", "http://localhost:5000", "--challenge", "AAAA", "--form", response],
            base + ["--challenge", "AAAA"],
            base + ["--origin", "http://localhost:5000", "--challenge", "not base64!"],
            ["verify", "passkey-registration", "--response", "/nonexistent/x.json", "--rp-id", "localhost", "--origin", "o", "--challenge", "AAAA"],
            base + ["--origin", "http://localhost:5000", "--challenge", "AAAA", "--at", "yesterday"],
            [
                "verify", "passkey-assertion", "--response", response, "--rp-id", "localhost", "--origin", "o", "--challenge", "AAAA", "--public-key",
                "!",
            ],
        ]
        for arguments in cases {
            let result = try await Formattest.run(arguments)
            #expect(result.status == 2, "\(arguments): \(result.stdout) \(result.stderr)")
        }
    }
}
