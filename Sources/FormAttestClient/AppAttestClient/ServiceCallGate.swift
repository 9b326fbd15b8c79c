//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation

/// Turns a completion-handler call into `async` with a timeout.
///
/// The continuation is resumed exactly once, by whichever comes first: the service's callback,
/// the timeout or the caller's cancellation. A late callback is ignored, so a service that
/// answers after the timeout (or never) cannot crash or hang the caller.
enum ServiceCall {
    static func run<Value: Sendable>(
        timeout: Duration,
        _ start: @escaping @Sendable (@escaping @Sendable (Result<Value, any Error>) -> Void) -> Void
    ) async throws -> Value {
        let gate = ResumeOnce<Value>()
        return try await withThrowingTaskGroup(of: Value?.self) { group in
            group.addTask {
                try await withCheckedThrowingContinuation { continuation in
                    gate.install(continuation)
                    start { result in gate.resume(with: result) }
                }
            }
            group.addTask {
                do {
                    try await Task.sleep(for: timeout)
                    gate.resume(with: .failure(AppAttestClientError.timeout))
                } catch {
                    // Cancelled: either the call finished (a no-op then) or the caller gave up.
                    gate.resume(with: .failure(CancellationError()))
                }
                return nil
            }
            defer { group.cancelAll() }
            while let next = try await group.next() {
                if let value = next { return value }
            }
            throw AppAttestClientError.unknownError  // Unreachable: the first child always returns or throws.
        }
    }
}

/// Resumes a continuation once; a result that arrives before the continuation is kept for it.
private final class ResumeOnce<Value: Sendable>: @unchecked Sendable {
    // Invariant: every access to the two stored properties holds `lock`.
    private let lock = NSLock()
    private var continuation: CheckedContinuation<Value, any Error>?
    private var outcome: Result<Value, any Error>?
    private var finished = false

    func install(_ continuation: CheckedContinuation<Value, any Error>) {
        let pending: Result<Value, any Error>? = self.lock.withLock {
            if let outcome = self.outcome {
                self.outcome = nil
                return outcome
            }
            self.continuation = continuation
            return nil
        }
        if let pending { continuation.resume(with: pending) }
    }

    func resume(with result: Result<Value, any Error>) {
        let continuation: CheckedContinuation<Value, any Error>? = self.lock.withLock {
            guard !self.finished else { return nil }
            self.finished = true
            guard let continuation = self.continuation else {
                self.outcome = result
                return nil
            }
            self.continuation = nil
            return continuation
        }
        continuation?.resume(with: result)
    }
}
