//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Metrics

/// The series of rare events, made at start with their known labels, so that `/metrics` shows
/// them at zero from the first scrape: `increase()` and `rate()` (the alerting rules, the Grafana
/// dashboard) then see the first failure as a change, rather than a series that appears.
enum MetricSeries {
    static func declare() {
        for step in ["sign", "archive", "key_attestation_missing"] {
            Counter(label: "formattest_evidence_failures_total", dimensions: [("step", step)]).increment(by: 0)
        }
        let reasons = [
            "per_address", "header_timeout", "shed_idle", "shed_body", "shed_busy", "write_timeout", "slow_body", "pipelined", "max_requests",
            "max_age",
        ]
        for reason in reasons {
            Counter(label: "formattest_connections_refused_total", dimensions: [("reason", reason)]).increment(by: 0)
        }
        Counter(label: "formattest_connections_saturated_total").increment(by: 0)
        Counter(label: "formattest_purged_records_total").increment(by: 0)
        _ = Timer(label: "formattest_purge_step_seconds")
    }
}
