//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import Crypto
import Foundation

extension FormFlows {
    /// With ``FlowConfiguration/requireVerifiableKeyAttestation``: refuses a key whose registration
    /// cannot support a verifiable evidence record, before anything is committed.
    ///
    /// The check is the one `formattest evidence verify` makes of a record's key: the key's
    /// registering attestation, as kept, verifies for the key's own app id and environment, at the
    /// time it was registered, against this deployment's trust anchors, with a valid receipt
    /// required. A key without a kept attestation (registered before FormAttest kept it), or
    /// whose receipt does not verify (registered while receipts were not required), is refused
    /// with `key_attestation_unverifiable` (428): the app attests a new key.
    func checkKeyAttestation(_ key: StoredKey) async throws(FlowError) {
        guard self.configuration.requireVerifiableKeyAttestation else { return }
        guard let attestation = key.attestation else {
            throw FlowError(
                code: .keyAttestationUnverifiable, category: .requiresReattestation,
                reason: "this key's attestation was not kept, so no evidence record of its forms could be verified; attest a new key"
            )
        }
        let digest = Self.attestationDigest(key, attestation)
        if let known = await self.keyAttestationChecks.result(digest) {
            if known { return }
            throw Self.unverifiable("its receipt or certificate chain does not verify (checked before)")
        }
        let verifier: AppAttestVerifier
        do throws(AppAttestError) {
            verifier = try AppAttestVerifier(
                policy: AppAttestPolicy(
                    appIDs: [key.appID], environments: [key.environment], trustAnchors: self.verifier.policy.trustAnchors,
                    receiptTrustAnchors: self.verifier.policy.receiptTrustAnchors, requireValidReceipt: true
                )
            )
        } catch {
            throw Self.unverifiable("the key's app id makes no policy: \(error.reason)")
        }
        do throws(AppAttestError) {
            _ = try await verifier.verifyAttestation(
                attestation.object, keyID: key.keyID, clientDataHash: attestation.clientDataHash, at: key.createdAt)
        } catch {
            await self.keyAttestationChecks.remember(digest, false)
            throw Self.unverifiable("\(error.code.identifier): \(error.reason)")
        }
        await self.keyAttestationChecks.remember(digest, true)
    }

    private static func unverifiable(_ detail: String) -> FlowError {
        FlowError(
            code: .keyAttestationUnverifiable, category: .requiresReattestation,
            reason: "this key's registration cannot support a verifiable evidence record (\(detail)); attest a new key"
        )
    }

    /// What the check's result depends on: the key, its attestation, and when it was registered.
    private static func attestationDigest(_ key: StoredKey, _ attestation: KeyAttestation) -> [UInt8] {
        var hasher = SHA256()
        hasher.update(data: key.keyID)
        hasher.update(data: Array(key.appID.utf8) + [0])
        hasher.update(data: Array(key.environment.rawValue.utf8) + [0])
        withUnsafeBytes(of: key.createdAt.timeIntervalSince1970.bitPattern.bigEndian) { hasher.update(bufferPointer: $0) }
        hasher.update(data: attestation.clientDataHash)
        hasher.update(data: attestation.object)
        return Array(hasher.finalize())
    }
}

/// The results of key-attestation checks this process made (a key's attestation never changes,
/// so neither does its result): at most ``capacity`` entries, all forgotten when full.
actor KeyAttestationChecks {
    static let capacity = 100_000
    private var results: [[UInt8]: Bool] = [:]

    func result(_ digest: [UInt8]) -> Bool? { self.results[digest] }

    func remember(_ digest: [UInt8], _ verifies: Bool) {
        if self.results.count >= Self.capacity { self.results.removeAll(keepingCapacity: true) }
        self.results[digest] = verifies
    }
}
