//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation

/// Measures `formattest-dev bench`'s cases and keeps each case's operation, so that a ratio can
/// be measured again with its two sides interleaved (``interleavedRatio(_:_:)``).
final class BenchRunner {
    /// An operation run `n` times in a row.
    struct Operation {
        var run: (Int) async throws -> Void
        /// The fewest operations worth timing at once (a batch needs a window's worth of lines).
        var minimumBatch: Int
    }

    let duration: Double
    let slices: Int
    private(set) var operations: [String: Operation] = [:]

    init(duration: Double, slices: Int) {
        self.duration = duration
        self.slices = slices
    }

    /// One line on stderr, so that a run on a terminal shows where it is (stdout stays the JSON).
    static func progress(_ text: String) {
        FileHandle.standardError.write(Data("bench: \(text)\n".utf8))
    }

    func measure(_ name: String, bytesPerOperation: Int? = nil, _ operation: @escaping () throws -> Void) throws -> Bench.CaseResult {
        Self.progress(name)
        try operation()  // warm up, and fail early on a broken case
        self.operations[name] = Operation(run: { count in for _ in 0..<count { try operation() } }, minimumBatch: 1)
        var batch = 1
        var samples: [Double] = []
        var operations = 0
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: .seconds(self.duration))
        let start = clock.now
        while clock.now < deadline {
            let batchStart = clock.now
            for _ in 0..<batch { try operation() }
            let elapsed = Self.seconds(batchStart.duration(to: clock.now))
            operations += batch
            samples.append(elapsed / Double(batch))
            // Aim for batches of about a millisecond.
            if elapsed < 0.001 { batch *= 2 }
        }
        return Self.result(
            name, operations: operations, seconds: Self.seconds(start.duration(to: clock.now)), samples: samples, bytes: bytesPerOperation)
    }

    func measureAsync(_ name: String, _ operation: @escaping () async throws -> Void) async throws -> Bench.CaseResult {
        Self.progress(name)
        try await operation()
        self.operations[name] = Operation(run: { count in for _ in 0..<count { try await operation() } }, minimumBatch: 1)
        var samples: [Double] = []
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: .seconds(self.duration))
        let start = clock.now
        while clock.now < deadline {
            let operationStart = clock.now
            try await operation()
            samples.append(Self.seconds(operationStart.duration(to: clock.now)))
        }
        return Self.result(name, operations: samples.count, seconds: Self.seconds(start.duration(to: clock.now)), samples: samples, bytes: nil)
    }

    /// A case whose operation is `count` items at once (a batch over every core): each sample is
    /// one run of `batch` items, its time divided by `batch` (wall time per item).
    func measureBatch(_ name: String, batch: Int, _ run: @escaping (Int) async throws -> Void) async throws -> Bench.CaseResult {
        Self.progress(name)
        try await run(batch)
        self.operations[name] = Operation(run: run, minimumBatch: batch)
        var samples: [Double] = []
        var operations = 0
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: .seconds(self.duration))
        let start = clock.now
        while clock.now < deadline {
            let batchStart = clock.now
            try await run(batch)
            samples.append(Self.seconds(batchStart.duration(to: clock.now)) / Double(batch))
            operations += batch
        }
        return Self.result(name, operations: operations, seconds: Self.seconds(start.duration(to: clock.now)), samples: samples, bytes: nil)
    }

    /// A ratio measured with its sides interleaved: ``slices`` rounds, each timing every numerator
    /// case then every denominator case (the order reversed every other round) for a short slice
    /// each, so that the machine's drift (other processes, frequency) falls on both sides of the
    /// same round. The ratio is the median of the rounds' ratios; the spread is their range over
    /// that median. `nil` when a case did not run.
    func interleavedRatio(_ numerator: [String], _ denominator: [String]) async throws -> Interleaved? {
        let top = numerator.compactMap { self.operations[$0] }
        let bottom = denominator.compactMap { self.operations[$0] }
        guard top.count == numerator.count, bottom.count == denominator.count else { return nil }
        Self.progress("ratio \(numerator.joined(separator: "+")) / \(denominator.joined(separator: "+")): \(self.slices) interleaved slices")
        // Each side gets about the case's duration in all, split over the slices.
        let slice = max(0.005, self.duration / Double(self.slices) / Double(max(top.count, bottom.count)))
        var rounds: [(top: Double, bottom: Double)] = []
        for round in 0..<self.slices {
            var topMean = 0.0
            var bottomMean = 0.0
            if round % 2 == 0 {
                for operation in top { topMean += try await Self.mean(operation, seconds: slice) }
                for operation in bottom { bottomMean += try await Self.mean(operation, seconds: slice) }
            } else {
                for operation in bottom { bottomMean += try await Self.mean(operation, seconds: slice) }
                for operation in top { topMean += try await Self.mean(operation, seconds: slice) }
            }
            rounds.append((topMean, bottomMean))
        }
        let ratios = rounds.map { $0.top / $0.bottom }.sorted()
        let median = Self.median(ratios)
        return Interleaved(
            ratio: median,
            numeratorMicroseconds: Self.median(rounds.map(\.top).sorted()) * 1e6,
            denominatorMicroseconds: Self.median(rounds.map(\.bottom).sorted()) * 1e6,
            slices: ratios.count,
            sliceSeconds: slice,
            minimum: ratios.first ?? 0,
            maximum: ratios.last ?? 0
        )
    }

    struct Interleaved {
        var ratio: Double
        var numeratorMicroseconds: Double
        var denominatorMicroseconds: Double
        var slices: Int
        var sliceSeconds: Double
        var minimum: Double
        var maximum: Double
    }

    /// Seconds per operation over about `seconds` (batches doubled up to about a millisecond each).
    private static func mean(_ operation: Operation, seconds: Double) async throws -> Double {
        let clock = ContinuousClock()
        let start = clock.now
        var batch = operation.minimumBatch
        var count = 0
        var elapsed = 0.0
        while elapsed < seconds {
            let batchStart = clock.now
            try await operation.run(batch)
            count += batch
            let batchSeconds = Self.seconds(batchStart.duration(to: clock.now))
            if batchSeconds < 0.001 { batch *= 2 }
            elapsed = Self.seconds(start.duration(to: clock.now))
        }
        return elapsed / Double(count)
    }

    private static func median(_ sorted: [Double]) -> Double {
        guard !sorted.isEmpty else { return 0 }
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    static func result(_ name: String, operations: Int, seconds: Double, samples: [Double], bytes: Int?) -> Bench.CaseResult {
        let sorted = samples.sorted()
        func percentile(_ p: Double) -> Double {
            guard !sorted.isEmpty else { return 0 }
            return sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.down)))] * 1e6
        }
        let opsPerSecond = Double(operations) / seconds
        return Bench.CaseResult(
            name: name,
            operations: operations,
            seconds: seconds,
            // Whole operations per second, but two decimals for slow cases (one 1 MB document
            // on a loaded debug build takes seconds, and must not print as 0).
            opsPerSecond: opsPerSecond >= 100 ? opsPerSecond.rounded() : (opsPerSecond * 100).rounded() / 100,
            megabytesPerSecond: bytes.map { (Double($0) * opsPerSecond / 1e6 * 10).rounded() / 10 },
            p50Microseconds: (percentile(0.5) * 100).rounded() / 100,
            p90Microseconds: (percentile(0.9) * 100).rounded() / 100,
            p99Microseconds: (percentile(0.99) * 100).rounded() / 100,
            meanMicroseconds: operations > 0 ? (seconds / Double(operations) * 1e8).rounded() / 100 : 0
        )
    }
}
