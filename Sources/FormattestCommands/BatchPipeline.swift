//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import FormAttestTokens
import Foundation

/// What every worker of a batch shares.
struct BatchContext: Sendable {
    let unsigned: TokenFormatter
    let signed: SignerCache
    let anchors: [X509Certificate]
    let maximumLineBytes: Int
    let verifiers = VerifierCache()
}

/// A batch's verifiers, one per app id and environments, shared by every worker: a verifier keeps
/// the intermediates it verified (valid over their window, for its anchors), so lines of the same
/// app pay for one P-384 verification each instead of two, as the service's requests do.
final class VerifierCache: @unchecked Sendable {
    struct Key: Hashable {
        var appID: String
        var environments: Set<AppAttestEnvironment>
    }

    /// Distinct app ids a batch keeps verifiers for; beyond, the cache starts over (a batch of
    /// many apps only costs verifiers made again).
    static let capacity = 64

    // Invariant: `verifiers` is only read or written while holding `lock`.
    private let lock = NSLock()
    private var verifiers: [Key: AppAttestVerifier] = [:]

    func verifier(appID: String, environments: Set<AppAttestEnvironment>, anchors: [X509Certificate]) throws(AppAttestError) -> AppAttestVerifier {
        let key = Key(appID: appID, environments: environments)
        if let found = self.lock.withLock({ self.verifiers[key] }) { return found }
        let made = try AppAttestVerifier(policy: AppAttestPolicy(appIDs: [appID], environments: environments, trustAnchors: anchors))
        self.lock.withLock {
            if self.verifiers.count >= Self.capacity { self.verifiers.removeAll() }
            self.verifiers[key] = made
        }
        return made
    }
}

/// The signing key, read when a line first asks for jws, and only then; once, for every worker.
actor SignerCache {
    private let load: @Sendable () throws -> TokenFormatter
    private var loaded: Result<TokenFormatter, Wrap.BatchItemError>?

    init(load: @escaping @Sendable () throws -> TokenFormatter) {
        self.load = load
    }

    func formatter() throws(Wrap.BatchItemError) -> TokenFormatter {
        if self.loaded == nil {
            do {
                self.loaded = .success(try self.load())
            } catch let error as UsageError {
                self.loaded = .failure(Wrap.BatchItemError(code: "no_signing_key", message: error.description))
            } catch {
                self.loaded = .failure(Wrap.BatchItemError(code: "no_signing_key", message: "\(error)"))
            }
        }
        switch self.loaded {
        case .success(let formatter): return formatter
        case .failure(let error): throw error
        case nil: throw Wrap.BatchItemError(code: "no_signing_key", message: "no signing key")
        }
    }
}

/// The batch's pipeline: one reader, workers in a task group with a bounded window, one writer
/// that emits the records in input order.
///
/// The calling task reads lines and starts one child task per line while fewer than `window`
/// lines are started but not yet emitted; each child parses, verifies and formats its line (the
/// CPU work, spread by the task group over every core); the calling task keeps finished records
/// until every earlier one is emitted, then emits them in order. At most `window` lines and their
/// records are in memory, whatever the input's size.
struct BatchPipeline {
    let context: BatchContext
    let window: Int

    /// Eight lines in flight per core: enough that a slow line does not leave a core idle while
    /// the writer waits for it, few enough to bound memory (a line is about 10 KB).
    static func defaultWindow(cores: Int = ProcessInfo.processInfo.activeProcessorCount) -> Int {
        max(2, cores) * 8
    }

    /// Runs the lines `next` returns (non-blank ones; `nil` at the end); `emit` gets each line's
    /// record in input order, on the calling task.
    func run(next: () throws -> JSONLinesReader.Line?, emit: (BatchRecord) throws -> Void) async throws {
        let context = self.context
        try await withThrowingTaskGroup(of: (Int, BatchRecord).self) { group in
            var started = 0
            var emitted = 0
            var finished: [Int: BatchRecord] = [:]
            var exhausted = false
            while true {
                while !exhausted && started - emitted < self.window {
                    guard let line = try next() else {
                        exhausted = true
                        break
                    }
                    let sequence = started
                    started += 1
                    switch line.content {
                    case .blank:
                        started -= 1
                    case .tooLong:
                        finished[sequence] = BatchRecord(
                            line: line.number, input: nil, name: nil,
                            outcome: .error(
                                code: "line_too_long",
                                message: "line \(line.number) is longer than \(context.maximumLineBytes) bytes (--max-line-bytes)")
                        )
                    case .bytes(let bytes):
                        let number = line.number
                        group.addTask { (sequence, await Self.wrap(bytes, number: number, context: context)) }
                    }
                }
                while let record = finished.removeValue(forKey: emitted) {
                    try emit(record)
                    emitted += 1
                }
                // Everything started is emitted: read on (the window has room), or stop at the end.
                if emitted == started {
                    if exhausted { break }
                    continue
                }
                // The record of line `emitted` is not in `finished`, so its task is in the group.
                guard let (sequence, record) = try await group.next() else { break }
                finished[sequence] = record
            }
        }
    }

    /// One line's work: parse, verify, format. Every failure is the line's record, never thrown.
    static func wrap(_ bytes: [UInt8], number: Int, context: BatchContext) async -> BatchRecord {
        let input = BatchRecord.identity(of: bytes)
        func failed(_ name: String?, _ code: String, _ message: String) -> BatchRecord {
            BatchRecord(line: number, input: input, name: name, outcome: .error(code: code, message: message))
        }
        let name: String
        let request: WrapRequest
        do {
            (name, request) = try WrapRequest.parse(jsonLine: bytes, defaultName: "item-\(number)")
        } catch let error as Wrap.BatchItemError {
            return failed(nil, error.code, error.message)
        } catch {
            return failed(nil, "invalid_request", "line \(number): \(error)")
        }
        do {
            let formatter = request.formats.contains(.jws) ? try await context.signed.formatter() : context.unsigned
            switch try await request.run(formatter: formatter, anchors: context.anchors, verifiers: context.verifiers) {
            case .success(let tokens):
                return BatchRecord(line: number, input: input, name: name, outcome: .tokens(tokens))
            case .failure(let error):
                return failed(name, error.code.identifier, error.reason)
            }
        } catch let error as Wrap.BatchItemError {
            return failed(name, error.code, error.message)
        } catch {
            return failed(name, "invalid_request", "line \(number): \(error)")
        }
    }
}

/// Batch throughput in process, for `formattest-dev bench`: the pipeline over lines in memory,
/// the records serialized (as `--out` would write them) and dropped.
package enum BatchWrapBenchmark {
    /// Wraps `lines` (batch request lines) with Apple's trust anchors; returns how many wrapped.
    package static func run(lines: [[UInt8]], window: Int? = nil) async throws -> Int {
        let context = BatchContext(
            unsigned: TokenFormatter(signer: nil, packed: nil),
            signed: SignerCache(load: { throw UsageError("the benchmark signs nothing") }),
            anchors: AppAttestPolicy.appleTrustAnchors,
            maximumLineBytes: Wrap.defaultMaximumLineBytes
        )
        var index = 0
        var wrapped = 0
        var bytes = 0
        try await BatchPipeline(context: context, window: window ?? BatchPipeline.defaultWindow()).run(
            next: {
                guard index < lines.count else { return nil }
                index += 1
                return JSONLinesReader.Line(number: index, content: .bytes(lines[index - 1]))
            },
            emit: { record in
                bytes += record.bytes.count
                if case .tokens = record.outcome { wrapped += 1 }
            }
        )
        _ = bytes
        return wrapped
    }
}
