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

/// What an operator sees of a running service: its JSON log lines (`--log-format json`) and its
/// traces (`--otlp-endpoint`), read by a real OTLP/HTTP receiver made from the OpenTelemetry
/// protocol's own definitions (e2e/observability/otlp_receiver.py, `.venv-otlp`).
struct ObservabilityTests {
    typealias Service = HostileStateTests.Service

    /// `formattest serve` on the memory store, started or refused.
    enum ServeLauncher {
        static func arguments(_ extra: [String], files: TemporaryFiles, port: Int) -> [String] {
            ["serve", "--store", "memory", "--insecure-no-caller-auth", "--data-dir", files.directory.path, "--port", String(port)] + extra
        }

        static func start(_ extra: [String], environment: [String: String] = [:], files: TemporaryFiles) async throws -> (Formattest.Running, Int) {
            let port = Formattest.freePort()
            let server = try Formattest.start(Self.arguments(extra, files: files, port: port), environment: environment)
            try #require(await Formattest.waitForListener(port: port, process: server.process), "the service did not start")
            return (server, port)
        }

        static func refused(_ extra: [String], environment: [String: String] = [:], files: TemporaryFiles) async throws -> Formattest.Result {
            try await Formattest.start(Self.arguments(extra, files: files, port: Formattest.freePort()), environment: environment).finish()
        }
    }

