//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Foundation

/// Limits attestations: Apple rate-limits `attestKey`, and an app stuck in a re-attestation loop
/// (a server that keeps answering `key_mismatch`) must stop asking. A pure value; the client
/// actor owns it.
public struct ReattestationCircuitBreaker: Sendable, Hashable {
    /// What the breaker lets through.
    public enum State: Sendable, Hashable {
        /// Attestations are allowed; `recentAttempts` were made inside the window.
        case closed(recentAttempts: Int)
        /// Attestations are refused until the date.
        case open(until: Date)
    }

    /// Attempts allowed per window. Default 3.
    public let maximumAttempts: Int
    /// The window. Default 5 minutes.
    public let window: TimeInterval
    private var attempts: [Date] = []

    public init(maximumAttempts: Int = 3, window: TimeInterval = 300) {
        self.maximumAttempts = maximumAttempts
        self.window = window
    }

    /// The state at `now`.
    public func state(at now: Date) -> State {
        let recent = self.attempts.filter { now.timeIntervalSince($0) < self.window }
        if recent.count >= self.maximumAttempts, let oldest = recent.min() {
            return .open(until: oldest.addingTimeInterval(self.window))
        }
        return .closed(recentAttempts: recent.count)
    }

    /// Records an attempt at `now`, or refuses it while open.
    mutating func recordAttempt(at now: Date) throws(AppAttestClientError) {
        if case .open(let until) = self.state(at: now) {
            throw .reattestationLimited(until: until)
        }
        self.attempts = self.attempts.filter { now.timeIntervalSince($0) < self.window } + [now]
    }

    /// Closes the breaker and forgets every attempt.
    public mutating func reset() {
        self.attempts = []
    }
}
