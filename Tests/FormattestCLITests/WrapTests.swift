//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing

/// `formattest wrap` in batch over every real sample, then the interop checks with python-fido2,
/// joserfc and jsonschema (e2e/interop/check_tokens.py).
struct WrapTests {
    static func line(_ sample: RealSample, name: String? = nil, challenge: String? = nil) throws -> String {
        var fields: [String: Any] = [
            "name": name ?? sample.name,
            "attestation": Data(try #require(sample.attestation)).base64EncodedString(),
            "keyId": Data(try #require(sample.keyID)).base64EncodedString(),
            "appId": sample.appID,
            "at": try #require(Formattest.rfc3339(sample.validAt)),
            "formats": ["fido2", "jws"],
            "username": "alice",
        ]
        if let challenge {
            fields["challenge"] = challenge
        } else {
            fields["clientDataHash"] = hexString(try #require(sample.clientDataHash))
        }
        return String(decoding: try JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys]), as: UTF8.self)
    }

    @Test("batch-wrap every real sample; outputs are never overwritten; FIDO2, JOSE and schema interop")
    func batchAndInterop() async throws {
        let files = try TemporaryFiles()
        let samples = try RealSample.withAttestation()
        let batch = try files.write(try samples.map { try Self.line($0) }.joined(separator: "\n") + "\n", named: "in.jsonl")
        let out = files.directory.appendingPathComponent("out").path
        let data = files.directory.appendingPathComponent("data").path
        // The lines ask for jws: the signing key must exist (wrap never creates one).
        let generated = try await Formattest.run(["keys", "generate", "--data-dir", data])
        #expect(generated.status == 0, "\(generated.stderr)")

        let run = try await Formattest.run(["wrap", "--batch", batch, "--out-dir", out, "--data-dir", data])
        #expect(run.status == 0, "\(run.stdout) \(run.stderr)")
        let summary = try run.jsonObject()
        #expect(summary["total"] as? Int == samples.count)
        #expect(summary["wrapped"] as? Int == samples.count)
        // The files, and the journal a rerun resumes from (hidden).
        let written = try FileManager.default.contentsOfDirectory(atPath: out).filter { !$0.hasPrefix(".") }.sorted()
        try #require(written == samples.map { "\($0.name).json" }.sorted())
        #expect(FileManager.default.fileExists(atPath: out + "/.formattest-batch.jsonl"))
        let before = try Data(contentsOf: URL(fileURLWithPath: out).appendingPathComponent(written[0]))

        // Again: every line is already done (its file checked against the journal), none is
        // overwritten or done twice, exit 0.
        let again = try await Formattest.run(["wrap", "--batch", batch, "--out-dir", out, "--data-dir", data])
        #expect(again.status == 0, "\(again.stderr)")
        let againSummary = try again.jsonObject()
        #expect(againSummary["wrapped"] as? Int == samples.count)
        #expect(againSummary["resumed"] as? Int == samples.count)
        #expect(try Data(contentsOf: URL(fileURLWithPath: out).appendingPathComponent(written[0])) == before)

        // Another batch into that directory: refused (its journal is another input's), nothing written.
        let other = try files.write(try Self.line(samples[0], name: "other") + "\n", named: "other.jsonl")
        let refused = try await Formattest.run(["wrap", "--batch", other, "--out-dir", out, "--data-dir", data])
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("was written for another input"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: out + "/other.json"))

        // One bad item among good ones: it is reported, the others are written.
        let mixed = try files.write(
            [try Self.line(samples[0], name: "good"), try Self.line(samples[1], name: "bad", challenge: "not the challenge")].joined(separator: "\n"),
            named: "mixed.jsonl"
        )
        let mixedOut = files.directory.appendingPathComponent("mixed").path
        let mixedRun = try await Formattest.run(["wrap", "--batch", mixed, "--out-dir", mixedOut, "--data-dir", data])
        #expect(mixedRun.status == 1)
        let mixedSummary = try mixedRun.jsonObject()
        #expect(mixedSummary["wrapped"] as? Int == 1)
        #expect(((mixedSummary["failures"] as? [[String: Any]])?.first?["code"] as? String) == "nonce_mismatch")
        #expect(try FileManager.default.contentsOfDirectory(atPath: mixedOut).filter { !$0.hasPrefix(".") } == ["good.json"])

        // Interop: the real assertions, the JWKS, the schema.
        let assertions = samples.compactMap { sample -> [String: String]? in
            guard let first = sample.assertions.first else { return nil }
            return [
                "name": sample.name,
                "assertion_b64": Data(first.assertion).base64EncodedString(),
                "client_data_hash_hex": hexString(first.clientDataHash),
            ]
        }
        #expect(assertions.count == 7)
        let assertionsFile = try files.write(Data(try JSONSerialization.data(withJSONObject: assertions)), named: "assertions.json")
        let jwks = try await Formattest.run(["keys", "jwks", "--data-dir", data])
        #expect(jwks.status == 0)
        let jwksFile = try files.write(jwks.stdout, named: "jwks.json")

        let check = try await PythonCheck(venv: ".venv-interop", overrideVariable: "FORMATTEST_INTEROP_PYTHON").run(
            "e2e/interop/check_tokens.py",
            [out, jwksFile, assertionsFile, repositoryDirectory.appendingPathComponent("schemas/fido2-wrapper.schema.json").path]
        )
        #expect(check.status == 0, "\(check.output)")
        #expect(check.output.contains(" passed, 0 failed"), "\(check.output)")
    }

    @Test("wrap refuses to wrap what does not verify, and never writes over --out")
    func single() async throws {
        let files = try TemporaryFiles()
        let sample = try RealSample.named("uebelack_production")
        let attestation = try files.write(Data(try #require(sample.attestation)).base64EncodedString(), named: "a.b64")
        let base = [
            "wrap", "--attestation", attestation, "--key-id", Data(try #require(sample.keyID)).base64EncodedString(),
            "--app-id", sample.appID, "--at", try #require(Formattest.rfc3339(sample.validAt)),
            "--data-dir", files.directory.appendingPathComponent("data").path,
        ]
        let refused = try await Formattest.run(base + ["--challenge", "wrong"])
        #expect(refused.status == 1)
        #expect(refused.stdout.isEmpty)
        #expect(refused.stderr.contains("nonce_mismatch"))
        let out = files.directory.appendingPathComponent("w.json").path
        let wrapped = try await Formattest.run(base + ["--challenge", try #require(sample.challenge), "--out", out])
        #expect(wrapped.status == 0, "\(wrapped.stderr)")
        let again = try await Formattest.run(base + ["--challenge", try #require(sample.challenge), "--out", out])
        #expect(again.status == 2)
    }
}
