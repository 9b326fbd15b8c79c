//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import CBOR
import Crypto
import FormAttestTestSupport
import Foundation
import Testing

/// Hostile-input tests on real data: truncations and single-bit corruptions are rejected with an
/// ``AppAttestError`` and never trap.
struct RobustnessTests {
    @Test("drip-feed: every proper prefix of a real attestation is rejected", arguments: try RealSample.withAttestation())
    func attestationPrefixes(sample: RealSample) throws {
        let attestation = try #require(sample.attestation)
        for length in 0..<attestation.count {
            #expect(throws: AppAttestError.self, "prefix of \(length) bytes") {
                try AttestationObject(cborEncoded: attestation.prefix(length))
            }
        }
        #expect(throws: Never.self) { try AttestationObject(cborEncoded: attestation) }
    }

    @Test("drip-feed: every proper prefix of a real assertion is rejected", arguments: try RealSample.all())
    func assertionPrefixes(sample: RealSample) throws {
        for recorded in sample.assertions {
            for length in 0..<recorded.assertion.count {
                #expect(throws: AppAttestError.self, "prefix of \(length) bytes") {
                    try AssertionObject(cborEncoded: recorded.assertion.prefix(length))
                }
            }
        }
    }

    @Test("drip-feed: every proper prefix of real authenticator data is rejected")
    func authenticatorDataPrefixes() throws {
        let sample = try RealSample.named("uebelack_production")
        let authData = try AttestationObject(cborEncoded: try #require(sample.attestation)).authenticatorData.rawValue
        for length in 0..<authData.count {
            #expect(throws: AppAttestError.self) { try AuthenticatorData(bytes: authData.prefix(length), kind: .attestation) }
        }
        // An assertion-shaped parse accepts exactly 37 bytes, or 37 followed by one CBOR map.
        #expect(try AuthenticatorData(bytes: authData.prefix(37), kind: .assertion).signCount == 0)
        #expect(throws: AppAttestError.self) { try AuthenticatorData(bytes: authData.prefix(38), kind: .assertion) }
    }

    /// Flips bit `offset % 8` of each byte at `offsets`, and expects verification to fail.
    ///
    /// Bytes of the receipt are excluded from the verdict check (not from parsing): Apple's steps
    /// do not cover the receipt, which is validated separately.
    @Test(
        "bit-flip: a flipped bit anywhere but in the receipt makes a real attestation fail",
        arguments: ["uebelack_production", "apple_docs_sample_2024_via_oliverbinns", "veehaitch_ios_14_2"]
    )
    func attestationBitFlips(name: String) async throws {
        let sample = try RealSample.named(name)
        let attestation = try #require(sample.attestation)
        let verifier = try AppAttestVerifier(policy: AppAttestPolicy(appIDs: [sample.appID], environments: [.development, .production]))
        let receipt = try #require(
            try CBORDecoder.decode(attestation)[textKey: "attStmt"]?[textKey: "receipt"]
        )
        let receiptContent = (receipt.range.lowerBound + receipt.headerLength)..<receipt.range.upperBound
        var accepted: [Int] = []
        var verified = 0
        for offset in attestation.indices where !receiptContent.contains(offset) {
            var corrupted = attestation
            corrupted[offset] ^= 1 << UInt8(offset % 8)
            guard (try? AttestationObject(cborEncoded: corrupted)) != nil else { continue }
            verified += 1
            do {
                _ = try await verifier.verifyAttestation(
                    corrupted,
                    keyID: try #require(sample.keyID),
                    clientDataHash: try #require(sample.clientDataHash),
                    at: try #require(sample.validAt)
                )
                accepted.append(offset)
            } catch is AppAttestError {
                // Rejected, as it must be.
            }
        }
        #expect(accepted.isEmpty, "flips accepted at offsets \(accepted)")
        #expect(verified > 1000, "most flips inside certificates parse and reach the cryptographic checks")
    }

    @Test("bit-flip: every single-bit change of a real assertion fails verification")
    func assertionBitFlips() async throws {
        let sample = try RealSample.named("veehaitch_ios_14_4")
        let verifier = try AppAttestVerifier(policy: AppAttestPolicy(appIDs: [sample.appID], environments: [.development]))
        let key = try AttestationObject(cborEncoded: try #require(sample.attestation)).statement.unverifiedCredentialPublicKey()
        let recorded = try #require(sample.assertions.first)
        #expect(throws: Never.self) {
            try verifier.verifyAssertion(recorded.assertion, publicKey: key, clientDataHash: recorded.clientDataHash, previousCounter: 0)
        }
        var accepted: [(Int, Int)] = []
        for offset in recorded.assertion.indices {
            for bit in 0..<8 {
                var corrupted = recorded.assertion
                corrupted[offset] ^= 1 << UInt8(bit)
                if (try? verifier.verifyAssertion(corrupted, publicKey: key, clientDataHash: recorded.clientDataHash, previousCounter: 0)) != nil {
                    accepted.append((offset, bit))
                }
            }
        }
        #expect(accepted.isEmpty, "flips accepted: \(accepted)")
    }

    @Test("seeded random inputs never trap the decoder")
    func randomInputs() throws {
        var generator = SplitMix64(seed: 0x5EED)
        var rejected = 0
        for _ in 0..<20_000 {
            let length = Int(generator.next() % 64)
            let bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            do {
                _ = try CBORDecoder.decode(bytes)
            } catch {
                // Typed throws: every rejection is a CBORError.
                rejected += 1
            }
        }
        #expect(rejected > 10_000, "random bytes are rarely one well-formed item")
    }
}
