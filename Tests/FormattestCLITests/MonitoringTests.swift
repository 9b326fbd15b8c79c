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

/// The alerting rules against a real Prometheus (Debian's, installed by scripts/setup): it scrapes
/// the running service's `/metrics` and evaluates deploy/prometheus/formattest-alerts.yml over
/// what it scraped. (`promtool test rules`, in scripts/test, checks what each rule fires on.)
struct MonitoringTests {
    @Test("a real Prometheus scrapes the live service and evaluates every alerting rule against what it scraped, without errors")
    func prometheusScrapesAndEvaluates() async throws {
        let files = try TemporaryFiles()
        let adminPort = Formattest.freePort()
        let (server, port) = try await ServeConfigurationTests.start(["--admin-port", String(adminPort)], files: files)
        defer { _ = server.terminate(within: 10) }
        try #require(await Formattest.waitForListener(port: adminPort, process: server.process))
        // Traffic for the series the rules read: answers by status, latencies, flow outcomes.
        #expect(try await LiveCallerTests.get(port, "/healthz").0 == 200)
        let refused = try await LiveCallerTests.get(port, "/api/appattest/assert").0
        #expect(refused >= 400, "GET on a POST route: \(refused)")

        let rules = repositoryDirectory.appendingPathComponent("deploy/prometheus/formattest-alerts.yml").path
        let prometheusPort = Formattest.freePort()
        let configuration = try files.write(
            """
            global:
              scrape_interval: 1s
              evaluation_interval: 1s
            rule_files:
              - \(rules)
            scrape_configs:
              - job_name: formattest
                static_configs:
                  - targets: ["127.0.0.1:\(adminPort)"]
            """,
            named: "prometheus.yml"
        )
        let prometheus = Process()
        prometheus.executableURL = URL(fileURLWithPath: "/usr/bin/prometheus")
        prometheus.arguments = [
            "--config.file=\(configuration)", "--storage.tsdb.path=\(files.directory.appendingPathComponent("tsdb").path)",
            "--web.listen-address=127.0.0.1:\(prometheusPort)", "--log.level=warn",
        ]
        prometheus.standardOutput = FileHandle.nullDevice
        prometheus.standardError = FileHandle.nullDevice
        try prometheus.run()
        defer {
            prometheus.terminate()
            prometheus.waitUntilExit()
        }
        try #require(await Formattest.waitForListener(port: prometheusPort, seconds: 60, process: prometheus), "Prometheus did not start")

        // Scraped: the service's answers are in Prometheus, by status.
        var scraped: [[String: Any]] = []
        var evaluated: [[String: Any]] = []
        let deadline = Date().addingTimeInterval(90)
        while Date() < deadline {
            scraped =
                try await Self.api(prometheusPort, "/api/v1/query?query=hb_requests%7Bjob%3D%22formattest%22%7D")["result"] as? [[String: Any]] ?? []
            let groups = try await Self.api(prometheusPort, "/api/v1/rules")["groups"] as? [[String: Any]] ?? []
            evaluated = groups.flatMap { $0["rules"] as? [[String: Any]] ?? [] }
            let allEvaluated = !evaluated.isEmpty && evaluated.allSatisfy { ($0["lastEvaluation"] as? String).map { !$0.hasPrefix("0001") } ?? false }
            if !scraped.isEmpty && allEvaluated { break }
            try await Task.sleep(for: .milliseconds(500))
        }
        let statuses = Set(scraped.compactMap { ($0["metric"] as? [String: String])?["http_response_status_code"] })
        #expect(statuses.contains("200") && statuses.contains(String(refused)), "\(scraped)")
        // Every rule of the file ran against those series, and none failed (a wrong metric name
        // evaluates to nothing, so the names are checked too, below).
        let names = Set(evaluated.compactMap { $0["name"] as? String })
        #expect(
            names == [
                "FormAttestHighServerErrorRate", "FormAttestSlowRequests", "FormAttestStoreUnavailable", "FormAttestEvidenceFailures",
                "FormAttestClockSkew", "FormAttestScrapeMissing", "FormAttestAcceptErrors", "FormAttestNewcomersWaiting",
                "FormAttestSlowAnswers",
            ],
            "\(names)"
        )
        for rule in evaluated {
            #expect(rule["health"] as? String == "ok", "\(rule)")
        }
        // The series each rule reads exist in what was scraped (the outcome counter and the latency
        // histogram are registered at start-up or by the first request).
        for series in ["http_server_request_duration_bucket", "formattest_flow_outcomes_total", "formattest_time_to_answer_seconds_bucket", "up"] {
            let result = try await Self.api(prometheusPort, "/api/v1/query?query=\(series)%7Bjob%3D%22formattest%22%7D")["result"] as? [[String: Any]]
            #expect(!(result ?? []).isEmpty, "\(series) was not scraped")
        }
    }

    /// The `data` of a Prometheus HTTP API answer.
    static func api(_ port: Int, _ path: String) async throws -> [String: Any] {
        let (status, body) = try await LiveCallerTests.get(port, path)
        guard status == 200, let object = try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any],
            let data = object["data"] as? [String: Any]
        else { return [:] }
        return data
    }
}
