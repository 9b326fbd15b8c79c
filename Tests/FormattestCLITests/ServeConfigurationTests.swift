//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `serve`'s settings from flags, environment variables and the configuration file, its start-up
/// checks and log, and the operators' listener, through the real executable.
struct ServeConfigurationTests {
    /// Starts `serve` on a free port with the memory store and no caller authentication (unless
    /// the arguments say otherwise), and waits for `port` (the public one unless given).
    static func start(
        _ arguments: [String], environment: [String: String] = [:], files: TemporaryFiles, listenPort: Int? = nil
    ) async throws -> (Formattest.Running, Int) {
        let port = listenPort ?? Formattest.freePort()
        let server = try Formattest.start(
            ["serve", "--store", "memory", "--insecure-no-caller-auth", "--data-dir", files.directory.path]
                + (listenPort == nil ? ["--port", String(port)] : [])
                + arguments,
            environment: environment.merging(["FORMATTEST_UNUSED": "1"]) { $1 }
        )
        try #require(
            await Formattest.waitForListener(port: port, process: server.process), "the service did not start listening: \(server.process.isRunning)")
        return (server, port)
    }

    static func refused(_ arguments: [String], environment: [String: String] = [:]) async throws -> Formattest.Result {
        let files = try TemporaryFiles()
        return try await Formattest.run(
            ["serve", "--insecure-no-caller-auth", "--data-dir", files.directory.path, "--port", String(Formattest.freePort())] + arguments,
            environment: environment.merging(["FORMATTEST_UNUSED": "1"]) { $1 }
        )
    }

    // MARK: - The one table

    @Test("docs/configuration.md and docs/errors.md hold exactly the tables the code generates")
    func generatedTables() async throws {
        for (table, file) in [
            ("configuration", "docs/configuration.md"), ("errors", "docs/errors.md"), ("passkey-errors", "docs/errors.md"),
            ("evidence-errors", "docs/errors.md"),
        ] {
            let generated = try await Formattest.run(["docs", table])
            #expect(generated.status == 0, "\(generated.stderr)")
            #expect(generated.stdout.hasPrefix("| "))
            let text = try String(contentsOf: repositoryDirectory.appendingPathComponent(file), encoding: .utf8)
            let begin = "<!-- BEGIN GENERATED: formattest docs \(table) -->\n"
            let start = try #require(text.range(of: begin), "\(file) has no generated region")
            let stop = try #require(text.range(of: "<!-- END GENERATED -->", range: start.upperBound..<text.endIndex))
            #expect(
                String(text[start.upperBound..<stop.lowerBound]) == generated.stdout, "\(file) differs: run formattest docs \(table) --write \(file)")
        }
    }

    @Test("docs --write replaces the generated region only; a file without one is refused (exit 2)")
    func docsWrite() async throws {
        let files = try TemporaryFiles()
        let path = try files.write(
            Data("before\n<!-- BEGIN GENERATED: formattest docs errors -->\nOBSOLETE LINE\n<!-- END GENERATED -->\nafter\n".utf8), named: "e.md")
        let written = try await Formattest.run(["docs", "errors", "--write", path])
        #expect(written.status == 0, "\(written.stderr)")
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(
            text.hasPrefix("before\n<!-- BEGIN GENERATED: formattest docs errors -->\n| status |")
                && text.hasSuffix("<!-- END GENERATED -->\nafter\n"))
        #expect(!text.contains("OBSOLETE LINE") && text.contains("`request_timeout`"))
        let none = try await Formattest.run(["docs", "configuration", "--write", path])
        #expect(none.status == 2 && none.stderr.contains("no region"), "\(none.stderr)")
    }

    @Test("every flag of serve --help is a row of the table, and every row a flag of serve --help")
    func helpMatchesTable() async throws {
        let help = try await Formattest.run(["serve", "--help"])
        let table = try await Formattest.run(["docs", "configuration"])
        #expect(help.status == 0 && table.status == 0)
        func flags(_ text: String) -> Set<String> {
            Set(
                text.split(whereSeparator: { !($0.isLetter || $0.isNumber || $0 == "-") }).map(String.init).filter {
                    $0.hasPrefix("--") && $0.dropFirst(2).first?.isLetter == true
                })
        }
        let helpFlags = flags(help.stdout).subtracting(["--help", "--version"])
        let tableFlags = flags(table.stdout)
        #expect(helpFlags.count > 40)
        #expect(
            helpFlags == tableFlags, "only in help: \(helpFlags.subtracting(tableFlags)); only in the table: \(tableFlags.subtracting(helpFlags))")
        #expect(help.stdout.contains("LOG_LEVEL") && help.stdout.contains("FORMATTEST_CONFIG"))
    }

    // MARK: - Precedence and strictness

    @Test("precedence: a flag beats the environment, which beats the file, which beats the default")
    func precedence() async throws {
        let files = try TemporaryFiles()
        let (filePort, environmentPort, flagPort) = (Formattest.freePort(), Formattest.freePort(), Formattest.freePort())
        let config = try files.write(Data(#"{"port": \#(filePort), "log-level": "notice"}"#.utf8), named: "c.json")
        for (arguments, environment, expected) in [
            (["--port", String(flagPort)], ["FORMATTEST_PORT": String(environmentPort)], flagPort),
            ([], ["FORMATTEST_PORT": String(environmentPort)], environmentPort),
            ([], [:], filePort),
        ] as [([String], [String: String], Int)] {
            let (server, _) = try await Self.start(
                ["--config", config, "--log-level", "info"] + arguments, environment: environment, files: files, listenPort: expected)
            #expect(await server.terminate(within: 10))
            let log = await server.finish().stderr
            #expect(log.contains("address=http://127.0.0.1:\(expected)"), "\(log)")
            // --log-level on the command line beats the file's notice: info lines are there.
            #expect(log.contains("level=info source=command line"), "\(log)")
        }
        // With neither flag nor variable, the file's level holds: no info line at all.
        let (quiet, _) = try await Self.start(["--config", config], files: files, listenPort: filePort)
        #expect(await quiet.terminate(within: 10))
        let log = await quiet.finish().stderr
        #expect(!log.contains(" info ") && !log.contains("public listener"), "\(log)")
    }

    @Test("a single-value flag given twice: the last is used, and a warning names it at start (before: not a word)")
    func repeatedFlagWarned() async throws {
        let files = try TemporaryFiles()
        let (server, _) = try await Self.start(["--issuer", "first", "--issuer=second"], files: files)
        #expect(await server.terminate(within: 10))
        let log = await server.finish().stderr
        #expect(log.contains("a flag given more than once: the last value is used") && log.contains("flag=--issuer"), "\(log)")
        let (once, _) = try await Self.start(["--issuer", "only"], files: files)
        #expect(await once.terminate(within: 10))
        #expect(!(await once.finish().stderr).contains("more than once"))
    }

    @Test("LOG_LEVEL is honoured (warning: no info lines) and checked (a bad one stops serve, named)")
    func logLevelVariable() async throws {
        let files = try TemporaryFiles()
        let (server, _) = try await Self.start([], environment: ["LOG_LEVEL": "warning"], files: files)
        #expect(await server.terminate(within: 10))
        let log = await server.finish().stderr
        #expect(!log.contains("public listener") && log.contains("warning"), "\(log)")
        let bad = try await Self.refused(["--store", "memory"], environment: ["LOG_LEVEL": "loud"])
        #expect(bad.status == 2 && bad.stderr.contains("LOG_LEVEL (environment)") && bad.stderr.contains("loud"), "\(bad.stderr)")
    }

    @Test(
        "a bad value from any source stops serve before it listens, naming the setting and the source",
        arguments: [
            ([], ["FORMATTEST_PORT": "18086x"], nil, "FORMATTEST_PORT (environment)"),
            ([], ["FORMATTEST_FORM_MAX_AGE": "1e3"], nil, "FORMATTEST_FORM_MAX_AGE (environment)"),
            ([], ["FORMATTEST_REQUIRE_CHALLENGE": "yes"], nil, "FORMATTEST_REQUIRE_CHALLENGE (environment)"),
            ([], ["FORMATTEST_RATE_LIMIT_PER_USER": "+30"], nil, "FORMATTEST_RATE_LIMIT_PER_USER (environment)"),
            ([], [:], #"{"port": 0}"#, "port (config file"),
            ([], [:], #"{"port": "8080"}"#, "port (config file"),
            ([], [:], #"{"form-max-age": -1}"#, "form-max-age (config file"),
            ([], [:], #"{"require-challenge": 1}"#, "require-challenge (config file"),
            ([], [:], #"{"app-id": "ABCDE12345.com.example.app"}"#, "app-id (config file"),
            ([], [:], #"{"prot": 8080}"#, "\"prot\" is not a setting"),
            ([], [:], #"{"port": 8080, "port": 8081}"#, "not strict JSON"),
            // Numbers a double cannot hold are not rounded into values nobody wrote (r13).
            ([], [:], #"{"form-max-age": 2.9999999999999999}"#, "a number is not exactly what it will be read as"),
            ([], [:], #"{"revoked-key-retention": 2591999.99999999999}"#, "a number is not exactly what it will be read as"),
            ([], [:], #"["port"]"#, "expected a JSON object"),
            // A bad value is refused even where a higher source overrides it.
            (["--port", "18997"], [:], #"{"port": 70000}"#, "port (config file"),
            (["--form-max-skew", "nan"], [:], nil, "--form-max-skew (command line)"),
            (["--config", "/nonexistent/formattest.json"], [:], nil, "--config"),
        ] as [([String], [String: String], String?, String)])
    func refusedValues(arguments: [String], environment: [String: String], file: String?, named: String) async throws {
        let files = try TemporaryFiles()
        var extra = arguments
        if let file { extra += ["--config", try files.write(Data(file.utf8), named: "c.json")] }
        let result = try await Self.refused(["--store", "memory"] + extra, environment: environment)
        #expect(result.status == 2, "\(arguments) \(environment) \(file ?? ""): \(result.status) \(result.stderr)")
        #expect(result.stderr.contains(named), "\(result.stderr)")
    }

    @Test("FORMATTEST_CONFIG names the file too; the file's settings apply (its app ids reach the log)")
    func configVariable() async throws {
        let files = try TemporaryFiles()
        let config = try files.write(
            Data(#"{"app-id": ["ZYXWV98765.com.example.one", "ZYXWV98765.com.example.two"], "environment": "production"}"#.utf8), named: "c.json")
        let (server, _) = try await Self.start([], environment: ["FORMATTEST_CONFIG": config], files: files)
        #expect(await server.terminate(within: 10))
        let log = await server.finish().stderr
        #expect(log.contains("appId=ZYXWV98765.com.example.one") && log.contains("appId=ZYXWV98765.com.example.two"), "\(log)")
        #expect(log.contains("accepted=production"), "\(log)")
        #expect(log.contains("configuration file") && log.contains("source=environment"), "\(log)")
    }

    // MARK: - Start-up checks and log

    @Test(
        "an App ID without its team prefix is refused, from the flag and from the environment (the accepted form: startupLog)",
        arguments: [
            (["--app-id", "com.example.bank"], [:]), (["--app-id", "abcde12345.com.example.bank"], [:]), (["--app-id", "ABCDE12345."], [:]),
            (["--app-id", "ABCDE1234.com.example.bank"], [:]), ([], ["FORMATTEST_APP_IDS": "ABCDE12345.com.example.bank,com.example.bank"]),
        ] as [([String], [String: String])])
    func appIDPrefix(arguments: [String], environment: [String: String]) async throws {
        let result = try await Self.refused(["--store", "memory"] + arguments, environment: environment)
        #expect(result.status == 2, "\(result.stderr)")
        #expect(result.stderr.contains("TEAMID.bundleID") || result.stderr.contains("team id"), "\(result.stderr)")
    }

    @Test("a demo directory that was asked for and is missing stops serve; one that exists is logged with its URL")
    func demoDirectory() async throws {
        let missing = try await Self.refused(["--store", "memory", "--demo-dir", "/nonexistent/demo"])
        #expect(missing.status == 2 && missing.stderr.contains("--demo-dir") && missing.stderr.contains("not a directory"), "\(missing.stderr)")
        let fromVariable = try await Self.refused(["--store", "memory"], environment: ["FORMATTEST_DEMO_DIR": "/nonexistent/demo"])
        #expect(fromVariable.status == 2 && fromVariable.stderr.contains("--demo-dir (environment)"), "\(fromVariable.stderr)")
        let files = try TemporaryFiles()
        let demo = repositoryDirectory.appendingPathComponent("demo").path
        let (server, port) = try await Self.start(["--demo-dir", demo], files: files)
        #expect(try await LiveCallerTests.get(port, "/appattest-demo.html").0 == 200)
        #expect(await server.terminate(within: 10))
        let log = await server.finish().stderr
        #expect(log.contains("demo page") && log.contains("url=http://127.0.0.1:\(port)/appattest-demo.html"), "\(log)")
    }

    @Test("a SQLite path whose directory does not exist is refused and nothing is created; the data directory is created")
    func sqliteDirectory() async throws {
        let files = try TemporaryFiles()
        let missing = files.directory.appendingPathComponent("typo/formattest.sqlite")
        let result = try await Self.refused(["--store", "sqlite:\(missing.path)"])
        #expect(result.status == 2 && result.stderr.contains("does not exist"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: missing.deletingLastPathComponent().path))
        // The default store lives in the data directory, which serve creates.
        let dataDirectory = files.directory.appendingPathComponent("state")
        let port = Formattest.freePort()
        let server = try Formattest.start(
            ["serve", "--insecure-no-caller-auth", "--data-dir", dataDirectory.path, "--port", String(port)], environment: ["FORMATTEST_UNUSED": "1"]
        )
        try #require(await Formattest.waitForListener(port: port, process: server.process), "the service did not start")
        #expect(await server.terminate(within: 10))
        let log = await server.finish().stderr
        #expect(FileManager.default.fileExists(atPath: dataDirectory.appendingPathComponent("formattest.sqlite").path), "\(log)")
        #expect(log.contains("kind=sqlite") && log.contains("location=sqlite:\(dataDirectory.path)/formattest.sqlite"), "\(log)")
    }

    @Test("start-up log: listeners, store, data directory, trust anchors with fingerprints, environments, app ids")
    func startupLog() async throws {
        let files = try TemporaryFiles()
        let adminPort = Formattest.freePort()
        let (server, port) = try await Self.start(["--admin-port", String(adminPort), "--app-id", "ABCDE12345.com.example.bank"], files: files)
        #expect(await server.terminate(within: 10))
        let log = await server.finish().stderr
        for fact in [
            "public listener", "address=http://127.0.0.1:\(port)", "operators' listener", "address=http://127.0.0.1:\(adminPort)",
            "store", "kind=memory", "data directory", "path=\(files.directory.standardizedFileURL.path)", "trust anchor",
            "Apple App Attestation Root CA",
            // Apple App Attestation Root CA's SHA-256 fingerprint (openssl x509 -fingerprint -sha256).
            "sha256=1C:B9:82:3B:A2:8B:A6:AD:2D:33:A0:06:94:1D:E2:AE:4F:51:3E:F1:D4:E8:31:B9:F7:E0:FA:7B:62:42:C9:32",
            "environments", "accepted=development,production", "app id", "appId=ABCDE12345.com.example.bank", "log level",
        ] {
            #expect(log.contains(fact), "\(fact) missing from: \(log)")
        }
        #expect(!log.contains("share the public port"), "\(log)")
    }

    @Test("a MongoDB URI's credentials never reach the log or the error")
    func redactedStore() async throws {
        let result = try await Self.refused(["--store", "mongodb://alice:s3cr%40t@127.0.0.1:1/formattest?serverSelectionTimeoutMS=200"])
        #expect(result.status == 2, "\(result.stderr)")
        #expect(!result.stderr.contains("s3cr") && !result.stderr.contains("alice"), "\(result.stderr)")
        #expect(result.stderr.contains("mongodb://***@127.0.0.1:1/formattest"), "\(result.stderr)")
    }

    @Test(
        "r13: a store location's secrets stay out of the log and the errors: the URI's options, a password with an unencoded @, a location of no known kind; every source's location is checked",
        arguments: [
            // The options may carry a TLS key's password or a cloud session token.
            (["--store", "mongodb://127.0.0.1:1/db?tlsCertificateKeyFilePassword=PWSECRET1&serverSelectionTimeoutMS=200"], [:], "is unavailable"),
            (
                ["--store", "mongodb://127.0.0.1:1/db?authMechanismProperties=AWS_SESSION_TOKEN:PWSECRET1&serverSelectionTimeoutMS=200"], [:],
                "is unavailable"
            ),
            // Two @: the driver would resolve part of the password as the host.
            (["--store", "mongodb://u:PWSEC@RET1@127.0.0.1:1/db"], [:], "store (command line): the MongoDB URI holds more than one @"),
            // No scheme: once logged whole as a MongoDB location before it was refused.
            (["--store", "u:PWSECRET1@127.0.0.1"], [:], "store (command line): must be sqlite:PATH, a mongodb:// or mongodb+srv:// URI, or memory"),
            (["--store", "sqlite:"], [:], "store (command line): sqlite: needs the database file's path"),
            // A location from a lower source is checked too, though the flag wins.
            (["--store", "memory"], ["FORMATTEST_STORE": "PWSECRET1"], "FORMATTEST_STORE (environment): must be sqlite:PATH"),
        ] as [([String], [String: String], String)])
    func storeSecretsStayOut(arguments: [String], environment: [String: String], named: String) async throws {
        let result = try await Self.refused(arguments, environment: environment)
        #expect(result.status == 2, "\(result.stderr)")
        #expect(result.stderr.contains(named), "\(result.stderr)")
        for piece in ["PWSEC", "RET1"] {
            #expect(!result.stderr.contains(piece), "\(piece) in: \(result.stderr)")
        }
    }

    @Test(
        "r13: a FIFO, a device or a directory given as one of serve's files is refused at start (exit 2), never read: a FIFO blocked the start without a word",
        arguments: ["--config", "--caller-secret-file", "--admin-secret-file", "--caller-jwks", "--root", "--allowed-cdhashes-file", "--signing-key"])
    func filesMustBeRegular(flag: String) async throws {
        let files = try TemporaryFiles()
        let fifo = files.directory.appendingPathComponent("fifo").path
        #expect(mkfifo(fifo, 0o600) == 0)
        var extra: [String] = []
        if flag == "--caller-jwks" { extra = ["--caller-issuer", "https://idp.example", "--caller-audience", "formattest"] }
        let arguments = [flag, fifo] + extra
        let result = try await Formattest.run(
            [
                "serve", "--data-dir", files.directory.appendingPathComponent("data").path, "--port", String(Formattest.freePort()), "--store",
                "memory",
            ]
                + (["--caller-secret-file", "--caller-jwks"].contains(flag) ? [] : ["--insecure-no-caller-auth"]) + arguments,
            environment: ["FORMATTEST_UNUSED": "1"])
        #expect(result.status == 2, "\(flag): \(result.status) \(result.stderr)")
        #expect(result.stderr.contains("is not a regular file") || result.stderr.contains("not a regular"), "\(flag): \(result.stderr)")
    }

    // MARK: - The operators' listener

    @Test("--admin-port: /metrics and /admin/* on their own listener, 404 on the public port; without it, on the public port with a warning")
    func operatorsListener() async throws {
        let files = try TemporaryFiles()
        let secret = "operator-secret-0123456789abcdef"
        let secretFile = try files.writeSecret("\(secret)\n", named: "admin")
        let adminPort = Formattest.freePort()
        let (server, port) = try await Self.start(["--admin-port", String(adminPort), "--admin-secret-file", secretFile], files: files)
        try #require(await Formattest.waitForListener(port: adminPort, process: server.process))
        #expect(try await LiveCallerTests.get(port, "/metrics").0 == 404)
        #expect(try await LiveCallerTests.get(port, "/admin/users/alice/keys", bearer: secret).0 == 404)
        #expect(try await LiveCallerTests.get(port, "/healthz").0 == 200)
        let metrics = try await LiveCallerTests.get(adminPort, "/metrics")
        #expect(metrics.0 == 200 && metrics.1.contains("# TYPE"), "\(metrics.1.prefix(200))")
        #expect(try await LiveCallerTests.get(adminPort, "/admin/users/alice/keys", bearer: secret).0 == 200)
        #expect(try await LiveCallerTests.get(adminPort, "/admin/users/alice/keys").0 == 401)
        #expect(try await LiveCallerTests.get(adminPort, "/healthz").0 == 404)
        #expect(try await LiveCallerTests.get(adminPort, "/api/appattest/challenge").0 == 404)
        #expect(await server.terminate(within: 10))

        let (shared, sharedPort) = try await Self.start(["--admin-secret-file", secretFile], files: files)
        #expect(try await LiveCallerTests.get(sharedPort, "/metrics").0 == 200)
        #expect(try await LiveCallerTests.get(sharedPort, "/admin/users/alice/keys", bearer: secret).0 == 200)
        #expect(await shared.terminate(within: 10))
        #expect(await shared.finish().stderr.contains("share the public port"))
    }

    @Test(
        "the passkey settings are refused when they cannot work: one without the other, a bad factor policy, a policy that needs passkeys without them",
        arguments: [
            (["--passkey-rp-id", "bank.example"], "needs at least one --passkey-origin"),
            (["--passkey-origin", "https://bank.example"], "needs --passkey-rp-id"),
            (["--factor-policy", "transfer=app-attest+fingerprint"], "fingerprint"),
            (["--factor-policy", "*=app-attest,transfer=passkey-uv"], "requires passkeys"),
            // r6 F11: an rp id or origin no client can ever match.
            (["--passkey-rp-id", "https://Bank.Example/", "--passkey-origin", "https://bank.example"], "not a lower-case domain name"),
            (["--passkey-rp-id", "127.0.0.1", "--passkey-origin", "https://127.0.0.1"], "is an IP address"),
            (["--passkey-rp-id", "bank.example", "--passkey-origin", "bank.example"], "is not an origin"),
            (["--passkey-rp-id", "bank.example", "--passkey-origin", "https://evil.example"], "nor a subdomain"),
        ] as [([String], String)])
    func passkeySettingsRefused(arguments: [String], named: String) async throws {
        let result = try await Formattest.run(
            ["serve", "--store", "memory", "--insecure-no-caller-auth"] + arguments, environment: ["FORMATTEST_UNUSED": "1"])
        #expect(result.status == 2 && result.stderr.contains(named), "\(arguments): \(result.status) \(result.stderr)")
    }

    @Test(
        "a retention of revoked keys shorter than the 30 days registrations are counted over stops serve, from any source, saying why",
        arguments: [
            (["--revoked-key-retention", "2591999"], [:], nil, "--revoked-key-retention (command line)"),
            ([], ["FORMATTEST_REVOKED_KEY_RETENTION": "86400"], nil, "FORMATTEST_REVOKED_KEY_RETENTION (environment)"),
            ([], [:], #"{"revoked-key-retention": 3600}"#, "revoked-key-retention (config file"),
        ] as [([String], [String: String], String?, String)])
    func revokedKeyRetentionRefused(arguments: [String], environment: [String: String], file: String?, named: String) async throws {
        let files = try TemporaryFiles()
        var extra = arguments
        if let file { extra += ["--config", try files.write(Data(file.utf8), named: "c.json")] }
        let result = try await Self.refused(["--store", "memory"] + extra, environment: environment)
        #expect(result.status == 2, "\(result.status) \(result.stderr)")
        #expect(result.stderr.contains(named) && result.stderr.contains("must be at least 2592000 (30 days)"), "\(result.stderr)")
        #expect(result.stderr.contains("registrations are counted over the last 30 days"), "\(result.stderr)")
    }

    @Test("a retention of revoked keys of exactly 30 days is accepted: serve listens")
    func revokedKeyRetentionAtTheMinimum() async throws {
        let files = try TemporaryFiles()
        let (server, _) = try await Self.start(["--revoked-key-retention", "2592000"], files: files)
        #expect(server.process.isRunning)
        _ = await server.terminate(within: 10)
    }

    @Test(
        "the operators' listener is refused on the public port, and admin-host alone is refused",
        arguments: [
            ["--admin-host", "127.0.0.1"], ["--port", "18996", "--admin-port", "18996"],
        ])
    func operatorsListenerRefused(arguments: [String]) async throws {
        let result = try await Formattest.run(
            ["serve", "--store", "memory", "--insecure-no-caller-auth"] + arguments, environment: ["FORMATTEST_UNUSED": "1"])
        #expect(result.status == 2 && result.stderr.contains("--admin-"), "\(result.stderr)")
    }
}
