//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation
import SwiftASN1
package import X509

/// Certificates that arrive again and again byte for byte, parsed once: Apple's App Attest
/// intermediate (the same in every attestation until 2030) and the certificates of the receipt's
/// signature (the same in every receipt for about a year). A profile of `attestation.verify` found
/// their parsing among its largest costs beyond the two signature checks.
///
/// - Parsing is deterministic: an entry is what its exact DER parses to, nothing about trust.
///   Verification is never skipped here (see ``VerifiedChainCache`` for that).
/// - Failures are not cached; at most ``capacity`` entries, and when full the cache starts over
///   (hostile variety only costs parses). Never used for the credential certificate, which is new
///   with every key.
package final class RepeatedCertificates: @unchecked Sendable {
    package static let shared = RepeatedCertificates()
    package static let capacity = 16

    package init() {}

    // Invariant: `entries` is only read or written while holding `lock`.
    private let lock = NSLock()
    private var entries: [ExactBytes: Certificate] = [:]

    /// The certificate `der` encodes.
    package func parse(_ der: [UInt8]) throws -> Certificate {
        let key = ExactBytes(der)
        if let certificate = self.lock.withLock({ self.entries[key] }) {
            return certificate
        }
        let certificate = try Certificate(derEncoded: der)
        self.lock.withLock {
            if self.entries.count >= Self.capacity, self.entries[key] == nil {
                self.entries.removeAll()
            }
            self.entries[key] = certificate
        }
        return certificate
    }

    /// How many certificates are cached (for tests).
    package var count: Int { self.lock.withLock { self.entries.count } }
}
