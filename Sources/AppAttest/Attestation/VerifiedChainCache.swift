//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation
import X509

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
        let intermediate: ExactBytes
        let anchors: ExactBytes

        init(intermediate: [UInt8], anchors: [UInt8]) {
            self.intermediate = ExactBytes(intermediate)
            self.anchors = ExactBytes(anchors)
        }
    }

    /// A verified certificate: the window it holds in, and the certificate as the one root of a
    /// store, ready to anchor the next leaf's path (built once: a store hashes names as it is made).
    struct Entry: Sendable {
        let window: ClosedRange<Date>
        let asAnchor: CertificateStore
    }

    static let capacity = 16

    // Invariant: `entries` is only read or written while holding `lock`.
    private let lock = NSLock()
    private var entries: [Key: Entry] = [:]

    /// Whether `key` was verified and `time` lies in its validity window.
    func contains(_ key: Key, at time: Date) -> Bool {
        self.entry(of: key, at: time) != nil
    }

    /// The entry of `key` when it was verified and `time` lies in its window.
    func entry(of key: Key, at time: Date) -> Entry? {
        self.lock.withLock { self.entries[key].flatMap { $0.window.contains(time) ? $0 : nil } }
    }

    /// Records that `certificate`, whose DER `key` names, was verified, valid over `window`.
    func insert(_ key: Key, certificate: Certificate, window: ClosedRange<Date>) {
        let entry = Entry(window: window, asAnchor: CertificateStore([certificate]))
        self.lock.withLock {
            if self.entries.count >= Self.capacity, self.entries[key] == nil {
                self.entries.removeAll()
            }
            self.entries[key] = entry
        }
    }

    /// How many intermediates are cached (for tests and metrics).
    var count: Int { self.lock.withLock { self.entries.count } }
}
