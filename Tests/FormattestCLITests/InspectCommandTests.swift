//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import FormAttestTestSupport
import Foundation
import Testing

/// `formattest inspect` prints the library's views (the golden files pin their exact content) and
/// `verify` reports the receipt.
struct InspectCommandTests {
    static let goldenDirectory = RealSample.fixturesDirectory.appendingPathComponent("inspector")

    @Test("inspect prints exactly the golden views, from base64 or raw input, text or JSON")
    func printsGoldenViews() async throws {
        let sample = try RealSample.named("veehaitch_ios_14_2")
        let attestation = try #require(sample.attestation)
        let files = try TemporaryFiles()
        let base64 = try files.write(Data(attestation).base64EncodedString(), named: "att.b64")
        let raw = try files.write(Data(attestation), named: "att.cbor")
        for mode in ["semantic", "forensic", "tree"] {
            let golden = try String(contentsOf: Self.goldenDirectory.appendingPathComponent("veehaitch_ios_14_2.\(mode).txt"), encoding: .utf8)
            let text = try await Formattest.run(["inspect", base64, "--mode", mode])
            #expect(text.status == 0, "\(text.stderr)")
            #expect(text.stdout == golden)
            let goldenJSON = try String(contentsOf: Self.goldenDirectory.appendingPathComponent("veehaitch_ios_14_2.\(mode).json"), encoding: .utf8)
            let json = try await Formattest.run(["inspect", raw, "--mode", mode, "--json"])
            #expect(json.status == 0, "\(json.stderr)")
            #expect(json.stdout == goldenJSON)
        }
        // Semantic is the default.
        #expect(try await Formattest.run(["inspect", raw]).stdout.hasPrefix("attestation object: \(attestation.count) bytes\n"))
    }

    @Test("inspect shows a standalone receipt and malformed input, exit 0; an unreadable file is exit 2")
    func receiptAndMalformed() async throws {
        let sample = try RealSample.named("uebelack_development")
        let receipt = try AttestationObject(cborEncoded: try #require(sample.attestation)).statement.receipt
        let files = try TemporaryFiles()
        let receiptPath = try files.write(Data(receipt), named: "receipt.der")
        let shown = try await Formattest.run(["inspect", receiptPath])
        #expect(shown.status == 0)
        #expect(shown.stdout.hasPrefix("receipt (CMS SignedData): \(receipt.count) bytes\n"))
        #expect(shown.stdout.contains("field 2 app id: \"\(sample.appID)\""))

        let garbage = try files.write(Data([0xa2, 0x63, 0x66, 0x6d]), named: "garbage.cbor")
        let malformed = try await Formattest.run(["inspect", garbage, "--json"])
        #expect(malformed.status == 0)
        #expect(malformed.stdout.contains("undecodable"))

        let missing = try await Formattest.run(["inspect", files.directory.appendingPathComponent("nope").path])
        #expect(missing.status == 2)
    }

    @Test("verify reports the receipt check: verified with Apple's G3 root, invalid with another, rejected when required")
    func verifyReportsReceipt() async throws {
        let sample = try RealSample.named("veehaitch_ios_14_2")
        let files = try TemporaryFiles()
        let path = try files.write(Data(try #require(sample.attestation)).base64EncodedString(), named: "att.b64")
        let arguments = try Formattest.verifyArguments(sample, attestationPath: path)
        let verified = try await Formattest.run(arguments)
        #expect(verified.status == 0, "\(verified.stderr)")
        let check = try #require(try verified.jsonObject()["receiptCheck"] as? [String: Any])
        #expect(check["status"] as? String == "verified")
        #expect(check["type"] as? String == "ATTEST")
        #expect(check["environment"] as? String == "sandbox")
        #expect(check["creationTime"] as? String == "2020-11-21T22:13:02Z")

        // The App Attest root as the receipt root: reported, not rejected...
        let appAttestRoot = try files.write(AppleAppAttestationRoot.pem, named: "root.pem")
        let wrongRoot = try await Formattest.run(arguments + ["--receipt-root", appAttestRoot])
        #expect(wrongRoot.status == 0)
        let invalid = try #require(try wrongRoot.jsonObject()["receiptCheck"] as? [String: Any])
        #expect(invalid["status"] as? String == "invalid")
        #expect(invalid["code"] as? String == "receipt_chain_invalid")
        // ... unless receipts are required.
        let required = try await Formattest.run(arguments + ["--receipt-root", appAttestRoot, "--require-valid-receipt"])
        #expect(required.status == 1)
        #expect((try required.jsonObject()["error"] as? [String: Any])?["code"] as? String == "receipt_chain_invalid")
    }
}
