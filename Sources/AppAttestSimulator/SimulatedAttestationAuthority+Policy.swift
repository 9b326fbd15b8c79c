//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest

extension SimulatedAttestationAuthority {
    /// A policy that trusts this authority alone: its root for attestations and its receipt
    /// authority's root for receipts, in the development environment (where the simulator's
    /// devices attest by default).
    ///
    /// - Warning: For tests, the demo and benchmarks only: whoever knows the seed can mint
    ///   attestations a verifier with this policy accepts.
    public func policy(appIDs: [String], environments: Set<AppAttestEnvironment> = [.development]) -> AppAttestPolicy {
        AppAttestPolicy(
            appIDs: appIDs,
            environments: environments,
            trustAnchors: [self.rootCertificate],
            receiptTrustAnchors: [self.receiptAuthority.rootCertificate]
        )
    }
}
