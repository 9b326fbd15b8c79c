//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing

/// `formattest bench` works (a short run): it checks that every case runs and reports, not speed.
struct BenchTests {
    @Test("a short bench run prints every case with its figures")
    func shortRun() async throws {
        let repository = repositoryDirectory
        let result = try await Formattest.run([
            "bench", "--duration", "0.05",
            "--sample", repository.appendingPathComponent("Tests/Fixtures/appattest/samples/uebelack_production.json").path,
            "--form", repository.appendingPathComponent("benchmarks/jcs/form-small.json").path,
            "--document", repository.appendingPathComponent("benchmarks/jcs/doc-1mb.json").path,
            "--batch-lines", "8", "--slices", "3",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        let cases = try #require(try result.jsonObject()["cases"] as? [[String: Any]])
        let names = Set(cases.compactMap { $0["name"] as? String })
        for expected in [
            "jcs.canonicalize.form-small", "jcs.canonicalize.doc-1mb", "attestation.verify.real(uebelack_production)",
            "attestation.verify.simulated", "assertion.verify", "limit.p384.verify(leaf, sha256)", "limit.p256.verify",
            "flow.assert.memory", "flow.assert.sqlite", "jws.sign(server-attestation)", "limit.p256.sign",
            "passkey.assertion.verify", "limit.passkey(sha256(clientDataJSON)+p256.verify)",
            "tracing.off.assert-steps(5 steps through TraceStep, tracing off)", "tracing.off.assert-steps(5 steps, no spans)",
        ] {
            #expect(names.contains(expected), "\(expected)")
        }
        #expect(names.contains { $0.hasPrefix("batch.wrap(uebelack_production, ") && $0.hasSuffix(" cores)") }, "\(names)")
        // The ratios, each from this run's means, with its goal where the issue sets one.
        let ratios = try #require(try result.jsonObject()["ratios"] as? [[String: Any]])
        let ratioNames = Set(ratios.compactMap { $0["name"] as? String })
        for expected in [
            "flow.assert.memory / (assertion.verify+form-hash)", "(assertion.verify+form-hash) / (p256.verify + its hashes)",
            "attestation.verify.real / (p384.verify + p256.verify + hashes)", "jws.sign / p256.sign",
            "passkey.assertion.verify / (sha256(clientDataJSON) + p256.verify)",
            "(batch.wrap × cores) / (p384.verify + p256.verify + hashes)",
            "tracing off: an assert's steps through TraceStep / flow.assert.memory",
        ] {
            #expect(ratioNames.contains(expected), "\(expected)")
        }
        // Each measured in interleaved slices: the rounds' range holds the median.
        for ratio in ratios {
            let value = ratio["ratio"] as? Double ?? 0
            #expect(value > 0, "\(ratio)")
            #expect(ratio["slices"] as? Int == 3, "\(ratio)")
            #expect((ratio["sliceRatioMinimum"] as? Double ?? .infinity) <= value, "\(ratio)")
            #expect((ratio["sliceRatioMaximum"] as? Double ?? 0) >= value, "\(ratio)")
        }
        let batch = try #require(ratios.first { ($0["name"] as? String)?.hasPrefix("(batch.wrap") == true })
        #expect((batch["shareOfLimit"] as? Double ?? 0) > 0, "\(batch)")
        #expect(batch["goal"] as? Double == 1.25, "\(batch)")
        #expect((try result.jsonObject()["cpuBudgetMicroseconds"] as? Double ?? 0) > 0)
        // Tracing off: what the steps cost per assert, from the two tracing cases.
        #expect(try result.jsonObject()["tracingOffNanosecondsPerAssert"] as? Double != nil)
        for entry in cases {
            #expect((entry["operations"] as? Int ?? 0) > 0, "\(entry)")
            #expect((entry["opsPerSecond"] as? Double ?? 0) > 0, "\(entry)")
        }
    }

    @Test("bench runs from any directory with the package's fixtures, names each case on stderr, and leaves no file behind")
    func anyDirectory() async throws {
        let files = try TemporaryFiles()
        let workingDirectory = files.directory.appendingPathComponent("cwd")
        let temporary = files.directory.appendingPathComponent("tmp")
        for directory in [workingDirectory, temporary] {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        }
        let result = try await Formattest.run(
            ["bench", "--duration", "0.01", "--only", "jcs,attestation,flow"],
            environment: ["TMPDIR": temporary.path],
            currentDirectory: workingDirectory
        )
        #expect(result.status == 0, "\(result.stderr)")
        let names = try #require(try result.jsonObject()["cases"] as? [[String: Any]]).compactMap { $0["name"] as? String }
        #expect(names.contains("jcs.canonicalize.doc-1mb"))
        #expect(names.contains("attestation.verify.real(uebelack_production)"))
        #expect(names.contains("flow.assert.sqlite"))
        for name in names {
            #expect(result.stderr.contains("bench: \(name)\n"), "\(name)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: workingDirectory.path).isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: temporary.path).isEmpty)
    }
}
