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
/// `rate_limited`, `Retry-After: 1`). The others wait in one bounded queue (`maximumWaiting`)
/// ordered by when each caller was last served, longest ago first (never, or not among the last
/// `memory` turns, before all; arrival breaks ties): the caller served least recently has the next
/// turn, so callers take turns (round-robin) and a caller who has not been served recently goes
/// before every caller who has. Entry is fair too (r4 F4): when the queue is full, a newcomer
/// served less recently than the queue's most recently served waiter takes that waiter's place,
/// and the waiter is refused at once (429, `Retry-After: 1`); a newcomer served as recently or
/// more recently than every waiter is refused. So callers polling from many addresses, each
/// within its budget, cannot keep a caller who has not been served out of the queue, and once in,
/// it is next. The wait is bounded (`maximumWait`: a waiter not served by then is refused, 429
/// with `Retry-After: 1`). Each caller's own budget is counted in the store
/// (``RateLimiter/checkInspection(request:context:now:)``) once its turn has come, by `body`: a
/// refusal at the gate spends none of it.
final class InspectionGate: Sendable {
    /// The largest answer the inspector sends (its JSON with the text view); a larger one is
    /// refused with 422 `inspection_too_large`. Real attestation objects give well under this.
    static let maximumAnswerSize = 256 * 1024

    /// What became of a request for the slot.
    enum Outcome: Sendable {
        case run
        case sameCaller
        case queueFull
        case displaced
        case timedOut
    }

    private struct Waiter {
        let id: Int
        let caller: String
        /// The turn at which the caller was last served; -1 for never (or forgotten).
        let lastTurn: Int
        let continuation: CheckedContinuation<Outcome, Never>

        /// Whether this waiter's turn comes before `other`'s: served longer ago, or, as long
        /// ago, arrived first.
        func precedes(_ other: Waiter) -> Bool {
            (self.lastTurn, self.id) < (other.lastTurn, other.id)
        }
    }

    private struct State {
        var running = 0
        /// Callers with an inspection waiting or running.
        var callers: Set<String> = []
        var waiting: [Waiter] = []
        var nextID = 0
        /// Turns given so far, and the turn at which each caller served in the last `memory`
        /// turns was last served (older ones are forgotten: they count as never served).
        var turns = 0
        var lastTurn: [String: Int] = [:]

        /// Gives `caller` the next turn and remembers it; forgets callers served more than
        /// `memory` turns ago once twice that many are remembered (so at most `2 * memory`).
        mutating func serve(_ caller: String, memory: Int) {
            self.running += 1
            self.lastTurn[caller] = self.turns
            self.turns += 1
            if self.lastTurn.count > 2 * memory {
                let oldest = self.turns - memory
                self.lastTurn = self.lastTurn.filter { $0.value >= oldest }
            }
        }
    }

    private enum Entry {
        case now(Outcome)
        case queued(Int, displaced: Waiter?)
    }

    private let state = NIOLockedValueBox(State())
    let capacity: Int
    let maximumWaiting: Int
    let maximumWait: Duration
    /// How many turns a caller's last one is remembered for (callers served before count as
    /// never served).
    let memory: Int

    init(capacity: Int = 1, maximumWaiting: Int = 16, maximumWait: Duration = .seconds(2), memory: Int = 4096) {
        self.capacity = capacity
        self.maximumWaiting = maximumWaiting
        self.maximumWait = maximumWait
        self.memory = memory
    }

    /// Runs `body` when `caller`'s turn comes; throws 429 when the caller already has an
    /// inspection waiting or running, when the queue is full of callers served less recently,
    /// when its place is taken by a caller served less recently, or when the turn does not come
    /// within ``maximumWait``.
    func run<T>(caller: String, _ body: () async throws -> T) async throws -> T {
        switch await self.enter(caller) {
        case .run:
            break
        case .sameCaller:
            throw APIError.rateLimited(retryAfter: 1, reason: "an inspection of this caller is already waiting or running; retry in 1 s")
        case .displaced:
            throw APIError.rateLimited(
                retryAfter: 1,
                reason: "the inspector is busy with other callers' requests (this place went to a caller served less recently); retry in 1 s"
            )
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
                    state.callers.insert(caller)
                    state.serve(caller, memory: self.memory)
                    return .now(.run)
                }
                let waiter = Waiter(id: state.nextID, caller: caller, lastTurn: state.lastTurn[caller] ?? -1, continuation: continuation)
                var displaced: Waiter?
                if state.waiting.count >= self.maximumWaiting {
                    // The place of the waiter whose turn would come last, if the newcomer was
                    // served longer ago (ties keep the earlier arrival).
                    guard let last = state.waiting.indices.max(by: { state.waiting[$0].precedes(state.waiting[$1]) }),
                        waiter.lastTurn < state.waiting[last].lastTurn
                    else { return .now(.queueFull) }
                    displaced = state.waiting.remove(at: last)
                    if let displaced { state.callers.remove(displaced.caller) }
                }
                state.nextID += 1
                state.callers.insert(caller)
                state.waiting.append(waiter)
                return .queued(waiter.id, displaced: displaced)
            }
            switch entry {
            case .now(let outcome):
                continuation.resume(returning: outcome)
            case .queued(let id, let displaced):
                displaced?.continuation.resume(returning: .displaced)
                let wait = self.maximumWait
                Task {
                    try? await Task.sleep(for: wait)
                    self.expire(id)
                }
            }
        }
    }

    /// Gives the slot up: to the waiter served least recently, if any.
    func leave(_ caller: String) {
        let next = self.state.withLockedValue { state -> Waiter? in
            state.running -= 1
            state.callers.remove(caller)
            guard let first = state.waiting.indices.min(by: { state.waiting[$0].precedes(state.waiting[$1]) }) else { return nil }
            let waiter = state.waiting.remove(at: first)
            state.serve(waiter.caller, memory: self.memory)
            return waiter
        }
        next?.continuation.resume(returning: .run)
    }

    /// Refuses a waiter whose deadline passed (nothing when it was served or displaced already).
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
