//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// What tracing costs an assert when it is off, for `formattest-dev bench --only tracing`
/// (docs/performance.md, "Tracing").
///
/// Without `--otlp-endpoint` no tracer is bootstrapped, neither the request's middleware nor the
/// traced store is installed, and the steps (`TraceStep.run(_:kind:_:)`) make no span: what
/// stays on an assert's path is each step's check that tracing is off. ``withSpans(_:)`` runs the
/// assert's steps through `TraceStep.run`, in its order and with its names, around `body`;
/// ``withoutSpans(_:)`` runs `body` as often without them. The difference is the whole cost of
/// tracing off.
public enum TraceStepBenchmark {
    /// The spans an assert opens without tracing: `caller authentication` (with caller
    /// authentication), `body read`, `flow assert`, `token signing`, `evidence write` (with an
    /// evidence log). Every one is counted: an upper bound.
    public static let assertSteps = 5

    /// One assert's steps through `TraceStep.run` (each a span when tracing is on) around `body`; the sum of `body`'s results
    /// (so that nothing is optimized away).
    public static func withSpans(_ body: () async -> Int) async -> Int {
        var total = 0
        total &+= await TraceStep.run("caller authentication") { await body() }
        total &+= await TraceStep.run("body read") { await body() }
        let endpoint = "assert"
        total &+= await TraceStep.run("flow \(endpoint)") { await body() }
        total &+= await TraceStep.run("token signing") { await body() }
        total &+= await TraceStep.run("evidence write") { await body() }
        return total
    }

    /// The same calls of `body`, without spans.
    public static func withoutSpans(_ body: () async -> Int) async -> Int {
        var total = 0
        for _ in 0..<Self.assertSteps { total &+= await body() }
        return total
    }
}
