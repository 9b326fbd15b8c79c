//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import NIOConcurrencyHelpers

/// The inspector's share of the service: at most `capacity` inspections run at once in an
/// instance, so that callers of the inspector can never take more than that many cores from the
/// flows, whatever their number. The slot is shared fairly: each caller (the token's user, the
/// backend, or the address: ``RateLimiter/inspectionCaller(request:context:)``) has at most one
/// inspection waiting or running; one more from the same caller is refused at once (429
/// `rate_limited`, `Retry-After: 1`). The others wait in one queue served in order of arrival, and
/// since a caller re-enters it at the back after each turn, callers take turns (round-robin): a
/// few callers looping on inspections cannot starve another. The queue is bounded
/// (`maximumWaiting`; one more is refused at once) and so is the wait (`maximumWait`: a waiter not
/// served by then is refused, 429 with `Retry-After: 1`). Each caller's own budget is counted in
/// the store (``RateLimiter/checkInspection(request:context:now:)``) once its turn has come, by
/// `body`: a refusal at the gate spends none of it.
final class InspectionGate: Sendable {
    /// The largest answer the inspector sends (its JSON with the text view); a larger one is
    /// refused with 422 `inspection_too_large`. Real attestation objects give well under this.
    static let maximumAnswerSize = 256 * 1024

    /// What became of a request for the slot.
    enum Outcome: Sendable {
        case run
        case sameCaller
        case queueFull
        case timedOut
    }

    private struct Waiter {
        let id: Int
        let caller: String
        let continuation: CheckedContinuation<Outcome, Never>
    }

    private struct State {
        var running = 0
        /// Callers with an inspection waiting or running.
        var callers: Set<String> = []
        var waiting: [Waiter] = []
        var nextID = 0
    }

    private enum Entry {
        case now(Outcome)
        case queued(Int)
    }

    private let state = NIOLockedValueBox(State())
    let capacity: Int
    let maximumWaiting: Int
    let maximumWait: Duration

    init(capacity: Int = 1, maximumWaiting: Int = 16, maximumWait: Duration = .seconds(2)) {
        self.capacity = capacity
        self.maximumWaiting = maximumWaiting
        self.maximumWait = maximumWait
    }

    /// Runs `body` when `caller`'s turn comes; throws 429 when the caller already has an
    /// inspection waiting or running, when the queue is full, or when the turn does not come
    /// within ``maximumWait``.
    func run<T>(caller: String, _ body: () async throws -> T) async throws -> T {
        switch await self.enter(caller) {
        case .run:
            break
        case .sameCaller:
            throw APIError.rateLimited(retryAfter: 1, reason: "an inspection of this caller is already waiting or running; retry in 1 s")
        case .queueFull, .timedOut:
            throw APIError.rateLimited(retryAfter: 1, reason: "the inspector is busy with other callers' requests; retry in 1 s")
        }
        defer { self.leave(caller) }
        return try await body()
    }

    /// Waits for the slot (or a refusal).
    func enter(_ caller: String) async -> Outcome {
        await withCheckedContinuation { (continuation: CheckedContinuation<Outcome, Never>) in
            let entry = self.state.withLockedValue { state -> Entry in
                guard !state.callers.contains(caller) else { return .now(.sameCaller) }
                if state.running < self.capacity && state.waiting.isEmpty {
                    state.running += 1
                    state.callers.insert(caller)
                    return .now(.run)
                }
                guard state.waiting.count < self.maximumWaiting else { return .now(.queueFull) }
                let id = state.nextID
                state.nextID += 1
                state.callers.insert(caller)
                state.waiting.append(Waiter(id: id, caller: caller, continuation: continuation))
                return .queued(id)
            }
            switch entry {
            case .now(let outcome):
                continuation.resume(returning: outcome)
            case .queued(let id):
                let wait = self.maximumWait
                Task {
                    try? await Task.sleep(for: wait)
                    self.expire(id)
                }
            }
        }
    }

    /// Gives the slot up: to the first waiter, if any.
    func leave(_ caller: String) {
        let next = self.state.withLockedValue { state -> Waiter? in
            state.running -= 1
            state.callers.remove(caller)
            guard !state.waiting.isEmpty else { return nil }
            state.running += 1
            return state.waiting.removeFirst()
        }
        next?.continuation.resume(returning: .run)
    }

    /// Refuses a waiter whose deadline passed (nothing when it was served already).
    private func expire(_ id: Int) {
        let expired = self.state.withLockedValue { state -> Waiter? in
            guard let index = state.waiting.firstIndex(where: { $0.id == id }) else { return nil }
            let waiter = state.waiting.remove(at: index)
            state.callers.remove(waiter.caller)
            return waiter
        }
        expired?.continuation.resume(returning: .timedOut)
    }
}
