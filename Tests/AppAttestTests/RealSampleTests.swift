//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import Crypto
import FormAttestTestSupport
import Foundation
import SwiftASN1
import Testing
import X509

/// Ground truth: every recording from a real iPhone verifies, and one change to it is rejected.
struct RealSampleTests {
    static func verifier(for sample: RealSample, environments: Set<AppAttestEnvironment> = [.development, .production])
        throws -> AppAttestVerifier
    {
        try AppAttestVerifier(policy: AppAttestPolicy(appIDs: [sample.appID], environments: environments))
    }

    static func verify(_ sample: RealSample, verifier: AppAttestVerifier? = nil, at time: Date? = nil)
        async throws -> VerifiedAttestation
    {
        let attestation = try #require(sample.attestation)
        return try await (verifier ?? Self.verifier(for: sample)).verifyAttestation(
            attestation,
            keyID: try #require(sample.keyID),
            clientDataHash: try #require(sample.clientDataHash),
            at: try #require(time ?? sample.validAt)
        )
    }

    @Test("the fixture set is complete: 12 recordings, 11 attestations, 8 assertions")
    func fixtureSetIsComplete() throws {
        let samples = try RealSample.all()
        #expect(samples.count == 12)
        #expect(samples.filter { $0.attestation != nil }.count == 11)
        #expect(samples.map(\.assertions.count).reduce(0, +) == 8)
    }