    /// Every line the service wrote on its standard error, each parsed as a JSON object.
    static func jsonLines(_ stderr: String) -> (objects: [[String: Any]], bad: [String]) {
        var objects: [[String: Any]] = []
        var bad: [String] = []
        for line in stderr.split(separator: "\n", omittingEmptySubsequences: true) {
            if let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] {
                objects.append(object)
            } else {
                bad.append(String(line))
            }
        }
        return (objects, bad)
    }

    /// `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    static func isRFC3339UTCMilliseconds(_ text: String) -> Bool {
        text.range(of: #"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$"#, options: .regularExpression) != nil
    }

    /// Runs `body` with a user, its registered key and a form signed with it, whose distinctive
    /// strings (the username, the keyId, the form's nonce) must appear in no log line or span.
    static func secrets(of signed: [String: Any]) -> [String] {
        let form = signed["form"] as? [String: Any] ?? [:]
        return [signed["username"] as? String, signed["keyId"] as? String, form["nonce"] as? String].compactMap { $0 }
    }

    @Test(
        "serve --log-format json: every line the service writes is one JSON object with time, level, message; each refusal's request line carries the answer's code; no username, keyId or form field"
    )
    func jsonLogs() async throws {
        let service = try Service(["--log-format", "json"], logLevel: "info")
        defer { if service.server.process.isRunning { service.stop() } }
        try #require(await Formattest.waitForListener(port: service.port, process: service.server.process))
        let user = "u" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let keyID = try await service.register(user: user)
        let signed = try await service.signed(keyID, amount: "1.00", user: user)
        // Tracing off: a caller's traceparent is not answered, and no line has a trace id.
        let (accepted, _, acceptedHeaders) = try await service.exchange(
            "POST", "/api/appattest/assert", signed, headers: ["traceparent": "00-\(Self.randomHex(bytes: 16))-\(Self.randomHex(bytes: 8))-01"]
        )
        #expect(accepted == 200)
        #expect(!acceptedHeaders.keys.contains { ($0 as? String)?.lowercased() == "traceresponse" }, "\(acceptedHeaders)")
        // Refusals of several kinds: a replay (the flow's), a body that is not an assertion (the
        // request's), a method the route does not take and a path that is no route (the framework's).
        var refusals: [(status: Int, code: String)] = []
        for (method, path, body) in [
            ("POST", "/api/appattest/assert", signed), ("POST", "/api/appattest/assert", ["username": user]),
            ("GET", "/api/appattest/assert", nil), ("GET", "/no/such/route", nil),
        ] as [(String, String, [String: Any]?)] {
            let (status, answer) = try await service.send(method, path, body)
            let code = try #require(service.code(answer), "\(status) \(answer)")
            #expect(status >= 400)
            refusals.append((status, code))
        }
        await service.stop()
        let output = await service.server.finish()
        let (lines, bad) = Self.jsonLines(output.stderr)
        #expect(bad.isEmpty, "lines that are not JSON objects: \(bad)")
        #expect(lines.count >= 10, "\(output.stderr)")
        for line in lines {
            #expect((line["time"] as? String).map(Self.isRFC3339UTCMilliseconds) == true, "\(line)")
            #expect(["trace", "debug", "info", "notice", "warning", "error", "critical"].contains(line["level"] as? String ?? ""), "\(line)")
            #expect(line["message"] is String, "\(line)")
        }
        let requests = lines.filter { $0["message"] as? String == "request" }
        #expect(requests.count >= 8, "\(requests)")
        for request in requests {
            #expect(request["requestId"] is String, "\(request)")
            #expect(request["route"] is String && request["method"] is String && request["ms"] is NSNumber, "\(request)")
            let status = try #require((request["status"] as? NSNumber)?.intValue, "\(request)")
            // Every refusal's line names its code; an accepted request's has none.
            #expect((request["code"] is String) == (status >= 400), "\(request)")
        }
        // Each refusal has its own line with the answer's status and code (a GET on a POST-only
        // route is no route here: 404 not_found, like the unknown path).
        for refusal in Set(refusals.map { "\($0.status) \($0.code)" }) {
            let answered = refusals.filter { "\($0.status) \($0.code)" == refusal }.count
            let logged = requests.filter { "\(($0["status"] as? NSNumber)?.intValue ?? 0) \($0["code"] as? String ?? "")" == refusal }.count
            #expect(logged == answered, "\(refusal): \(answered) answered, \(logged) logged in \(requests)")
        }
        // The assert route is logged by its template: the accepted form, the replay, the bad body.
        #expect(requests.filter { $0["route"] as? String == "/api/appattest/assert" }.count == 3, "\(requests)")
        for secret in Self.secrets(of: signed) {
            #expect(!output.stderr.contains(secret), "the log holds \(secret)")
        }
        #expect(lines.allSatisfy { $0["traceId"] == nil && $0["spanId"] == nil })
    }

    @Test(
        "otlp-endpoint: OTEL_EXPORTER_OTLP_ENDPOINT alone turns tracing on; a URL that is not http(s) and a flag beside a different variable stop the service (exit 2)"
    )
    func otlpEndpointSetting() async throws {
        let files = try TemporaryFiles()
        let unused = "http://127.0.0.1:\(Formattest.freePort())"
        let (server, port) = try await ServeLauncher.start([], environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": unused], files: files)
        defer { _ = server.terminate(within: 10) }
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/healthz")!)
        request.setValue("00-\(Self.randomHex(bytes: 16))-\(Self.randomHex(bytes: 8))-01", forHTTPHeaderField: "traceparent")
        let (_, response) = try await URLSession.shared.data(for: request)
        #expect((response as? HTTPURLResponse)?.value(forHTTPHeaderField: "traceresponse") != nil, "\(response)")

        let scheme = try await ServeLauncher.refused(["--otlp-endpoint", "ftp://127.0.0.1:4318"], files: files)
        #expect(scheme.status == 2, "\(scheme.stderr)")
        #expect(scheme.stderr.contains("--otlp-endpoint (command line): must be an http:// or https:// URL"), "\(scheme.stderr)")
        let conflict = try await ServeLauncher.refused(
            ["--otlp-endpoint", "http://127.0.0.1:4318"], environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": unused], files: files)
        #expect(conflict.status == 2, "\(conflict.stderr)")
        #expect(conflict.stderr.contains("OTEL_EXPORTER_OTLP_ENDPOINT is also set, to another URL"), "\(conflict.stderr)")
        // r13: the traces' own variable, which swift-otel prefers, naming another URL.
        let traces = try await ServeLauncher.refused(
            ["--otlp-endpoint", "http://127.0.0.1:4318"], environment: ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "\(unused)/v1/traces"], files: files)
        #expect(traces.status == 2, "\(traces.stderr)")
        #expect(traces.stderr.contains("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is also set, to another URL"), "\(traces.stderr)")
    }

    @Test("r14 F5: the start-up log names the OTLP endpoint without its user information or query, where a collector's credentials may be")
    func otlpEndpointRedacted() async throws {
        let files = try TemporaryFiles()
        let endpoint = "http://collector:s3cr3tpw@127.0.0.1:\(Formattest.freePort())/?api_key=s3cr3tpw"
        let (server, _) = try await ServeLauncher.start(["--log-level", "info", "--otlp-endpoint", endpoint], files: files)
        #expect(await server.terminate(within: 10))
        let log = await server.finish().stderr
        #expect(log.contains("otlpEndpoint=http://***@127.0.0.1:") && log.contains("?***"), "\(log)")
        #expect(!log.contains("s3cr3tpw"), "\(log)")
    }

    @Test("serve --log-format: text stays the default; a value other than text or json stops the service (exit 2)")
    func logFormatSetting() async throws {
        let service = try Service([], logLevel: "info")
        defer { if service.server.process.isRunning { service.stop() } }
        try #require(await Formattest.waitForListener(port: service.port, process: service.server.process))
        await service.stop()
        let text = await service.server.finish()
        #expect(text.stderr.contains("log format"), "\(text.stderr)")
        #expect(Self.jsonLines(text.stderr).objects.isEmpty, "\(text.stderr)")
        let files = try TemporaryFiles()
        let refused = try await ServeLauncher.refused(["--log-format", "xml"], files: files)
        #expect(refused.status == 2, "\(refused.stderr)")
        #expect(refused.stderr.contains("--log-format (command line): must be one of text, json"), "\(refused.stderr)")
    }

    /// The receiver: its port, its output file and its process (stopped by closing its stdin).
    struct Receiver {
        let process: Process
        let input: Pipe
        let port: Int
        let spans: URL

        init(files: TemporaryFiles) throws {
            let python = try PythonCheck(venv: ".venv-otlp", overrideVariable: "FORMATTEST_OTLP_PYTHON").python
            self.spans = files.directory.appendingPathComponent("spans.jsonl")
            self.process = Process()
            self.process.executableURL = python
            self.process.arguments = [repositoryDirectory.appendingPathComponent("e2e/observability/otlp_receiver.py").path, self.spans.path]
            let output = Pipe()
            self.input = Pipe()
            self.process.standardOutput = output
            self.process.standardInput = self.input
            try self.process.run()
            var text = ""
            while !text.hasSuffix("\n") {
                let byte = output.fileHandleForReading.readData(ofLength: 1)
                guard !byte.isEmpty else { break }
                text += String(decoding: byte, as: UTF8.self)
            }
            self.port = try #require(Int(text.trimmingCharacters(in: .whitespacesAndNewlines)), "the receiver printed no port: \(text)")
        }

        func stop() {
            try? self.input.fileHandleForWriting.close()
            self.process.waitUntilExit()
        }

        /// The spans received so far.
        func received() -> [[String: Any]] {
            guard let text = try? String(contentsOf: self.spans, encoding: .utf8) else { return [] }
            return text.split(separator: "\n").compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
        }
    }

    static func randomHex(bytes: Int) -> String {
        (0..<bytes).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }

    @Test(
        "serve --otlp-endpoint: a traced assert reaches a real OTLP receiver as a span tree under the caller's trace id, with traceresponse; a refusal's span and JSON log line share its trace id and code; no span holds the username, keyId or a form field"
    )
    func tracesReachAnOTLPReceiver() async throws {
        let files = try TemporaryFiles()
        let receiver = try Receiver(files: files)
        defer { receiver.stop() }
        let service = try Service(
            ["--log-format", "json", "--otlp-endpoint", "http://127.0.0.1:\(receiver.port)", "--evidence-in-answer"], logLevel: "info"
        )
        defer { if service.server.process.isRunning { service.stop() } }
        try #require(await Formattest.waitForListener(port: service.port, process: service.server.process))
        let user = "u" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let keyID = try await service.register(user: user)
        let signed = try await service.signed(keyID, amount: "1.00", user: user)

        // The caller's trace: the service's span is its child, and says so in traceresponse.
        let traceID = Self.randomHex(bytes: 16)
        let callerSpan = Self.randomHex(bytes: 8)
        let (status, answer, headers) = try await service.exchange(
            "POST", "/api/appattest/assert", signed, headers: ["traceparent": "00-\(traceID)-\(callerSpan)-01"]
        )
        #expect(status == 200, "\(answer)")
        let traceresponse = try #require(headers.first { ($0.key as? String)?.lowercased() == "traceresponse" }?.value as? String, "\(headers)")
        let parts = traceresponse.split(separator: "-").map(String.init)
        try #require(parts.count == 4, "\(traceresponse)")
        #expect(parts[0] == "00" && parts[1] == traceID && parts[2] != callerSpan && parts[3] == "01", "\(traceresponse)")

        // A refusal (the same form again: a replay) in a trace of its own.
        let refusedTrace = Self.randomHex(bytes: 16)
        let (refusedStatus, refusedAnswer, _) = try await service.exchange(
            "POST", "/api/appattest/assert", signed, headers: ["traceparent": "00-\(refusedTrace)-\(Self.randomHex(bytes: 8))-01"]
        )
        let refusedCode = try #require(service.code(refusedAnswer), "\(refusedAnswer)")
        #expect(refusedStatus == 409, "\(refusedAnswer)")

        // Stopping the service flushes its exporter; the receiver has the spans by then or soon after.
        await service.stop()
        let output = await service.server.finish()
        var spans: [[String: Any]] = []
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            spans = receiver.received()
            if spans.contains(where: { $0["traceId"] as? String == refusedTrace && $0["kind"] as? String == "SPAN_KIND_SERVER" }) { break }
            try await Task.sleep(for: .milliseconds(200))
        }

        // The accepted assert: one server span, the caller's child, and the steps beneath it.
        let trace = spans.filter { $0["traceId"] as? String == traceID }
        let root = try #require(trace.first { $0["kind"] as? String == "SPAN_KIND_SERVER" }, "\(spans)")
        #expect(root["parentSpanId"] as? String == callerSpan, "\(root)")
        #expect(root["spanId"] as? String == parts[2], "\(root)")
        #expect(root["name"] as? String == "POST /api/appattest/assert", "\(root)")
        #expect(root["service"] as? String == "formattest", "\(root)")
        let rootAttributes = root["attributes"] as? [String: Any] ?? [:]
        #expect(rootAttributes["http.route"] as? String == "/api/appattest/assert", "\(root)")
        #expect((rootAttributes["http.response.status_code"] as? NSNumber)?.intValue == 200, "\(root)")
        let byID = Dictionary(trace.compactMap { span in (span["spanId"] as? String).map { ($0, span) } }) { first, _ in first }
        func parentName(_ span: [String: Any]) -> String? {
            (span["parentSpanId"] as? String).flatMap { byID[$0] }?["name"] as? String
        }
        let children = Set(trace.filter { parentName($0) == "POST /api/appattest/assert" }.compactMap { $0["name"] as? String })
        for step in ["caller authentication", "body read", "flow assert", "token signing", "evidence write"] {
            #expect(children.contains(step), "no \(step) under the request's span: \(children)")
        }
        let flowChildren = Set(trace.filter { parentName($0) == "flow assert" }.compactMap { $0["name"] as? String })
        #expect(flowChildren.contains("store loadKey") && flowChildren.contains("store commitAssertion"), "\(flowChildren)")
        // Each span lies within its parent's time.
        for span in trace {
            guard let parent = (span["parentSpanId"] as? String).flatMap({ byID[$0] }) else { continue }
            let (start, end) = ((span["start"] as? NSNumber)?.int64Value ?? 0, (span["end"] as? NSNumber)?.int64Value ?? 0)
            let (parentStart, parentEnd) = ((parent["start"] as? NSNumber)?.int64Value ?? 0, (parent["end"] as? NSNumber)?.int64Value ?? 0)
            #expect(parentStart <= start && end <= parentEnd && start <= end, "\(span) outside \(parent)")
        }

        // The refusal: its span and its log line share the trace id, and both name the code.
        let refusedRoot = try #require(
            spans.first { $0["traceId"] as? String == refusedTrace && $0["kind"] as? String == "SPAN_KIND_SERVER" }, "\(spans)"
        )
        #expect((refusedRoot["attributes"] as? [String: Any])?["formattest.error.code"] as? String == refusedCode, "\(refusedRoot)")
        let (lines, bad) = Self.jsonLines(output.stderr)
        #expect(bad.isEmpty, "\(bad)")
        let refusedLine = lines.first { $0["message"] as? String == "request" && $0["traceId"] as? String == refusedTrace }
        #expect(refusedLine?["code"] as? String == refusedCode, "\(lines)")
        #expect(refusedLine?["spanId"] as? String == refusedRoot["spanId"] as? String, "\(String(describing: refusedLine))")

        // Nothing of the user's in any span.
        let everything = try String(contentsOf: receiver.spans, encoding: .utf8)
        for secret in Self.secrets(of: signed) {
            #expect(!everything.contains(secret), "a span holds \(secret)")
        }
    }
}
