//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import FormAttestTestSupport
import Foundation
import SwiftASN1
import Testing
import X509

/// The verified-intermediate cache: successes only, intermediates only, leaves always checked.
struct ChainCacheTests {
    @Test("a verified intermediate is cached once and reused")
    func cachesSuccess() async throws {
        let sample = try RealSample.named("uebelack_production")
        let verifier = try AppAttestVerifier(policy: AppAttestPolicy(appIDs: [sample.appID], environments: [.production]))
        #expect(verifier.cachedIntermediateCount == 0)
        for _ in 0..<3 {
            _ = try await verifier.verifyAttestation(
                try #require(sample.attestation), keyID: try #require(sample.keyID),
                clientDataHash: try #require(sample.clientDataHash), at: try #require(sample.validAt)
            )
        }
        // Three: Apple's App Attestation CA 1 (x5c), and for the receipt Application Integration
        // CA 5 - G1 and the Fraud Receipt Signing certificate.
        #expect(verifier.cachedIntermediateCount == 3)
        // They serve every real sample.
        for other in try RealSample.withAttestation() {
            let otherVerifier = try AppAttestVerifier(policy: AppAttestPolicy(appIDs: [other.appID], environments: [.development, .production]))
            _ = try await otherVerifier.verifyAttestation(
                try #require(other.attestation), keyID: try #require(other.keyID),
                clientDataHash: try #require(other.clientDataHash), at: try #require(other.validAt)
            )
            #expect(otherVerifier.cachedIntermediateCount == 3)
        }
    }

    @Test("a failed chain is not cached")
    func failureNotCached() async throws {
        let sample = try RealSample.named("uebelack_production")
        let verifier = try AppAttestVerifier(
            policy: AppAttestPolicy(
                appIDs: [sample.appID], environments: [.production], trustAnchors: [try SimulatedAttestationAuthority().rootCertificate])
        )
        await #expect(throws: AppAttestError(code: .certificateChainInvalid, reason: "")) {
            _ = try await verifier.verifyAttestation(
                try #require(sample.attestation), keyID: try #require(sample.keyID),
                clientDataHash: try #require(sample.clientDataHash), at: try #require(sample.validAt)
            )
        }
        #expect(verifier.cachedIntermediateCount == 0)
    }

    @Test("with the intermediate cached, a leaf signed by another key under its name is still rejected")
    func forgedLeafAfterCaching() async throws {
        let scenario = try SimulatedScenario()
        let verifier = try scenario.verifier()
        try await scenario.verify(verifier: verifier)
        #expect(verifier.cachedIntermediateCount == 3)  // the attestation's intermediate, the receipt's intermediate and signer
        let impostor = try SimulatedAttestationAuthority(seed: 4242)
        await #expect(throws: AppAttestError(code: .certificateChainInvalid, reason: "")) {
            try await scenario.verify(verifier: verifier) { $0.forgedLeafIssuer = impostor }
        }
        // And a genuine one still passes through the cached path.
        try await scenario.verify(verifier: verifier)
        #expect(verifier.cachedIntermediateCount == 3)
    }

    @Test("the cache is keyed by the trust anchors too")
    func keyedByAnchors() async throws {
        let scenario = try SimulatedScenario()
        let trusting = try scenario.verifier()
        try await scenario.verify(verifier: trusting)
        let appleOnly = try AppAttestVerifier(policy: AppAttestPolicy(appIDs: [SimulatedScenario.appID], environments: [.development]))
        await #expect(throws: AppAttestError(code: .certificateChainInvalid, reason: "")) {
            try await scenario.verify(verifier: appleOnly)
        }
    }
}

/// Parsed repeated certificates (the App Attest intermediate, the receipt's signer path): a parse
/// cache keyed by exact DER, never a verdict.
struct RepeatedCertificatesTests {
    /// The DER of Apple's App Attest intermediate, from a real attestation.
    static func appleIntermediate() throws -> [UInt8] {
        let sample = try RealSample.named("uebelack_production")
        return try AttestationObject(cborEncoded: try #require(sample.attestation)).statement.intermediateCertificate
    }

    @Test("a certificate's DER is parsed once: later parses give the same certificate as a fresh parse; malformed DER is refused and not kept")
    func parsesOnce() throws {
        let intermediate = try Self.appleIntermediate()
        let cache = RepeatedCertificates()
        let first = try cache.parse(intermediate)
        let second = try cache.parse(intermediate)
        #expect(first == second)
        #expect(second == (try Certificate(derEncoded: intermediate)))
        #expect(cache.count == 1)
        var truncated = intermediate
        truncated.removeLast()
        #expect(throws: (any Error).self) { _ = try cache.parse(truncated) }
        #expect(cache.count == 1)
    }

    @Test("DER differing in one byte, or in length, is another entry: the key is the exact bytes")
    func keyIsExactBytes() throws {
        let intermediate = try Self.appleIntermediate()
        let cache = RepeatedCertificates()
        let original = try cache.parse(intermediate)
        var flipped = intermediate
        flipped[flipped.count - 1] ^= 0x01  // the last byte of the signature's s: still DER
        let parsedFlipped = try cache.parse(flipped)
        #expect(parsedFlipped != original)
        #expect(parsedFlipped == (try Certificate(derEncoded: flipped)))
        #expect(cache.count == 2)
        #expect(try cache.parse(intermediate) == original)
        var longer = intermediate
        longer.append(0)
        #expect(throws: (any Error).self) { _ = try cache.parse(longer) }  // trailing bytes: not DER
        #expect(cache.count == 2)
    }

    @Test("at most capacity certificates are kept: hostile variety costs parses, not memory")
    func bounded() throws {
        let cache = RepeatedCertificates()
        for seed in 0..<UInt64(RepeatedCertificates.capacity + 3) {
            let root = try SimulatedAttestationAuthority(seed: seed).rootCertificate
            var serializer = DER.Serializer()
            try serializer.serialize(root)
            _ = try cache.parse(serializer.serializedBytes)
            #expect(cache.count <= RepeatedCertificates.capacity)
        }
        #expect(cache.count >= 1)
    }
}
