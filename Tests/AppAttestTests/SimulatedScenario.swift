//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import Crypto
import Foundation

/// A simulated device, a verifier that trusts its CA, and a valid attestation to change one
/// thing of at a time.
struct SimulatedScenario {
    static let appID = "ABCDE12345.com.formattest.bank"
    /// 2025-06-15T12:00:00Z: any fixed time inside the simulated CA's validity.
    static let time = Date(timeIntervalSince1970: 1_749_988_800)

    let authority: SimulatedAttestationAuthority
    let device: SimulatedDevice
    let key: SimulatedKey
    let clientDataHash: [UInt8]

    init(environment: AppAttestEnvironment = .development) throws {
        self.authority = try SimulatedAttestationAuthority(seed: 42)
        self.device = SimulatedDevice(authority: self.authority, appID: Self.appID, environment: environment, seed: 7)
        self.key = self.device.key(0)
        self.clientDataHash = Array(SHA256.hash(data: Array(#"{"amount":"10.00","to":"alice"}"#.utf8)))
    }

    /// The policy that trusts the simulated CA, changed by `configure` (the signal options).
    func policy(
        environments: Set<AppAttestEnvironment> = [.development, .production],
        _ configure: (inout AppAttestPolicy) -> Void = { _ in }
    ) -> AppAttestPolicy {
        var policy = AppAttestPolicy(
            appIDs: [Self.appID],
            environments: environments,
            trustAnchors: [self.authority.rootCertificate],
            receiptTrustAnchors: [self.authority.receiptAuthority.rootCertificate]
        )
        configure(&policy)
        return policy
    }

    func verifier(
        environments: Set<AppAttestEnvironment> = [.development, .production],
        _ configure: (inout AppAttestPolicy) -> Void = { _ in }
    ) throws -> AppAttestVerifier {
        try AppAttestVerifier(policy: self.policy(environments: environments, configure))
    }

    func attestation(_ change: (inout SimulatedDevice.AttestationOptions) -> Void = { _ in }) throws -> [UInt8] {
        var options = SimulatedDevice.AttestationOptions()
        change(&options)
        return try self.device.attest(self.key, clientDataHash: self.clientDataHash, at: Self.time, options: options)
    }

    /// Verifies an attestation made with `change`, with everything else genuine.
    @discardableResult
    func verify(
        verifier: AppAttestVerifier? = nil,
        keyID: [UInt8]? = nil,
        clientDataHash: [UInt8]? = nil,
        at time: Date = Self.time,
        _ change: (inout SimulatedDevice.AttestationOptions) -> Void = { _ in }
    ) async throws -> VerifiedAttestation {
        try await (verifier ?? self.verifier()).verifyAttestation(
            try self.attestation(change),
            keyID: keyID ?? self.key.keyID,
            clientDataHash: clientDataHash ?? self.clientDataHash,
            at: time
        )
    }

    func assertion(counter: UInt32, _ change: (inout SimulatedDevice.AssertionOptions) -> Void = { _ in }) throws
        -> [UInt8]
    {
        var options = SimulatedDevice.AssertionOptions()
        change(&options)
        return try self.device.assert(self.key, clientDataHash: self.clientDataHash, counter: counter, options: options)
    }

    @discardableResult
    func verifyAssertion(
        counter: UInt32 = 1,
        previousCounter: UInt32 = 0,
        verifier: AppAttestVerifier? = nil,
        _ change: (inout SimulatedDevice.AssertionOptions) -> Void = { _ in }
    ) throws -> VerifiedAssertion {
        try (verifier ?? self.verifier()).verifyAssertion(
            try self.assertion(counter: counter, change),
            publicKey: self.key.publicKey,
            clientDataHash: self.clientDataHash,
            previousCounter: previousCounter
        )
    }
}
