//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestFlows
import Logging
import ServiceLifecycle

/// Closes the store when the service shuts down (``OperationalAttestationStore/shutdown()``).
///
/// Registered first among the application's services: a service group shuts its services down
/// in reverse order, each after the one before it finished, so the store closes last, after the
/// HTTP servers drained their requests and the purge stopped.
struct StoreShutdownService: Service {
    let store: any OperationalAttestationStore
    let logger: Logger

    func run() async throws {
        // Returns when graceful shutdown begins; throws when the group is cancelled instead
        // (another service failed): the store is closed either way.
        try? await gracefulShutdown()
        await self.store.shutdown()
        self.logger.info("store closed")
    }
}

/// Runs the store's own housekeeping (``StoreHousekeeping``: SQLite's write-ahead log
/// checkpoints) until graceful shutdown begins. Registered after ``StoreShutdownService``, so that
/// it stops before the store closes.
struct StoreHousekeepingService: Service {
    let store: any StoreHousekeeping

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await self.store.runHousekeeping()
        }
    }
}
