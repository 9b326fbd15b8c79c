//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing

/// The files of docs/deployment.md: the systemd unit passes `systemd-analyze verify`, and the
/// example configuration file is one `serve` accepts.
struct DeploymentTests {
    /// `systemd-analyze verify` on `unit` (a copy whose ExecStart is the built executable, since
    /// verify checks that the command exists): its status and everything it printed.
    static func verify(_ unit: String) throws -> (status: Int32, output: String) {
        let files = try TemporaryFiles()
        let path = try files.write(
            Data(unit.replacingOccurrences(of: "/usr/local/bin/formattest", with: Formattest.executable.path).utf8), named: "formattest.service")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["systemd-analyze", "verify", path]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    static var unit: String {
        get throws { try String(contentsOf: repositoryDirectory.appendingPathComponent("deploy/formattest.service"), encoding: .utf8) }
    }

    @Test("deploy/formattest.service passes systemd-analyze verify without a single remark, and is hardened")
    func unitVerifies() throws {
        let unit = try Self.unit
        let result = try Self.verify(unit)
        #expect(result.status == 0 && result.output.isEmpty, "\(result.status): \(result.output)")
        for line in [
            "ExecStart=/usr/local/bin/formattest serve --config /etc/formattest/formattest.json", "DynamicUser=yes", "StateDirectory=formattest",
            "ProtectSystem=strict", "NoNewPrivileges=yes", "CapabilityBoundingSet=\n", "LoadCredential=admin-secret:",
        ] {
            #expect(unit.contains(line), "\(line)")
        }
    }

    @Test(
        "systemd-analyze verify does fail on a unit with one bad line (the check can fail)",
        arguments: [
            ("ProtectSystem=strict", "ProtectSystem=stricter"), ("DynamicUser=yes", "DynamicUser=yes\nNoSuchSetting=1"),
            ("ExecStart=/usr/local/bin/formattest", "ExecStart=/nonexistent/formattest"),
        ])
    func badUnitFails(original: String, replacement: String) throws {
        let unit = try Self.unit
        #expect(unit.contains(original))
        let result = try Self.verify(unit.replacingOccurrences(of: original, with: replacement))
        #expect(!result.output.isEmpty, "\(result.status): \(result.output)")
    }

    @Test("deploy/formattest.json is a configuration serve accepts; with a typo in a key it refuses it")
    func exampleConfiguration() async throws {
        let files = try TemporaryFiles()
        let config = repositoryDirectory.appendingPathComponent("deploy/formattest.json").path
        let (port, adminPort) = (Formattest.freePort(), Formattest.freePort())
        let server = try Formattest.start(
            [
                "serve", "--config", config, "--port", String(port), "--admin-port", String(adminPort), "--store", "memory",
                "--insecure-no-caller-auth", "--data-dir", files.directory.path,
            ],
            environment: ["FORMATTEST_UNUSED": "1"]
        )
        try #require(await Formattest.waitForListener(port: port, process: server.process), "serve did not start with deploy/formattest.json")
        #expect(await Formattest.waitForListener(port: adminPort, seconds: 10, process: server.process))
        #expect(await server.terminate(within: 10))
        let log = await server.finish().stderr
        #expect(log.contains("appId=ABCDE12345.com.example.bank") && log.contains("accepted=production"), "\(log)")

        let typo = try files.write(
            Data(
                try String(contentsOfFile: config, encoding: .utf8).replacingOccurrences(of: "\"trusted-proxy-hops\"", with: "\"trusted-proxy-hop\"")
                    .utf8),
            named: "typo.json"
        )
        let refused = try await Formattest.run(
            ["serve", "--config", typo, "--store", "memory", "--insecure-no-caller-auth", "--data-dir", files.directory.path],
            environment: ["FORMATTEST_UNUSED": "1"]
        )
        #expect(refused.status == 2 && refused.stderr.contains("\"trusted-proxy-hop\" is not a setting"), "\(refused.stderr)")
    }

    /// Runs `sqlite3` with `arguments`: its status and standard output.
    static func sqlite3(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["sqlite3"] + arguments
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    @Test("the backup of docs/deployment.md (sqlite3 .backup while serve runs) gives a consistent copy with every table")
    func onlineBackup() async throws {
        let files = try TemporaryFiles()
        let dataDirectory = files.directory.appendingPathComponent("state")
        let port = Formattest.freePort()
        let server = try Formattest.start(
            ["serve", "--insecure-no-caller-auth", "--data-dir", dataDirectory.path, "--port", String(port), "--log-level", "warning"],
            environment: ["FORMATTEST_UNUSED": "1"]
        )
        defer { _ = server.terminate(within: 10) }
        try #require(await Formattest.waitForListener(port: port, process: server.process), "serve did not start")
        #expect(try await LiveCallerTests.get(port, "/healthz").0 == 200)  // a write (the health probe)
        let database = dataDirectory.appendingPathComponent("formattest.sqlite").path
        let backup = files.directory.appendingPathComponent("backup.sqlite").path
        let copied = try Self.sqlite3([database, ".backup '\(backup)'"])
        #expect(copied.status == 0)
        #expect(try Self.sqlite3([backup, "PRAGMA integrity_check"]).output == "ok\n")
        let tables = try Self.sqlite3([backup, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"]).output
        for table in ["challenges", "form_hashes", "keys", "rate_limits"] {
            #expect(tables.contains(table), "\(tables)")
        }
        #expect(try await LiveCallerTests.get(port, "/healthz").0 == 200)  // the service kept running
    }
}
