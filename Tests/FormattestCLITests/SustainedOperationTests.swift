//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
import FormAttestTestSupport
import Foundation
import Testing

/// Housekeeping under load, at a small scale (docs/performance.md has the large one): a store
/// holding a backlog of expired records is purged by the running service in bounded steps while
/// forms are accepted, and nothing expired is left.
struct SustainedOperationTests {
    /// The longest a purge step may hold the writer here. The service aims at 5 ms a step; one
    /// transaction over this backlog takes over a second on this machine (the rule this checks).
    static let stepBoundMilliseconds = 250
    /// The most the write-ahead log may hold after the purge of the backlog under load. Measured
    /// with this test's commands by hand (benchmarks/soak/purge_small.sh, release builds): 42.7 MB
    /// before schema v9 (the writer's automatic checkpoint bound: the purge rewrote about a page
    /// per record), 5.0 MB after (the checkpointer restarts the log from 4 MB on).
    static let walBoundBytes = 16 * 1024 * 1024

    /// A SQLite store with a backlog of expired records, two keys registered by `prepare-load`, and
    /// their pre-signed bodies in `bodies/` (one file per connection).
    struct Fixture {
        let files: TemporaryFiles
        let database: String
        let rootPath: String
        let bodies: URL
        var store: String { "sqlite:" + self.database }

