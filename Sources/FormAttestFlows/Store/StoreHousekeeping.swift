//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// A store with housekeeping of its own that runs for as long as the store serves (the SQLite
/// store's write-ahead log checkpoints). The store starts no task for it: the application runs
/// ``runHousekeeping()`` among its services, which start and stop it (swift-service-lifecycle's
/// guide for libraries), as FormAttestServer's `FormAttestService.housekeeping` does.
public protocol StoreHousekeeping: Sendable {
    /// Runs the housekeeping until the calling task is cancelled. A store that no one runs it for
    /// still works (a command that opens it for a moment has no need of it); what it would do
    /// waits, within the store's own bounds.
    func runHousekeeping() async
}
