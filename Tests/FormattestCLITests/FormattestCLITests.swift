//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import FormAttestTestSupport
import Foundation
import Testing

/// The `formattest verify` contract, exercised on the built executable: exit 0 verified, 1
/// rejected, 2 usage or I/O error; `--json` prints one object.
struct FormattestVerifyTests {
    @Test("every real attestation verifies from the command line", arguments: try RealSample.withAttestation())
    func realAttestations(sample: RealSample) async throws {
        let files = try TemporaryFiles()
        let path = try files.write(Data(try #require(sample.attestation)).base64EncodedString(), named: "att.b64")
        let result = try await Formattest.run(try Formattest.verifyArguments(sample, attestationPath: path))
        #expect(result.status == 0, "\(result.stderr)")
        let json = try result.jsonObject()
        #expect(json["verified"] as? Bool == true)
        // base64url without padding, as every key id the CLI and the API print.
        #expect(json["keyId"] as? String == Formattest.base64url(try #require(sample.keyID)))
        #expect(json["appId"] as? String == sample.appID)
        #expect(json["environment"] as? String == sample.environment?.rawValue)
        #expect(json["counter"] as? Int == 0)
        #expect((json["publicKey"] as? String)?.hasPrefix("-----BEGIN PUBLIC KEY-----") == true)
    }

    @Test("every real assertion verifies from the command line, keyed by its attestation or PEM", arguments: try RealSample.all())
    func realAssertions(sample: RealSample) async throws {
        let files = try TemporaryFiles()
        let keyArguments: [String]
        if let attestation = sample.attestation {
            // Raw CBOR this time: the reader detects it.
            keyArguments = ["--attestation", try files.write(Data(attestation), named: "att.cbor")]
        } else {
            keyArguments = ["--public-key", try files.write(try #require(sample.publicKeyPEM), named: "key.pem")]
        }
        for (index, recorded) in sample.assertions.enumerated() {
            let assertion = try files.write(Data(recorded.assertion).base64EncodedString(), named: "as\(index).b64")
            let clientData: [String]
            if let text = recorded.clientData {
                clientData = ["--client-data", try files.write(text, named: "client\(index).json")]
            } else {
                clientData = ["--client-data-hash", hexString(recorded.clientDataHash)]
            }
            let result = try await Formattest.run(
                ["verify", "assertion", "--assertion", assertion, "--app-id", sample.appID, "--json"] + keyArguments + clientData
            )
            #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
            let json = try result.jsonObject()
            #expect(json["verified"] as? Bool == true)
            if let expected = recorded.expectedCounter {
                #expect(json["counter"] as? Int == Int(expected))
            }
        }
    }

    @Test("--challenge hashes the text; Apple's sample needs the raw bytes instead")
    func challengeOption() async throws {
        let sample = try RealSample.named("uebelack_production")
        let files = try TemporaryFiles()
        let path = try files.write(Data(try #require(sample.attestation)).base64EncodedString(), named: "att.b64")
        var arguments = [
            "verify", "attestation", "--attestation", path,
            "--key-id", Data(try #require(sample.keyID)).base64EncodedString(),
            "--app-id", sample.appID, "--challenge", try #require(sample.challenge),
            "--at", try #require(Formattest.rfc3339(sample.validAt)),
        ]
        let verified = try await Formattest.run(arguments)
        #expect(verified.status == 0)
        #expect(verified.stdout.hasPrefix("verified: true\n"))
        #expect(verified.stdout.contains("environment: production\n"))

        arguments[arguments.firstIndex(of: "--challenge")! + 1] = "another challenge"
        let rejected = try await Formattest.run(arguments + ["--json"])
        #expect(rejected.status == 1)
        let json = try rejected.jsonObject()
        #expect(json["verified"] as? Bool == false)
        #expect((json["error"] as? [String: Any])?["code"] as? String == "nonce_mismatch")
    }

    @Test("stdin ('-'), base64url and unpadded input are accepted")
    func inputForms() async throws {
        let sample = try RealSample.named("veehaitch_ios_14_2")
        let base64url = Data(try #require(sample.attestation)).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        let keyIDURL = Data(try #require(sample.keyID)).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        let result = try await Formattest.run(
            [
                "verify", "attestation", "--attestation", "-", "--key-id", keyIDURL, "--app-id", sample.appID,
                "--challenge", "wurzelpfropf", "--environment", "development",
                "--at", try #require(Formattest.rfc3339(sample.validAt)), "--json",
            ],
            stdin: Data(base64url.utf8)
        )
        #expect(result.status == 0, "\(result.stderr)")
    }

    /// Base64 text's whitespace rule is Foundation's `CharacterSet.whitespacesAndNewlines`, ASCII
    /// and beyond (the reader filters ASCII byte by byte and anything else by the set): a scalar the
    /// set holds, put every 64 characters, still verifies; any other is a usage error.
    @Test(
        "base64 text: whatever CharacterSet.whitespacesAndNewlines holds is ignored, anything else refused",
        arguments: [
            0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x2003, 0x2028, 0x3000,
            0x00, 0x1C, 0x1F, 0x7F, 0x2E, 0x200B, 0xFEFF,
        ] as [UInt32])
    func base64Whitespace(scalar: UInt32) async throws {
        let sample = try RealSample.named("veehaitch_ios_14_2")
        let separator = String(Character(try #require(Unicode.Scalar(scalar))))
        let base64 = Data(try #require(sample.attestation)).base64EncodedString()
        var text = separator
        for (index, character) in base64.enumerated() {
            text.append(character)
            if index % 64 == 63 { text += separator }
        }
        let result = try await Formattest.run(
            [
                "verify", "attestation", "--attestation", "-", "--key-id", Data(try #require(sample.keyID)).base64EncodedString(),
                "--app-id", sample.appID, "--challenge", "wurzelpfropf", "--environment", "development",
                "--at", try #require(Formattest.rfc3339(sample.validAt)), "--json",
            ],
            stdin: Data(text.utf8)
        )
        if CharacterSet.whitespacesAndNewlines.contains(try #require(Unicode.Scalar(scalar))) {
            #expect(result.status == 0, "U+\(String(scalar, radix: 16)): \(result.stderr)")
        } else {
            #expect(result.status == 2, "U+\(String(scalar, radix: 16)): \(result.stdout)")
            #expect(result.stderr.contains("- is not base64 or base64url"), "\(result.stderr)")
        }
    }

    @Test(
        "rejections exit 1 with the failed step's code",
        arguments: [
            (["--app-id", "ABCDE12345.com.example.other"], "app_id_mismatch"),
            (["--environment", "production"], "environment_not_allowed"),
            (["--at", "2026-01-01T00:00:00Z"], "certificate_expired"),
            (["--key-id", "vkNBJ+U8wuzZ0acrCg6QhAv6YpgmykDX/Pt+M3D0Lls="], "key_id_mismatch"),
        ])
    func rejections(change: [String], code: String) async throws {
        let sample = try RealSample.named("veehaitch_ios_14_2")
        let files = try TemporaryFiles()
        var options: [String: String] = [
            "--attestation": try files.write(Data(try #require(sample.attestation)).base64EncodedString(), named: "a.b64"),
            "--key-id": Data(try #require(sample.keyID)).base64EncodedString(),
            "--app-id": sample.appID,
            "--challenge": "wurzelpfropf",
            "--at": try #require(Formattest.rfc3339(sample.validAt)),
        ]
        options[change[0]] = change[1]
        let result = try await Formattest.run(["verify", "attestation", "--json"] + options.flatMap { [$0.key, $0.value] })
        #expect(result.status == 1)
        #expect((try result.jsonObject()["error"] as? [String: Any])?["code"] as? String == code)
    }

    @Test("a simulated attestation verifies only with --root naming the simulator's CA")
    func rootOption() async throws {
        let authority = try SimulatedAttestationAuthority()
        let device = SimulatedDevice(authority: authority, appID: "ABCDE12345.com.formattest.bank")
        let key = device.key(0)
        let at = Date(timeIntervalSince1970: 1_749_988_800)
        let attestation = try device.attest(key, clientDataHash: Array("challenge-bytes".utf8), at: at)
        let files = try TemporaryFiles()
        let base = [
            "verify", "attestation", "--attestation", try files.write(Data(attestation), named: "sim.cbor"),
            "--key-id", Data(key.keyID).base64EncodedString(), "--app-id", device.appID,
            "--client-data-hash", hexString(Array("challenge-bytes".utf8)),
            "--at", "2025-06-15T12:00:00Z", "--json",
        ]
        let untrusted = try await Formattest.run(base)
        #expect(untrusted.status == 1)
        #expect((try untrusted.jsonObject()["error"] as? [String: Any])?["code"] as? String == "certificate_chain_invalid")
        let trusted = try await Formattest.run(base + ["--root", try files.write(try authority.rootPEM, named: "root.pem")])
        #expect(trusted.status == 0, "\(trusted.stdout)")
    }

    @Test(
        "usage and I/O errors exit 2",
        arguments: [
            ["verify", "attestation", "--attestation", "/nonexistent", "--key-id", "AA==", "--app-id", "A.b", "--challenge", "x"],
            ["verify", "attestation", "--attestation", "/dev/null", "--key-id", "AA==", "--app-id", "A.b"],
            ["verify", "attestation", "--attestation", "-", "--key-id", "AA==", "--app-id", "A.b", "--challenge", "x", "--client-data-hash", "00"],
            ["verify", "attestation", "--attestation", "-", "--key-id", "AA==", "--app-id", "A.b", "--challenge", "x", "--at", "yesterday"],
            ["verify", "attestation", "--attestation", "-", "--key-id", "AA==", "--app-id", "A.b", "--client-data-hash", "zz"],
            ["verify", "assertion", "--assertion", "-", "--app-id", "A.b", "--challenge", "x"],
            ["verify", "assertion", "--assertion", "-", "--app-id", "A.b", "--challenge", "x", "--public-key", "k", "--attestation", "a"],
            ["verify", "attestation", "--unknown-flag"],
        ])
    func usageErrors(arguments: [String]) async throws {
        let result = try await Formattest.run(arguments, stdin: Data("AAAA".utf8))
        #expect(result.status == 2, "\(result.stdout) \(result.stderr)")
        #expect(!result.stderr.isEmpty)
    }

    @Test("a document that is not CBOR after base64 decoding is a rejection, not a crash")
    func malformedDocument() async throws {
        let result = try await Formattest.run(
            ["verify", "attestation", "--attestation", "-", "--key-id", "AA==", "--app-id", "A.b", "--challenge", "x", "--json"],
            stdin: Data("AAAA".utf8)
        )
        #expect(result.status == 1)
        #expect((try result.jsonObject()["error"] as? [String: Any])?["code"] as? String == "malformed_attestation")
    }

    @Test("--help exits 0 and names the contract's options")
    func help() async throws {
        let result = try await Formattest.run(["verify", "attestation", "--help"])
        #expect(result.status == 0)
        for option in ["--attestation", "--key-id", "--app-id", "--client-data-hash", "--challenge", "--environment", "--root", "--at", "--json"] {
            #expect(result.stdout.contains(option), "\(option)")
        }
    }
}
