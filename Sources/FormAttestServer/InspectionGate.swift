//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import NIOConcurrencyHelpers

/// The inspector's share of the service: at most `capacity` inspections run at once in an
/// instance; one more is refused at once (429 `rate_limited`, `Retry-After: 1`) rather than
/// queued, so that callers of the inspector can never take more than that many cores from the
/// flows, whatever their number. Each caller's own budget is counted in the store
/// (``RateLimiter/checkInspection(request:context:now:)``).
final class InspectionGate: Sendable {
    /// The largest answer the inspector sends (its JSON with the text view); a larger one is
    /// refused with 422 `inspection_too_large`. Real attestation objects give well under this.
    static let maximumAnswerSize = 256 * 1024

    private let running = NIOLockedValueBox(0)
    let capacity: Int

    init(capacity: Int = 1) {
        self.capacity = capacity
    }

    /// Runs `body` when a place is free; throws 429 when none is.
    func run<T>(_ body: () throws -> T) throws -> T {
        let entered = self.running.withLockedValue { count in
            guard count < self.capacity else { return false }
            count += 1
            return true
        }
        guard entered else {
            throw APIError.rateLimited(retryAfter: 1, reason: "the inspector is busy with another request; retry in 1 s")
        }
        defer { self.running.withLockedValue { $0 -= 1 } }
        return try body()
    }
}
