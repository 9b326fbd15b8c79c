//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation

/// Intermediates already verified up to a trust anchor, so that each attestation costs one P-384
/// verification (the leaf by the intermediate) instead of two. Apple's intermediate is the same
/// in every attestation until 2030.
///
/// - An entry is keyed by the intermediate's exact DER bytes and the set of trust anchors it was
///   verified against, and holds the window in which both the intermediate and that anchor are
///   valid; outside it the entry does not apply.
/// - Only successes are cached, and only intermediates: a leaf is always verified.
/// - At most ``capacity`` entries; when full, the cache starts over (there is one intermediate in
///   practice, so this only bounds memory against hostile variety).
final class VerifiedChainCache: @unchecked Sendable {
    struct Key: Hashable {
        let intermediate: [UInt8]
        let anchors: [UInt8]
    }

    static let capacity = 16

    // Invariant: `entries` is only read or written while holding `lock`.
    private let lock = NSLock()
    private var entries: [Key: ClosedRange<Date>] = [:]

    /// Whether `key` was verified and `time` lies in its validity window.
    func contains(_ key: Key, at time: Date) -> Bool {
        self.window(of: key, at: time) != nil
    }

    /// The validity window of `key` when it was verified and `time` lies in it.
    func window(of key: Key, at time: Date) -> ClosedRange<Date>? {
        self.lock.withLock { self.entries[key].flatMap { $0.contains(time) ? $0 : nil } }
    }

    /// Records a verified intermediate, valid over `window`.
    func insert(_ key: Key, window: ClosedRange<Date>) {
        self.lock.withLock {
            if self.entries.count >= Self.capacity, self.entries[key] == nil {
                self.entries.removeAll()
            }
            self.entries[key] = window
        }
    }

    /// How many intermediates are cached (for tests and metrics).
    var count: Int { self.lock.withLock { self.entries.count } }
}
