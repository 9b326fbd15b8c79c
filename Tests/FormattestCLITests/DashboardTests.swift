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

/// The Grafana dashboard (deploy/grafana/formattest-dashboard.json) reads only metrics the running
/// service exports: every PromQL expression of its panels is checked against a live `/metrics`.
struct DashboardTests {
    static let dashboard = repositoryDirectory.appendingPathComponent("deploy/grafana/formattest-dashboard.json")

    /// Every panel's PromQL expressions.
    static func expressions() throws -> [String] {
        let object = try JSONSerialization.jsonObject(with: Data(contentsOf: Self.dashboard)) as? [String: Any]
        let panels = object?["panels"] as? [[String: Any]] ?? []
        return panels.flatMap { ($0["targets"] as? [[String: Any]] ?? []).compactMap { $0["expr"] as? String } }
    }

    /// The metric names a PromQL expression reads: its identifiers, less label matchers, strings,
    /// ranges, grouping clauses and anything called like a function (`rate(`, `sum by (…) (`).
    static func metricNames(in expression: String) -> Set<String> {
        var text = expression
        for pattern in [
            #""[^"]*""#, #"\{[^}]*\}"#, #"\[[^\]]*\]"#, #"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)"#,
        ] {
            text = text.replacingOccurrences(of: pattern, with: " ", options: .regularExpression)
        }
        let operators: Set = ["and", "or", "unless", "bool", "offset"]
        var names = Set<String>()
        let scalars = Array(text.unicodeScalars)
        var index = 0
        func isStart(_ scalar: Unicode.Scalar) -> Bool { scalar == "_" || scalar == ":" || (scalar.properties.isAlphabetic && scalar.isASCII) }
        func isPart(_ scalar: Unicode.Scalar) -> Bool { isStart(scalar) || ("0"..."9").contains(scalar) }
        while index < scalars.count {
            let scalar = scalars[index]
            // A number (0.99, 1e3) or a variable ($job) is no metric.
            if ("0"..."9").contains(scalar) || scalar == "." || scalar == "$" {
                index += 1
                while index < scalars.count && (isPart(scalars[index]) || scalars[index] == ".") { index += 1 }
                continue
            }
            guard isStart(scalar) else {
                index += 1
                continue
            }
            var end = index
            while end < scalars.count && isPart(scalars[end]) { end += 1 }
            let word = String(String.UnicodeScalarView(scalars[index..<end]))
            var next = end
            while next < scalars.count && scalars[next] == " " { next += 1 }
            let called = next < scalars.count && scalars[next] == "("
            if !called && !operators.contains(word) { names.insert(word) }
            index = end
        }
        return names
    }

    /// The sample names a `/metrics` page has (`name{labels} value` and `name value` lines).
    static func exported(_ page: String) -> Set<String> {
        Set(
            page.split(separator: "\n").filter { !$0.hasPrefix("#") }.compactMap { line in
                line.split(whereSeparator: { $0 == "{" || $0 == " " }).first.map(String.init)
            }
        )
    }

    @Test("the extraction finds each metric an expression reads, and only those")
    func extraction() {
        #expect(
            Self.metricNames(
                in:
                    #"histogram_quantile(0.99, sum by (le, http_route) (rate(http_server_request_duration_bucket{job=~"$job", http_route=~"/api/.*"}[$__rate_interval])))"#
            )
                == ["http_server_request_duration_bucket"]
        )
        #expect(
            Self.metricNames(in: #"sum (rate(a_total{code!="ok"}[5m])) / on (job) sum without (x) (rate(b_total[5m])) and c > 0.05"#)
                == ["a_total", "b_total", "c"]
        )
    }

    @Test("every PromQL expression of the Grafana dashboard names only metrics the live service exports on /metrics")
    func dashboardReadsExportedMetrics() async throws {
        let expressions = try Self.expressions()
        #expect(expressions.count >= 10, "\(expressions)")
        let read = expressions.reduce(into: Set<String>()) { $0.formUnion(Self.metricNames(in: $1)) }
        // The panels the dashboard promises: requests, latency, refusals, evidence, purge, connections.
        for family in [
            "hb_requests", "http_server_request_duration_bucket", "formattest_flow_outcomes_total", "formattest_evidence_failures_total",
            "formattest_purged_records_total", "formattest_purge_step_seconds_bucket", "formattest_connections_refused_total",
        ] {
            #expect(read.contains(family), "the dashboard does not read \(family)")
        }

        let files = try TemporaryFiles()
        let adminPort = Formattest.freePort()
        let (server, port) = try await ServeConfigurationTests.start(["--admin-port", String(adminPort)], files: files)
        defer { _ = server.terminate(within: 10) }
        try #require(await Formattest.waitForListener(port: adminPort, process: server.process))
        // A flow (its outcome counter) and an answer (the request counter and latency histogram).
        #expect(try await LiveCallerTests.get(port, "/api/appattest/challenge?username=alice").0 == 200)
        let (status, page) = try await LiveCallerTests.get(adminPort, "/metrics")
        #expect(status == 200)
        let exported = Self.exported(page)
        for expression in expressions {
            let missing = Self.metricNames(in: expression).subtracting(exported)
            #expect(missing.isEmpty, "\(expression) reads \(missing), which /metrics does not export")
        }
        // The check can fail: one misspelled name is found missing.
        let misspelled = #"sum (rate(formattest_flow_outcome_total{code!="ok"}[5m]))"#
        #expect(Self.metricNames(in: misspelled).subtracting(exported) == ["formattest_flow_outcome_total"])
    }
}