    @Test("Apple's embedded root is the pinned App Attestation Root CA")
    func embeddedRootIsPinned() throws {
        var serializer = DER.Serializer()
        try serializer.serialize(AppleAppAttestationRoot.certificate)
        #expect(
            hexString(SHA256.hash(data: serializer.serializedBytes))
                == "1cb9823ba28ba6ad2d33a006941de2ae4f513ef1d4e831b9f7e0fa7b6242c932"
        )
        let copied = try String(
            contentsOf: RealSample.fixturesDirectory.appendingPathComponent("appattest/apple-app-attestation-root-ca.pem"),
            encoding: .utf8
        )
        #expect(try Certificate(pemEncoded: copied) == AppleAppAttestationRoot.certificate)
    }

    @Test("every real attestation verifies at its pinned time", arguments: try RealSample.withAttestation())
    func realAttestationVerifies(sample: RealSample) async throws {
        let result = try await Self.verify(sample)
        #expect(result.keyID == sample.keyID)
        #expect(result.appID == sample.appID)
        #expect(result.environment == sample.environment)
        #expect(result.counter == 0)
        #expect(Array(SHA256.hash(data: Array(result.publicKey.x963Representation))) == sample.keyID)
        #expect(result.receipt.count > 3000, "real receipts are CMS structures of 3.6-4 KB")
        #expect(result.osVersion != nil)
        if sample.name == Self.ios27Sample {
            #expect(result.extensions != nil, "Apple's 2026 sample carries iOS 27's extension map")
        } else {
            #expect(result.extensions == nil, "the recordings before 2026 predate iOS 27's extension map")
            #expect(result.accessControl == nil)
        }
        #expect(result.certificateChain.count == 2)
        #expect(result.certificateChain[0].appAttestAppID == sample.appID)
    }

    static let ios27Sample = "apple_docs_sample_2026_via_webauthn4j"

    @Test("Apple's 2026 sample (iOS 27) verifies with its validation category, bundle version and access control exposed")
    func apple2026Sample() async throws {
        let sample = try RealSample.named(Self.ios27Sample)
        #expect(sample.clientDataHash == Array("example_server_challenge".utf8))
        let result = try await Self.verify(sample)
        #expect(result.environment == .production)
        #expect(result.osVersion == "27.0")
        #expect(result.authenticatorData.flags == .attestedCredentialData, "AT set, ED clear")
        #expect(result.authenticatorData.rawValue.count == 226)
        let extensions = try #require(result.extensions)
        #expect(extensions.validationCategory == .osExecutable)
        #expect(extensions.validationCategory?.rawValue == 1)
        #expect(extensions.bundleVersion == "1")
        #expect(extensions.cdHash == nil)
        #expect(extensions.additionalEntries.isEmpty)
        #expect(extensions.range == 164..<226)
        #expect(result.accessControl == SimulatedDevice.sampleAccessControl)
        #expect(result.receiptCheck.error == nil)
    }

    @Test("Apple's 2026 sample under signal policies: accepted when they admit it, refused by each that excludes it")
    func apple2026SamplePolicies() async throws {
        let sample = try RealSample.named(Self.ios27Sample)
        func verifier(_ configure: (inout AppAttestPolicy) -> Void) throws -> AppAttestVerifier {
            var policy = AppAttestPolicy(appIDs: [sample.appID], environments: [.production])
            configure(&policy)
            return try AppAttestVerifier(policy: policy)
        }
        func expect(_ code: AppAttestError.Code, _ configure: (inout AppAttestPolicy) -> Void) async throws {
            let refusing = try verifier(configure)
            await #expect(throws: AppAttestError(code: code, reason: "")) { try await Self.verify(sample, verifier: refusing) }
        }
        let admitting = try verifier {
            $0.validationCategories = .only([.osExecutable])
            $0.minimumBundleVersion = BundleVersion("1.0")
            $0.requireExtensions = true
            $0.requiredAccessControl = SimulatedDevice.sampleAccessControl
        }
        #expect(try await Self.verify(sample, verifier: admitting).extensions?.bundleVersion == "1")
        try await expect(.validationCategoryNotAllowed) { $0.validationCategories = .only([.appStore, .testFlight]) }
        try await expect(.bundleVersionTooOld) { $0.minimumBundleVersion = BundleVersion("1.0.1") }
        try await expect(.cdHashNotAllowed) { $0.requireCDHash = true }
        var otherACL = SimulatedDevice.sampleAccessControl
        otherACL[otherACL.count - 1] = 0x00  // [1] FALSE instead of TRUE for the last operation
        try await expect(.accessControlMismatch) { $0.requiredAccessControl = otherACL }
    }

    @Test("Apple's own 2024 sample passes a raw 21-byte challenge as clientDataHash")
    func appleSampleUsesRawChallenge() async throws {
        let sample = try RealSample.named("apple_docs_sample_2024_via_oliverbinns")
        #expect(sample.clientDataHash == Array("test_server_challenge".utf8))
        let result = try await Self.verify(sample)
        #expect(result.environment == .production)
        #expect(result.osVersion == "18.0")
    }

    @Test("every real assertion verifies with its attested key", arguments: try RealSample.all())
    func realAssertionsVerify(sample: RealSample) async throws {
        let key: P256.Signing.PublicKey
        if let attestation = sample.attestation {
            key = try await Self.verify(sample).publicKey
            #expect(
                try AttestationObject(cborEncoded: attestation).statement.unverifiedCredentialPublicKey().x963Representation
                    == key.x963Representation
            )
        } else {
            key = try P256.Signing.PublicKey(pemRepresentation: try #require(sample.publicKeyPEM))
        }
        for recorded in sample.assertions {
            let result = try Self.verifier(for: sample).verifyAssertion(
                recorded.assertion,
                publicKey: key,
                clientDataHash: recorded.clientDataHash,
                previousCounter: 0
            )
            #expect(result.appID == sample.appID)
            if let expected = recorded.expectedCounter {
                #expect(result.counter == expected)
            }
            if let clientData = recorded.clientData {
                #expect(Array(SHA256.hash(data: Array(clientData.utf8))) == recorded.clientDataHash)
            }
        }
    }

    // MARK: - One change to real data

    @Test("a real attestation checked today is rejected: its credential certificate expired")
    func realAttestationExpired() async throws {
        let sample = try RealSample.named("uebelack_production")
        await #expect(throws: AppAttestError(code: .certificateExpired, reason: "")) {
            try await Self.verify(sample, at: Date(timeIntervalSince1970: 1_795_000_000))
        }
    }

    @Test("a real attestation checked before its leaf was issued is rejected")
    func realAttestationNotYetValid() async throws {
        let sample = try RealSample.named("uebelack_production")
        await #expect(throws: AppAttestError(code: .certificateNotYetValid, reason: "")) {
            try await Self.verify(sample, at: try #require(sample.validAt).addingTimeInterval(-3 * 86_400))
        }
    }

    @Test("a real attestation for another app id is rejected", arguments: try RealSample.withAttestation())
    func realAttestationWrongAppID(sample: RealSample) async throws {
        let verifier = try AppAttestVerifier(
            policy: AppAttestPolicy(appIDs: ["ABCDE12345.com.example.other"], environments: [.development, .production])
        )
        await #expect(throws: AppAttestError(code: .appIDMismatch, reason: "")) {
            try await Self.verify(sample, verifier: verifier)
        }
    }

    @Test("a real attestation with another clientDataHash is rejected", arguments: try RealSample.withAttestation())
    func realAttestationWrongClientData(sample: RealSample) async throws {
        let attestation = try #require(sample.attestation)
        await #expect(throws: AppAttestError(code: .nonceMismatch, reason: "")) {
            try await Self.verifier(for: sample).verifyAttestation(
                attestation,
                keyID: try #require(sample.keyID),
                clientDataHash: Array(SHA256.hash(data: Array("another form".utf8))),
                at: try #require(sample.validAt)
            )
        }
    }

    @Test("a real attestation with another keyId is rejected")
    func realAttestationWrongKeyID() async throws {
        let sample = try RealSample.named("veehaitch_ios_14_4")
        let other = try #require(try RealSample.named("veehaitch_ios_14_3").keyID)
        await #expect(throws: AppAttestError(code: .keyIDMismatch, reason: "")) {
            try await Self.verifier(for: sample).verifyAttestation(
                try #require(sample.attestation),
                keyID: other,
                clientDataHash: try #require(sample.clientDataHash),
                at: try #require(sample.validAt)
            )
        }
    }

    @Test("environment policy: a development attestation is refused by a production-only policy")
    func realAttestationEnvironmentPolicy() async throws {
        let development = try RealSample.named("uebelack_development")
        await #expect(throws: AppAttestError(code: .environmentNotAllowed, reason: "")) {
            try await Self.verify(development, verifier: Self.verifier(for: development, environments: [.production]))
        }
        let production = try RealSample.named("uebelack_production")
        await #expect(throws: AppAttestError(code: .environmentNotAllowed, reason: "")) {
            try await Self.verify(production, verifier: Self.verifier(for: production, environments: [.development]))
        }
        #expect(try await Self.verify(production, verifier: Self.verifier(for: production, environments: [.production])).environment == .production)
    }

    @Test("a real attestation does not chain to a root that is not Apple's")
    func realAttestationOtherRoot() async throws {
        let sample = try RealSample.named("uebelack_development")
        let otherRoot = try SimulatedAttestationAuthority().rootCertificate
        let verifier = try AppAttestVerifier(
            policy: AppAttestPolicy(appIDs: [sample.appID], environments: [.development], trustAnchors: [otherRoot])
        )
        await #expect(throws: AppAttestError(code: .certificateChainInvalid, reason: "")) {
            try await Self.verify(sample, verifier: verifier)
        }
    }

    @Test(
        "a real assertion: replayed counter, other client data, other app, other key",
        arguments: try RealSample.withAttestation().filter { !$0.assertions.isEmpty })
    func realAssertionNegatives(sample: RealSample) async throws {
        let key = try await Self.verify(sample).publicKey
        let recorded = try #require(sample.assertions.first)
        let verifier = try Self.verifier(for: sample)
        let counter = try verifier.verifyAssertion(
            recorded.assertion,
            publicKey: key,
            clientDataHash: recorded.clientDataHash,
            previousCounter: 0
        ).counter
        #expect(throws: AppAttestError(code: .counterNotIncreasing, reason: "")) {
            try verifier.verifyAssertion(recorded.assertion, publicKey: key, clientDataHash: recorded.clientDataHash, previousCounter: counter)
        }
        #expect(throws: AppAttestError(code: .signatureInvalid, reason: "")) {
            try verifier.verifyAssertion(
                recorded.assertion,
                publicKey: key,
                clientDataHash: Array(SHA256.hash(data: Array("tampered".utf8))),
                previousCounter: 0
            )
        }
        #expect(throws: AppAttestError(code: .signatureInvalid, reason: "")) {
            try verifier.verifyAssertion(
                recorded.assertion,
                publicKey: P256.Signing.PrivateKey().publicKey,
                clientDataHash: recorded.clientDataHash,
                previousCounter: 0
            )
        }
        let otherApp = try AppAttestVerifier(
            policy: AppAttestPolicy(appIDs: ["ABCDE12345.com.example.other"], environments: [.development, .production])
        )
        #expect(throws: AppAttestError(code: .appIDMismatch, reason: "")) {
            try otherApp.verifyAssertion(recorded.assertion, publicKey: key, clientDataHash: recorded.clientDataHash, previousCounter: 0)
        }
    }
}
