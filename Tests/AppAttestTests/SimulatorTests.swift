//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import CBOR
import Crypto
import FormAttestTestSupport
import Foundation
import SwiftASN1
import Testing
import X509

/// The simulator has Apple's shape and is deterministic under its seed.
struct SimulatorTests {
    @Test("the same seed gives the same CA and keys; another seed, others")
    func deterministic() throws {
        let first = try SimulatedAttestationAuthority(seed: 9)
        let again = try SimulatedAttestationAuthority(seed: 9)
        let other = try SimulatedAttestationAuthority(seed: 10)
        #expect(first.rootCertificate.publicKey == again.rootCertificate.publicKey)
        #expect(first.rootCertificate.serialNumber == again.rootCertificate.serialNumber)
        #expect(first.rootCertificate.publicKey != other.rootCertificate.publicKey)
        let device = SimulatedDevice(authority: first, appID: "A.b", seed: 3)
        #expect(device.key(0).keyID == SimulatedDevice(authority: again, appID: "A.b", seed: 3).key(0).keyID)
        #expect(device.key(0).keyID != device.key(1).keyID)
    }

    @Test("simulated attestations have the wire shape of real ones")
    func wireShape() throws {
        let scenario = try SimulatedScenario(environment: .production)
        let simulatedBytes = try scenario.attestation()
        let realBytes = try #require(try RealSample.named("uebelack_production").attestation)
        let simulated = try AttestationObject(cborEncoded: simulatedBytes)
        let real = try AttestationObject(cborEncoded: realBytes)
        // Same top-level key order in the bytes, same authData layout and length, same flags.
        #expect(
            try CBORDecoder.decode(simulatedBytes).mapEntries?.map(\.key.textString)
                == CBORDecoder.decode(realBytes).mapEntries?.map(\.key.textString)
        )
        #expect(simulated.authenticatorData.rawValue.count == 164)
        #expect(simulated.authenticatorData.flags == real.authenticatorData.flags)
        #expect(simulated.authenticatorData.attestedCredentialData?.aaguid == real.authenticatorData.attestedCredentialData?.aaguid)

        let (leaf, intermediate) = try simulated.statement.parsedCertificates()
        let (realLeaf, realIntermediate) = try real.statement.parsedCertificates()
        #expect(leaf.signatureAlgorithm == realLeaf.signatureAlgorithm)
        #expect(intermediate.signatureAlgorithm == realIntermediate.signatureAlgorithm)
        #expect(Array(leaf.extensions[oid: .AppAttest.nonce].map(\.value) ?? []).prefix(6) == [0x30, 0x24, 0xA1, 0x22, 0x04, 0x20])
        #expect(try leaf.extensions.basicConstraints == realLeaf.extensions.basicConstraints)
        #expect(try leaf.extensions.keyUsage == realLeaf.extensions.keyUsage)
        #expect(leaf.subject.description.contains(hexString(scenario.key.keyID)))
        #expect(P384.Signing.PublicKey(scenario.authority.rootCertificate.publicKey) != nil)
        #expect(P384.Signing.PublicKey(intermediate.publicKey) != nil)
    }

    @Test("the simulated root's PEM round-trips")
    func rootPEM() throws {
        let authority = try SimulatedAttestationAuthority()
        #expect(try Certificate(pemEncoded: authority.rootPEM) == authority.rootCertificate)
    }
}
