//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing

/// schemathesis against schemas/openapi.yaml on a running `formattest serve --dev-simulator`:
/// no 5xx, and every response conforms to the document (status, content type, schema).
struct APIFuzzTests {
    @Test("schemathesis (bounded, deterministic): no server errors, every response conforms")
    func schemathesis() async throws {
        let schemathesis = try PythonCheck(venv: ".venv-schemathesis", overrideVariable: "FORMATTEST_SCHEMATHESIS_PYTHON")
        let files = try TemporaryFiles()
        let port = Formattest.freePort()
        // With the evidence log on, so that its endpoints are fuzzed too.
        let logKey = files.directory.appendingPathComponent("log.key").path
        let created = try await Formattest.run(["evidence", "log-key", "--name", "fuzz.example/evidence", "--out", logKey])
        try #require(created.status == 0, "\(created.stderr)")
        let server = try Formattest.start([
            "serve", "--dev-simulator", "--port", String(port), "--log-level", "warning",
            "--store", "sqlite:" + files.directory.appendingPathComponent("api.sqlite").path,
            "--data-dir", files.directory.appendingPathComponent("data").path,
            "--demo-dir", repositoryDirectory.appendingPathComponent("demo").path,
            "--evidence-log", files.directory.appendingPathComponent("log").path, "--evidence-log-key", logKey,
        ])
        defer { _ = server.terminate(within: 10) }
        try #require(await Formattest.waitForListener(port: port, process: server.process), "the service did not start listening")

        let (status, output) = try await schemathesis.run(
            tool: "schemathesis",
            [
                "run", repositoryDirectory.appendingPathComponent("schemas/openapi.yaml").path,
                "--url", "http://127.0.0.1:\(port)",
                "--checks", "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance",
                "--max-examples", "25", "--generation-deterministic",
            ])
        #expect(status == 0, "\(output)")
        // Every operation of the document: the ten of App Attest, the service and the simulator,
        // the two of passkeys (GET /api/passkeys/options, POST /api/passkeys/register) and the
        // three of the evidence log (checkpoint, inclusion and consistency proofs).
        #expect(output.contains("Tested: 15"), "\(output)")
        let summary = output.split(separator: "\n").first { $0.contains(" generated, ") } ?? ""
        #expect(summary.contains("passed") && !summary.contains("failed"), "\(output)")
        print("schemathesis: \(summary.trimmingCharacters(in: .whitespaces))")
    }
}
