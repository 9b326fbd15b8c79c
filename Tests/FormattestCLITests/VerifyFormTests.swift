//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttestSimulator
import Crypto
import FormAttestTestSupport
import Foundation
import Testing

/// `verify attestation --form` and `verify assertion --form`: the form is read, canonicalized
/// (RFC 8785) and hashed, and the attestation or assertion must sign exactly that hash.
struct VerifyFormTests {
    /// The form as a client might send it: member order and whitespace of its own.
    static let form = """
        {
          "to": "bob",
          "amount": "10.00",
          "timestamp": "2025-06-15T12:00:00Z",
          "nonce": "n-1"
        }
        """
    /// Its RFC 8785 form, written out by hand: what the device signs over (SHA-256).
    static let canonical = #"{"amount":"10.00","nonce":"n-1","timestamp":"2025-06-15T12:00:00Z","to":"bob"}"#
    /// The same form with one byte changed (the amount's last digit).
    static let changed = form.replacingOccurrences(of: "10.00", with: "10.01")

    struct Simulated {
        let authority: SimulatedAttestationAuthority
        let device: SimulatedDevice
        let key: SimulatedKey
        let files: TemporaryFiles
        let hash = Array(SHA256.hash(data: Array(VerifyFormTests.canonical.utf8)))

        init() throws {
            self.authority = try SimulatedAttestationAuthority()
            self.device = SimulatedDevice(authority: self.authority, appID: "ABCDE12345.com.formattest.bank")
            self.key = self.device.key(0)
            self.files = try TemporaryFiles()
        }

        func attestationArguments(form: String) throws -> [String] {
            let attestation = try self.device.attest(self.key, clientDataHash: self.hash, at: Date(timeIntervalSince1970: 1_749_988_800))
            return [
                "verify", "attestation", "--attestation", try self.files.write(Data(attestation), named: "attestation.cbor"),
                "--key-id", Data(self.key.keyID).base64EncodedString(), "--app-id", self.device.appID,
                "--form", try self.files.write(form, named: "form-\(UUID().uuidString).json"),
                "--at", "2025-06-15T12:00:00Z",
                "--root", try self.files.write(try self.authority.rootPEM, named: "root.pem"),
            ]
        }

        func assertionArguments(form: String) throws -> [String] {
            let assertion = try self.device.assert(self.key, clientDataHash: self.hash, counter: 1)
            return [
                "verify", "assertion", "--assertion", try self.files.write(Data(assertion).base64EncodedString(), named: "assertion.b64"),
                "--public-key", try self.files.write(self.key.publicKey.pemRepresentation, named: "key.pem"),
                "--app-id", self.device.appID,
                "--form", try self.files.write(form, named: "form-\(UUID().uuidString).json"),
            ]
        }
    }

    static func error(_ result: Formattest.Result) throws -> String? {
        (try result.jsonObject()["error"] as? [String: Any])?["code"] as? String
    }

    @Test("verify attestation --form: verifies over the form's RFC 8785 hash; one byte changed is refused at the nonce (hash) step")
    func attestation() async throws {
        let simulated = try Simulated()
        let accepted = try await Formattest.run(try simulated.attestationArguments(form: Self.form) + ["--json"])
        #expect(accepted.status == 0, "\(accepted.stdout) \(accepted.stderr)")
        let report = try accepted.jsonObject()
        #expect(report["verified"] as? Bool == true)
        let clientData = try #require(report["clientData"] as? [String: Any])
        #expect(clientData["source"] as? String == "form")
        #expect(clientData["clientDataHash"] as? String == hexString(simulated.hash))

        let refused = try await Formattest.run(try simulated.attestationArguments(form: Self.changed) + ["--json"])
        #expect(refused.status == 1, "\(refused.stdout) \(refused.stderr)")
        #expect(try Self.error(refused) == "nonce_mismatch")
        #expect(((try refused.jsonObject()["clientData"] as? [String: Any])?["source"] as? String) == "form")

        // The text output names the failing step and the hash that was checked.
        let text = try await Formattest.run(try simulated.attestationArguments(form: Self.changed))
        #expect(text.status == 1)
        #expect(text.stdout.contains("error: nonce_mismatch: SHA256(authData || clientDataHash)"), "\(text.stdout)")
        #expect(text.stdout.contains("(SHA-256 of the form's RFC 8785 bytes)"), "\(text.stdout)")
    }

    @Test("verify assertion --form: verifies over the form's RFC 8785 hash; one byte changed is refused at the signature over it")
    func assertion() async throws {
        let simulated = try Simulated()
        let accepted = try await Formattest.run(try simulated.assertionArguments(form: Self.form) + ["--json"])
        #expect(accepted.status == 0, "\(accepted.stdout) \(accepted.stderr)")
        #expect(((try accepted.jsonObject()["clientData"] as? [String: Any])?["clientDataHash"] as? String) == hexString(simulated.hash))

        let refused = try await Formattest.run(try simulated.assertionArguments(form: Self.changed) + ["--json"])
        #expect(refused.status == 1, "\(refused.stdout) \(refused.stderr)")
        #expect(try Self.error(refused) == "signature_invalid")
        #expect(((try refused.jsonObject()["clientData"] as? [String: Any])?["source"] as? String) == "form")
    }

    @Test("--form takes a form only: not JSON, not an object, or no timestamp is a usage error (exit 2) naming the file")
    func notAForm() async throws {
        let simulated = try Simulated()
        for (name, text) in [("not-json", "{\"a\": "), ("array", "[1]"), ("no-timestamp", #"{"amount":"1"}"#)] {
            var arguments = try simulated.assertionArguments(form: Self.form)
            let path = try simulated.files.write(text, named: "\(name).json")
            arguments[arguments.firstIndex(of: "--form")! + 1] = path
            let result = try await Formattest.run(arguments)
            #expect(result.status == 2, "\(name): \(result.stdout) \(result.stderr)")
            #expect(result.stderr.contains("--form \(path)"), "\(name): \(result.stderr)")
        }
    }

    @Test("every client-data option is accepted by verify attestation, verify assertion and wrap, exactly one at a time")
    func oneOfFour() async throws {
        for command in [["verify", "attestation"], ["verify", "assertion"], ["wrap"]] {
            let help = try await Formattest.run(command + ["--help"])
            for option in ["--client-data-hash", "--challenge", "--client-data", "--form"] {
                #expect(help.stdout.contains(option), "\(command) \(option)")
            }
        }
        let two = try await Formattest.run([
            "verify", "attestation", "--attestation", "/dev/null", "--key-id", "AA", "--app-id", "A.b", "--challenge", "x", "--form", "f.json",
        ])
        #expect(two.status == 2)
        #expect(two.stderr.contains("Give exactly one of --client-data-hash, --challenge, --client-data and --form"), "\(two.stderr)")
    }
}