        init(expiredForms: Int, challenges: Int, perKey: Int) async throws {
            self.files = try TemporaryFiles()
            self.database = self.files.directory.appendingPathComponent("store.sqlite").path
            let root = try await Formattest.run(["simulate", "root"])
            try #require(root.status == 0, "\(root.stderr)")
            self.rootPath = try self.files.write(root.stdout, named: "root.pem")
            let backlog = try await Formattest.run([
                "simulate", "backlog", "--store", "sqlite:" + self.database, "--keys", "3", "--expired-forms", String(expiredForms),
                "--challenges", String(challenges),
            ])
            try #require(backlog.status == 0, "\(backlog.stderr)")
            let summary = try backlog.jsonObject()
            #expect(summary["keys"] as? Int == 3)
            #expect(summary["expiredForms"] as? Int == expiredForms)
            #expect(summary["challenges"] as? Int == challenges)
            #expect(try SustainedOperationTests.count(self.database, "SELECT count(*) FROM form_hashes") == expiredForms)
            #expect(try SustainedOperationTests.count(self.database, "SELECT count(*) FROM challenges") == challenges)
            #expect(try SustainedOperationTests.count(self.database, "SELECT count(*) FROM keys") == 3)

            let jsonLines = self.files.directory.appendingPathComponent("bodies.jsonl").path
            let prepared = try await Formattest.run([
                "simulate", "prepare-load", "--store", "sqlite:" + self.database, "--keys", "2", "--per-key", String(perKey), "--seed", "7",
                "--out", jsonLines,
            ])
            try #require(prepared.status == 0, "\(prepared.stderr)")
            self.bodies = self.files.directory.appendingPathComponent("bodies")
            try FileManager.default.createDirectory(at: self.bodies, withIntermediateDirectories: true)
            var perConnection: [Int: [String]] = [:]
            for line in try String(contentsOfFile: jsonLines, encoding: .utf8).split(separator: "\n") {
                let entry = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
                let body = try JSONSerialization.data(withJSONObject: try #require(entry["body"]), options: [.sortedKeys])
                perConnection[try #require(entry["connection"] as? Int), default: []].append(String(decoding: body, as: UTF8.self))
            }
            for (connection, lines) in perConnection {
                _ = try self.files.write(lines.joined(separator: "\n") + "\n", named: "bodies/bodies-\(connection).json")
            }
        }

        /// `serve` on this store, listening.
        func serve(purgeInterval: String, port: Int, extra: [String] = []) async throws -> Formattest.Running {
            let server = try Formattest.start(
                [
                    "serve", "--port", String(port), "--store", self.store, "--root", self.rootPath, "--data-dir", self.files.directory.path,
                    "--log-level", "notice", "--form-max-age", "3600", "--insecure-no-caller-auth", "--purge-interval", purgeInterval,
                    // Load, not a hostile user: each key signs more forms than the default per-user budget.
                    "--rate-limit-assertions-per-user", "100000", "--rate-limit-per-address", "1000000",
                ] + extra)
            guard await Formattest.waitForListener(port: port, process: server.process) else {
                _ = await server.terminate(within: 5)
                throw CocoaError(.fileReadUnknown, userInfo: [NSDebugDescriptionErrorKey: "the service did not start listening"])
            }
            return server
        }

        /// Sends every body once over two connections; returns `load`'s report.
        func load(port: Int) async throws -> [String: Any] {
            let load = try await Formattest.run([
                "load", "--port", String(port), "--connections", "2", "--duration", "120", "--bodies", self.bodies.path,
            ])
            #expect(load.status == 0, "\(load.stderr)")
            return try load.jsonObject()
        }

        /// Expired form hashes and challenges left, as of now.
        func expired() throws -> Int { try Self.expired(self.database) }

        static func expired(_ database: String) throws -> Int {
            let now = Date().timeIntervalSince1970
            return try SustainedOperationTests.count(
                database,
                "SELECT (SELECT count(*) FROM form_hashes WHERE expires_at <= \(now)) + (SELECT count(*) FROM challenges WHERE expires_at <= \(now))"
            )
        }

        /// The size of the store's write-ahead log. SQLite reuses the file from its start after a
        /// checkpoint and never shrinks it while the service runs: its size is the most the
        /// service wrote between two checkpoints.
        func walBytes() -> Int {
            ((try? FileManager.default.attributesOfItem(atPath: self.database + "-wal"))?[.size] as? Int) ?? 0
        }

        /// Live form hashes (accepted forms still in their window).
        func live() throws -> Int {
            try SustainedOperationTests.count(self.database, "SELECT count(*) FROM form_hashes WHERE expires_at > \(Date().timeIntervalSince1970)")
        }

        /// Kills `process` (SIGKILL) as soon as `condition` holds, polled every 20 ms for at most
        /// `seconds` on a thread of its own: the full suite's load can hold a test's task for tens
        /// of seconds (a task polling the purge once saw it end before the kill), but not a thread.
        /// Whether it held (and the kill was sent).
        func kill(_ process: Process, once condition: @escaping @Sendable () throws -> Bool, seconds: Double) async -> Bool {
            await withCheckedContinuation { continuation in
                Thread.detachNewThread {
                    let deadline = Date().addingTimeInterval(seconds)
                    while Date() < deadline {
                        if (try? condition()) == true {
                            Foundation.kill(process.processIdentifier, SIGKILL)
                            continuation.resume(returning: true)
                            return
                        }
                        usleep(20_000)
                    }
                    continuation.resume(returning: false)
                }
            }
        }

        /// Waits until `condition` holds (polling), for at most `seconds`.
        func wait(seconds: Double, until condition: () throws -> Bool) async throws -> Bool {
            let deadline = Date().addingTimeInterval(seconds)
            while Date() < deadline {
                if try condition() { return true }
                try await Task.sleep(for: .milliseconds(100))
            }
            return try condition()
        }
    }

    static let noErrors = ["connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0]

    @Test("a backlog of 65,000 expired records is purged in bounded steps while forms are accepted; nothing expired is left")
    func backlogPurgedUnderLoad() async throws {
        let fixture = try await Fixture(expiredForms: 60000, challenges: 5000, perKey: 150)
        let port = Formattest.freePort()
        let server = try await fixture.serve(purgeInterval: "0.5", port: port)
        var stopped = false
        defer { if !stopped { _ = server.terminate(within: 10) } }

        let report = try await fixture.load(port: port)
        #expect(report["requests"] as? Int == 300)
        #expect((report["errors"] as? [String: Int]) == Self.noErrors)

        // The purge runs on its own schedule; wait for it to have worked the backlog off.
        #expect(try await fixture.wait(seconds: 120) { try fixture.expired() == 0 }, "expired records left after the purge")
        // Every accepted form's record is live: the 300 forms and the two registrations.
        #expect(try fixture.live() == 302)
        // What the purge wrote: deleting oldest expiry first rewrote about one page of the hash
        // index for every record (random hashes: records that expire together sit on different
        // pages), up to the writer's automatic checkpoint bound. Swept in hash order, a step
        // rewrites a few adjacent pages, and the WAL stays within what the requests write.
        let wal = fixture.walBytes()
        print("write-ahead log after the purge: \(wal) bytes")
        #expect(wal <= Self.walBoundBytes, "the write-ahead log grew to \(wal) bytes")

        stopped = true
        #expect(await server.terminate(within: 10))
        let log = await server.finish().stderr
        let passes = log.split(separator: "\n").filter { $0.contains("purged expired records") }
        try #require(!passes.isEmpty, "no purge pass was logged: \(log)")
        for pass in passes { print("purge pass:", pass) }
        let counts = passes.compactMap { Self.field("count", in: $0) }
        let steps = passes.compactMap { Self.field("steps", in: $0) }
        let longest = passes.compactMap { Self.field("longest_step_ms", in: $0) }
        // The backlog, plus the few rate-limit windows of this run's own requests that expired
        // meanwhile (one per budget and minute: a run that crosses a minute purges them too).
        #expect((65000...65010).contains(counts.reduce(0, +)), "\(passes)")
        // Many steps, none above the bound: the writer was never held for the whole backlog.
        #expect(steps.reduce(0, +) >= 10, "\(passes)")
        #expect(longest.count == passes.count && longest.allSatisfy { $0 <= Self.stepBoundMilliseconds }, "\(passes)")
    }

    @Test("kill -9 in the middle of a purge loses no live record; after a restart the rest of the backlog goes and accepted forms stay refused")
    func killedMidPurge() async throws {
        // A backlog large enough that the purge is still running when the test, starved by the
        // full suite's load, first sees it begin (60,000 was once purged before the kill).
        let fixture = try await Fixture(expiredForms: 240_000, challenges: 0, perKey: 50)
        // Accept 100 forms first, with no purge due.
        let port = Formattest.freePort()
        let first = try await fixture.serve(purgeInterval: "3600", port: port)
        let accepted = try await fixture.load(port: port)
        #expect(accepted["requests"] as? Int == 100)
        #expect((accepted["errors"] as? [String: Int]) == Self.noErrors)
        #expect(await first.terminate(within: 10))
        #expect(try fixture.live() == 102)
        #expect(try fixture.expired() == 240_000)

        // Restarted with a purge due at once; killed once the purge has begun and before it ended.
        let second = try await fixture.serve(purgeInterval: "0.2", port: port)
        let database = fixture.database
        let begun = await fixture.kill(second.process, once: { try Fixture.expired(database) < 240_000 }, seconds: 60)
        if !begun { kill(second.process.processIdentifier, SIGKILL) }
        second.process.waitUntilExit()
        try #require(begun, "the purge never began")
        let left = try fixture.expired()
        #expect(left > 0, "the purge ended before the kill: the test proves nothing (make the backlog larger)")
        #expect(try fixture.live() == 102)
        #expect(try Self.text(fixture.database, "PRAGMA integrity_check") == "ok")

        // Restarted: the rest goes, the live records stay, and every accepted form is still a replay.
        let third = try await fixture.serve(purgeInterval: "0.2", port: port)
        defer { _ = third.terminate(within: 10) }
        #expect(try await fixture.wait(seconds: 120) { try fixture.expired() == 0 })
        #expect(try fixture.live() == 102)
        let replayed = try await fixture.load(port: port)
        #expect(replayed["requests"] as? Int == 100)
        #expect((replayed["errors"] as? [String: Int])?["status"] == 100)
    }

    @Test("the soak generator reports every window of its run, the last one included, with the requests answered in it")
    func soakReportsItsLastWindow() async throws {
        let fixture = try await Fixture(expiredForms: 0, challenges: 0, perKey: 1)
        let port = Formattest.freePort()
        let server = try await fixture.serve(purgeInterval: "3600", port: port)
        defer { _ = server.terminate(within: 10) }
        // 2.5 s in windows of 1 s: two whole windows and a last one of half a second. The keys
        // are those of `simulate backlog` (backlog-0 and backlog-1, counter 0); the fixture's
        // pre-signed bodies are never sent.
        let soak = try await Formattest.run([
            "soak", "--port", String(port), "--keys", "2", "--connections", "2", "--duration", "2.5", "--window", "1", "--rate", "40",
            "--server-pid", String(server.process.processIdentifier), "--database", fixture.database,
        ])
        #expect(soak.status == 0, "\(soak.stderr)")
        let windows = try soak.stdout.split(separator: "\n").map { line in
            try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        }
        #expect(windows.map { $0["window"] as? Int } == [1, 2, 3], "\(soak.stdout)")
        // 40 requests a second on a fixed schedule: about 40, 40 and 20. The last window was
        // empty before its line was made from the connections' own results.
        for window in windows {
            let requests = try #require(window["requests"] as? Int)
            #expect(requests > 0, "\(window)")
            #expect(window["statusErrors"] as? Int == 0, "\(window)")
        }
        // The last window's rate is over its own length, half a second.
        let last = try #require(windows.last)
        let requests = try #require(last["requests"] as? Int)
        #expect(last["requestsPerSecond"] as? Double == Double(requests) / 0.5, "\(last)")
    }

    @Test(
        "the load generators carry on over a new connection when the service closes one after its answer (Connection: close), as an HTTP client does"
    )
    func generatorsReconnect() async throws {
        // Each connection is served 10 requests, then closed by the service
        // (--max-requests-per-connection, 1,000 by default: a 10-minute soak at saturation died
        // after 4,000 requests, 1,000 a connection, before the generator reconnected).
        let fixture = try await Fixture(expiredForms: 0, challenges: 0, perKey: 50)
        let port = Formattest.freePort()
        let server = try await fixture.serve(purgeInterval: "3600", port: port, extra: ["--max-requests-per-connection", "10"])
        defer { _ = server.terminate(within: 10) }
        // load: the fixture's 100 pre-signed bodies (50 a key) over 2 connections, 10 a connection.
        let load = try await fixture.load(port: port)
        #expect(load["requests"] as? Int == 100, "\(load)")
        #expect(load["errors"] as? [String: Int] == ["connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0], "\(load)")
        #expect((load["reconnections"] as? Int ?? 0) >= 8, "\(load)")
        // soak: 2 connections at 40 a second for 3 s (counters above the load's). Without
        // reconnecting, its two connections end after 10 answers each: 20 at most.
        let soak = try await Formattest.run([
            "soak", "--port", String(port), "--keys", "2", "--connections", "2", "--duration", "3", "--window", "1", "--rate", "40",
            "--first-counter", "1000", "--server-pid", String(server.process.processIdentifier), "--database", fixture.database,
        ])
        #expect(soak.status == 0, "\(soak.stderr)")
        let windows = try soak.stdout.split(separator: "\n").map { line in
            try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        }
        let answered = windows.compactMap { $0["requests"] as? Int }.reduce(0, +)
        #expect(answered > 20, "\(soak.stdout)")
        #expect(windows.allSatisfy { $0["statusErrors"] as? Int == 0 }, "\(soak.stdout)")
    }

    @Test("simulate backlog stores every filler key, each under its own keyId and user, whatever the order it writes them in")
    func backlogFillersInKeyIDOrder() async throws {
        let files = try TemporaryFiles()
        let database = files.directory.appendingPathComponent("store.sqlite").path
        let backlog = try await Formattest.run([
            "simulate", "backlog", "--store", "sqlite:" + database, "--keys", "500", "--signing-keys", "3", "--filler-blobs", "small",
            "--batch", "64",
        ])
        try #require(backlog.status == 0, "\(backlog.stderr)")
        #expect(try Self.count(database, "SELECT count(*) FROM keys") == 500)
        #expect(try Self.count(database, "SELECT count(DISTINCT username) FROM keys WHERE username GLOB 'backlog-[0-9]*'") == 500)
        #expect(try Self.count(database, "SELECT count(*) FROM key_registrations") == 500)
        // A filler's keyId is the SHA-256 of its name, and its row is its user's.
        for index in [3, 250, 499] {
            let keyID = SHA256.hash(data: Array("formattest-backlog-filler-key-\(index)".utf8)).map { String(format: "%02X", $0) }.joined()
            #expect(try Self.text(database, "SELECT username FROM keys WHERE key_id = x'\(keyID)'") == "backlog-\(index)")
        }
    }

    /// An integer that `sqlite3` prints for `sql` (the CLI, as an operator would ask).
    static func count(_ database: String, _ sql: String) throws -> Int {
        let text = try Self.text(database, sql)
        guard let value = Int(text) else {
            throw CocoaError(.fileReadCorruptFile, userInfo: [NSDebugDescriptionErrorKey: "sqlite3 printed \(text)"])
        }
        return value
    }

    /// What `sqlite3` prints for `sql`, trimmed.
    static func text(_ database: String, _ sql: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
        process.arguments = [database, sql]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard process.terminationStatus == 0 else {
            throw CocoaError(.fileReadCorruptFile, userInfo: [NSDebugDescriptionErrorKey: "sqlite3 failed: \(text)"])
        }
        return text
    }

    /// The integer value of `name=` in a log line's metadata.
    static func field(_ name: String, in line: Substring) -> Int? {
        guard let range = line.range(of: name + "=") else { return nil }
        return Int(line[range.upperBound...].prefix(while: \.isNumber))
    }
}
