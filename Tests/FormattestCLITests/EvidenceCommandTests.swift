//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing

/// Evidence records through the real interfaces: `serve --evidence-dir` archives them over HTTP
/// (SQLite store: the key's attestation is read back from it for assertions), and
/// `formattest evidence verify` re-verifies each file offline.
struct EvidenceCommandTests {
    @Test("serve archives one record per accepted form; evidence verify accepts each and refuses changed bytes, another JWKS, another root")
    func endToEnd() async throws {
        let interop = try PythonCheck(venv: ".venv-interop", overrideVariable: "FORMATTEST_INTEROP_PYTHON")
        let files = try TemporaryFiles()
        let evidence = files.directory.appendingPathComponent("evidence")
        let work = files.directory.appendingPathComponent("work")
        for directory in [evidence, work] { try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: false) }
        let port = Formattest.freePort()
        let server = try Formattest.start([
            "serve", "--dev-simulator", "--port", String(port), "--log-level", "warning",
            "--store", "sqlite:" + files.directory.appendingPathComponent("store.sqlite").path,
            "--data-dir", files.directory.appendingPathComponent("data").path,
            "--evidence-dir", evidence.path, "--evidence-in-answer",
        ])
        defer { _ = server.terminate(within: 10) }
        try #require(await Formattest.waitForListener(port: port, process: server.process), "the service did not start listening")
        let check = try await interop.run(
            "e2e/interop/evidence_end_to_end.py",
            ["http://127.0.0.1:\(port)", evidence.path, Formattest.executable.path, work.path, Formattest.developerExecutable.path]
        )
        #expect(check.status == 0, "\(check.output)")
        #expect(check.output.contains(" passed, 0 failed"), "\(check.output)")
    }

    @Test("serve --evidence-log: checkpoints, inclusion and consistency proofs verify with RFC 9162's algorithms, and survive kill -9")
    func evidenceLog() async throws {
        let interop = try PythonCheck(venv: ".venv-interop", overrideVariable: "FORMATTEST_INTEROP_PYTHON")
        let files = try TemporaryFiles()
        let check = try await interop.run(
            "e2e/interop/evidence_log_end_to_end.py", [Formattest.developerExecutable.path, Formattest.executable.path, files.directory.path]
        )
        #expect(check.status == 0, "\(check.output)")
        #expect(check.output.contains(" passed, 0 failed"), "\(check.output)")
    }

    @Test(
        "serve --evidence-log on MongoDB: two instances append to one log (one sequence, one tree), survive a kill -9 of either, and copy it whole; a directory that is no copy is refused"
    )
    func sharedEvidenceLog() async throws {
        let interop = try PythonCheck(venv: ".venv-interop", overrideVariable: "FORMATTEST_INTEROP_PYTHON")
        let files = try TemporaryFiles()
        let check = try await interop.run(
            "e2e/interop/evidence_log_shared.py",
            [Formattest.developerExecutable.path, Formattest.executable.path, files.directory.path, try MongoTestServer.uri.get()]
        )
        #expect(check.status == 0, "\(check.output)")
        #expect(check.output.contains(" passed, 0 failed"), "\(check.output)")
    }

    @Test("serve refuses an evidence directory that does not exist, is a file, or a bad FORMATTEST_EVIDENCE_IN_ANSWER (exit 2, named)")
    func badSettings() async throws {
        let files = try TemporaryFiles()
        let file = try files.write("x", named: "plain-file")
        let base = ["serve", "--store", "memory", "--insecure-no-caller-auth", "--port", "18998", "--data-dir", files.directory.path]
        for (arguments, environment, named) in [
            (["--evidence-dir", files.directory.appendingPathComponent("missing").path], [:], "--evidence-dir"),
            (["--evidence-dir", file], [:], "--evidence-dir"),
            ([], ["FORMATTEST_EVIDENCE_IN_ANSWER": "yes"], "FORMATTEST_EVIDENCE_IN_ANSWER"),
            ([], ["FORMATTEST_EVIDENCE_DIR": ""], "FORMATTEST_EVIDENCE_DIR"),
        ] as [([String], [String: String], String)] {
            let result = try await Formattest.run(base + arguments, environment: environment)
            #expect(result.status == 2, "\(arguments) \(environment): \(result.status) \(result.stderr)")
            #expect(result.stderr.contains(named), "\(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: files.directory.appendingPathComponent("missing").path))
    }
}
