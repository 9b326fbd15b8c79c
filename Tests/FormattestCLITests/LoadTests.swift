//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing

/// `formattest-dev load`, benchmarks/http/run.sh's generator, against a real service: it sends
/// each connection's bodies in order, counts what the service answered, and says when it ran out.
/// It checks counting, not speed.
struct LoadTests {
    @Test("load sends every pre-signed body once, in order (all accepted), and counts a second pass of the same bodies as refused")
    func countsAnswers() async throws {
        let files = try TemporaryFiles()
        let store = "sqlite:" + files.directory.appendingPathComponent("store.sqlite").path
        let root = try await Formattest.run(["simulate", "root"])
        try #require(root.status == 0, "\(root.stderr)")
        let rootPath = try files.write(root.stdout, named: "root.pem")
        let jsonLines = files.directory.appendingPathComponent("bodies.jsonl").path
        let prepared = try await Formattest.run(["simulate", "prepare-load", "--store", store, "--keys", "2", "--per-key", "25", "--out", jsonLines])
        try #require(prepared.status == 0, "\(prepared.stderr)")

        // One file per connection, one body per line, as run.sh writes them.
        let bodies = files.directory.appendingPathComponent("bodies")
        try FileManager.default.createDirectory(at: bodies, withIntermediateDirectories: true)
        var perConnection: [Int: [String]] = [:]
        for line in try String(contentsOfFile: jsonLines, encoding: .utf8).split(separator: "\n") {
            let entry = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            let connection = try #require(entry["connection"] as? Int)
            let body = try JSONSerialization.data(withJSONObject: try #require(entry["body"]), options: [.sortedKeys])
            perConnection[connection, default: []].append(String(decoding: body, as: UTF8.self))
        }
        #expect(perConnection.keys.sorted() == [0, 1])
        for (connection, lines) in perConnection {
            _ = try files.write(lines.joined(separator: "\n") + "\n", named: "bodies/bodies-\(connection).json")
        }

        let port = Formattest.freePort()
        let server = try Formattest.start([
            "serve", "--port", String(port), "--store", store, "--root", rootPath, "--data-dir", files.directory.path,
            "--log-level", "warning", "--form-max-age", "3600", "--insecure-no-caller-auth",
            // A load of one user per key: the assertion budget (60 a minute) would throttle it.
            "--rate-limit-assertions-per-user", "1000000",
            // ... and the per-address budget /assert spends without caller authentication (one address here).
            "--rate-limit-per-address", "1000000",
        ])
        defer { _ = server.terminate(within: 10) }
        try #require(await Formattest.waitForListener(port: port, process: server.process), "the service did not start listening")

        let arguments = ["load", "--port", String(port), "--connections", "2", "--duration", "60", "--bodies", bodies.path]
        // Each connection runs out of bodies long before the window ends: every one was answered.
        let first = try await Formattest.run(arguments)
        #expect(first.status == 0, "\(first.stderr)")
        let report = try first.jsonObject()
        #expect(report["requests"] as? Int == 50)
        #expect(report["exhaustedConnections"] as? Int == 2)
        let errors = try #require(report["errors"] as? [String: Int])
        #expect(errors == ["connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0])
        #expect((report["p50Microseconds"] as? Int ?? 0) > 0)
        #expect((report["cpuMicroseconds"] as? Int ?? 0) > 0)

        // The same bodies again: each is a replay (a stale counter, a used form), refused with a 4xx.
        let second = try await Formattest.run(arguments)
        #expect(second.status == 0, "\(second.stderr)")
        let replayed = try second.jsonObject()
        #expect(replayed["requests"] as? Int == 50)
        #expect((replayed["errors"] as? [String: Int])?["status"] == 50)
    }

    @Test("load counts a port nothing listens on as connect errors, and reports no requests")
    func connectErrors() async throws {
        let files = try TemporaryFiles()
        _ = try files.write("{}\n", named: "bodies-0.json")
        let result = try await Formattest.run([
            "load", "--port", String(Formattest.freePort()), "--connections", "1", "--duration", "1", "--bodies", files.directory.path,
        ])
        #expect(result.status == 0, "\(result.stderr)")
        let report = try result.jsonObject()
        #expect(report["requests"] as? Int == 0)
        #expect((report["errors"] as? [String: Int])?["connect"] == 1)
    }
}
