//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestFlows
import Foundation
import Logging
import ServiceLifecycle

/// Deletes expired challenges and form hashes periodically. Housekeeping only: every read
/// already ignores expired records, so a stopped or failing purge never affects correctness.
struct PurgeService: Service {
    let store: any OperationalAttestationStore
    let interval: Duration
    let now: @Sendable () -> Date
    let logger: Logger

    func run() async throws {
        // Graceful shutdown cancels the loop at once (a sleeping purge has nothing to finish).
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: self.interval)
                do {
                    let removed = try await self.store.purgeExpired(now: self.now())
                    self.logger.debug("purged expired records", metadata: ["count": "\(removed)"])
                } catch let error as StoreError {
                    self.logger.warning("purge failed; will retry", metadata: ["code": "\(error.code)"])
                }
            }
        }
    }
}
