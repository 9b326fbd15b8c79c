//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import CBOR
import Crypto
import Foundation
import Testing

/// Each of Apple's attestation steps, rejected by a simulated attestation that is genuine but for
/// exactly one thing.
struct AttestationStepTests {
    static func expect(_ code: AppAttestError.Code, _ body: () async throws -> Void) async {
        await #expect(throws: AppAttestError(code: code, reason: "")) { try await body() }
    }

    @Test("a genuine simulated attestation verifies, in both environments")
    func genuineVerifies() async throws {
        for environment in AppAttestEnvironment.allCases {
            let scenario = try SimulatedScenario(environment: environment)
            let result = try await scenario.verify()
            #expect(result.keyID == scenario.key.keyID)
            #expect(result.environment == environment)
            #expect(result.appID == SimulatedScenario.appID)
            #expect(result.osVersion == "17.4")
            #expect(result.publicKey.x963Representation == scenario.key.publicKey.x963Representation)
            #expect(result.certificateChain[0].appAttestAppID == SimulatedScenario.appID)
        }
    }

    @Test("step 1: a chain from another CA is rejected")
    func step1OtherAuthority() async throws {
        let scenario = try SimulatedScenario()
        let impostor = SimulatedDevice(
            authority: try SimulatedAttestationAuthority(seed: 43),
            appID: SimulatedScenario.appID,
            seed: 7
        )
        let attestation = try impostor.attest(scenario.key, clientDataHash: scenario.clientDataHash, at: SimulatedScenario.time)
        await Self.expect(.certificateChainInvalid) {
            _ = try await scenario.verifier().verifyAttestation(
                attestation,
                keyID: scenario.key.keyID,
                clientDataHash: scenario.clientDataHash,
                at: SimulatedScenario.time
            )
        }
    }

    @Test("step 1: Apple's root alone does not trust the simulator")
    func step1DefaultAnchorIsApple() async throws {
        let scenario = try SimulatedScenario()
        let apple = try AppAttestVerifier(policy: AppAttestPolicy(appIDs: [SimulatedScenario.appID], environments: [.development]))
        await Self.expect(.certificateChainInvalid) { try await scenario.verify(verifier: apple) }
    }

    @Test("step 1: an expired credential certificate is rejected")
    func step1Expired() async throws {
        let scenario = try SimulatedScenario()
        await Self.expect(.certificateExpired) {
            try await scenario.verify(at: SimulatedScenario.time.addingTimeInterval(3 * 86_400))
        }
    }

    @Test("step 1: a credential certificate not yet valid is rejected")
    func step1NotYetValid() async throws {
        let scenario = try SimulatedScenario()
        await Self.expect(.certificateNotYetValid) {
            try await scenario.verify(at: SimulatedScenario.time.addingTimeInterval(-2 * 86_400))
        }
    }

    @Test("step 1: an x5c element that is not a certificate is rejected")
    func step1MalformedCertificate() async throws {
        let scenario = try SimulatedScenario()
        var attestation = try scenario.attestation()
        // The leaf's DER starts right after the x5c array header and its byte-string header.
        let leafStart = try #require(CBORDecoder.decode(attestation)[textKey: "attStmt"]?[textKey: "x5c"]?.arrayElements?.first)
        attestation[leafStart.range.lowerBound + leafStart.headerLength] = 0x31  // SET instead of SEQUENCE
        await Self.expect(.malformedCertificate) {
            _ = try await scenario.verifier().verifyAttestation(
                attestation,
                keyID: scenario.key.keyID,
                clientDataHash: scenario.clientDataHash,
                at: SimulatedScenario.time
            )
        }
    }

    @Test("steps 2-4: a certified nonce that is not SHA256(authData || clientDataHash) is rejected")
    func step4NonceMismatch() async throws {
        let scenario = try SimulatedScenario()
        await Self.expect(.nonceMismatch) { try await scenario.verify { $0.certifiedNonce = [UInt8](repeating: 7, count: 32) } }
    }

    @Test("steps 2-4: another clientDataHash than the one attested is rejected")
    func step4OtherClientData() async throws {
        let scenario = try SimulatedScenario()
        await Self.expect(.nonceMismatch) {
            try await scenario.verify(clientDataHash: Array(SHA256.hash(data: Array("other".utf8))))
        }
    }

    @Test("steps 2-4: a missing nonce extension is rejected")
    func step4MissingExtension() async throws {
        let scenario = try SimulatedScenario()
        await Self.expect(.nonceExtensionInvalid) { try await scenario.verify { $0.omitNonceExtension = true } }
    }

    @Test(
        "steps 2-4: a nonce extension of another shape is rejected",
        arguments: [
            // SEQUENCE { OCTET STRING } without the [1] tag (Apple's prose, not Apple's bytes).
            [0x30, 0x22, 0x04, 0x20] + [UInt8](repeating: 1, count: 32),
            // [2] instead of [1].
            [0x30, 0x24, 0xA2, 0x22, 0x04, 0x20] + [UInt8](repeating: 1, count: 32),
            // A 31-byte nonce.
            [0x30, 0x23, 0xA1, 0x21, 0x04, 0x1F] + [UInt8](repeating: 1, count: 31),
            // Two elements in the sequence.
            [0x30, 0x26, 0xA1, 0x22, 0x04, 0x20] + [UInt8](repeating: 1, count: 32) + [0x05, 0x00],
        ]
    )
    func step4MalformedExtension(value: [UInt8]) async throws {
        let scenario = try SimulatedScenario()
        await Self.expect(.nonceExtensionInvalid) { try await scenario.verify { $0.nonceExtensionValue = value } }
    }

    @Test("step 5: a keyId that is not SHA256 of the certified key is rejected")
    func step5KeyIDMismatch() async throws {
        let scenario = try SimulatedScenario()
        await Self.expect(.keyIDMismatch) { try await scenario.verify(keyID: scenario.device.key(1).keyID) }
    }

    @Test("step 5: a certificate for another key than the keyId is rejected")
    func step5CertifiedOtherKey() async throws {
        let scenario = try SimulatedScenario()
        await Self.expect(.keyIDMismatch) {
            try await scenario.verify { $0.certifiedPublicKey = scenario.device.key(1).publicKey }
        }
    }

    @Test("step 6: rpIdHash of another app id is rejected")
    func step6AppIDMismatch() async throws {
        let scenario = try SimulatedScenario()
        await Self.expect(.appIDMismatch) { try await scenario.verify { $0.relyingPartyID = "ABCDE12345.com.formattest.other" } }
    }

    @Test("step 6: several accepted app ids; the result names the one that matched")
    func step6SeveralAppIDs() async throws {
        let scenario = try SimulatedScenario()
        var policy = scenario.policy()
        policy.appIDs = ["ZZZZZ99999.com.example.first", SimulatedScenario.appID]
        #expect(try await scenario.verify(verifier: AppAttestVerifier(policy: policy)).appID == SimulatedScenario.appID)
    }

    @Test("step 7: a counter other than 0 is rejected")
    func step7CounterNotZero() async throws {
        let scenario = try SimulatedScenario()
        await Self.expect(.counterNotZero) { try await scenario.verify { $0.counter = 1 } }
    }

    @Test("step 8: an aaguid that is not App Attest's is rejected")
    func step8AaguidInvalid() async throws {
        let scenario = try SimulatedScenario()
        await Self.expect(.aaguidInvalid) { try await scenario.verify { $0.aaguid = Array("appattestdevelox".utf8) } }
    }

    @Test("step 8: an environment outside the policy is rejected")
    func step8EnvironmentNotAllowed() async throws {
        let scenario = try SimulatedScenario(environment: .development)
        await Self.expect(.environmentNotAllowed) { try await scenario.verify(verifier: scenario.verifier(environments: [.production])) }
        await Self.expect(.environmentNotAllowed) { try await scenario.verify(verifier: scenario.verifier(environments: [])) }
    }

    @Test("step 9: a credentialId other than the keyId is rejected")
    func step9CredentialIDMismatch() async throws {
        let scenario = try SimulatedScenario()
        await Self.expect(.credentialIDMismatch) { try await scenario.verify { $0.credentialID = scenario.device.key(1).keyID } }
    }

    @Test("step 9: a COSE key other than the certified key is rejected")
    func step9PublicKeyMismatch() async throws {
        let scenario = try SimulatedScenario()
        await Self.expect(.publicKeyMismatch) {
            try await scenario.verify { $0.credentialPublicKey = scenario.device.key(1).publicKey }
        }
    }

    @Test("fmt other than apple-appattest is rejected")
    func unsupportedFormat() async throws {
        let scenario = try SimulatedScenario()
        await Self.expect(.unsupportedFormat) { try await scenario.verify { $0.format = "packed" } }
    }

    @Test("authData without the AT flag is rejected")
    func missingATFlag() async throws {
        let scenario = try SimulatedScenario()
        await Self.expect(.malformedAuthenticatorData) { try await scenario.verify { $0.flags = 0x00 } }
    }

    @Test("an attestation over 8 KiB is rejected before parsing")
    func attestationTooLarge() async throws {
        let scenario = try SimulatedScenario()
        await Self.expect(.attestationTooLarge) { try await scenario.verify { $0.receipt = [UInt8](repeating: 0, count: 8 * 1024) } }
    }

    @Test("an empty clientDataHash is rejected")
    func emptyClientDataHash() async throws {
        let scenario = try SimulatedScenario()
        await Self.expect(.invalidClientDataHash) { try await scenario.verify(clientDataHash: []) }
    }

    @Test("a policy without an app id or a trust anchor is refused")
    func invalidPolicy() throws {
        #expect(throws: AppAttestError(code: .invalidPolicy, reason: "")) {
            try AppAttestVerifier(policy: AppAttestPolicy(appIDs: [], environments: [.production]))
        }
        #expect(throws: AppAttestError(code: .invalidPolicy, reason: "")) {
            try AppAttestVerifier(policy: AppAttestPolicy(appIDs: ["A.b"], environments: [.production], trustAnchors: []))
        }
    }

    // MARK: - iOS 27 authenticator data extensions

    @Test("iOS 27: the unflagged extension map is parsed and exposed")
    func iOS27ExtensionsExposed() async throws {
        let scenario = try SimulatedScenario()
        let result = try await scenario.verify { $0.authenticatorDataSuffix = SimulatedDevice.iOS27ExtensionMap() }
        #expect(result.authenticatorData.flags == .attestedCredentialData, "ED stays clear, as on real iOS 27 devices")
        #expect(result.extensions?.bundleVersion == "1")
        #expect(result.extensions?.validationCategory == .osExecutable)
        #expect(result.extensions?.validationCategory?.rawValue == 1)
        #expect(result.authenticatorData.rawValue.count == 226, "Apple's 2026 sample has 226 bytes of authData")
    }

    @Test("iOS 27: the map is also accepted when the ED flag is set")
    func iOS27WithEDFlag() async throws {
        let scenario = try SimulatedScenario()
        let result = try await scenario.verify {
            $0.flags = 0xC0
            $0.authenticatorDataSuffix = SimulatedDevice.iOS27ExtensionMap()
        }
        #expect(result.extensions?.bundleVersion == "1")
    }

    @Test(
        "iOS 27: anything after the COSE key but one CBOR map is rejected",
        arguments: [
            [0x00],  // an integer
            SimulatedDevice.iOS27ExtensionMap() + [0x00],  // a map and a trailing byte
            SimulatedDevice.iOS27ExtensionMap() + SimulatedDevice.iOS27ExtensionMap(),  // two maps
            [0xA1, 0x01, 0x02],  // a map with an integer key
            [0xA1, 0x77] + Array("apple_bundle_version_01".utf8) + [0x01],  // bundle version not text
            [0xA1, 0x78, 0x1C] + Array("apple_validation_category_01".utf8) + [0x61, 0x31],  // category not bytes
            [0xA1, 0x61],  // truncated
        ]
    )
    func iOS27TrailingGarbage(suffix: [UInt8]) async throws {
        let scenario = try SimulatedScenario()
        await Self.expect(.malformedAuthenticatorData) { try await scenario.verify { $0.authenticatorDataSuffix = suffix } }
    }

    @Test("iOS 27: unknown entries in the map are kept, not interpreted")
    func iOS27UnknownEntries() async throws {
        let scenario = try SimulatedScenario()
        let map: [UInt8] = [0xA2, 0x67] + Array("future1".utf8) + [0x01] + [0x67] + Array("future2".utf8) + [0x42, 0xAB, 0xCD]
        let result = try await scenario.verify { $0.authenticatorDataSuffix = map }
        #expect(result.extensions?.additionalEntries.keys.sorted() == ["future1", "future2"])
        // Each value is kept as its encoded bytes, exactly as it stood in the authenticator data.
        #expect(result.extensions?.additionalEntries["future1"] == [0x01])
        #expect(result.extensions?.additionalEntries["future2"] == [0x42, 0xAB, 0xCD])
        #expect(result.extensions?.validationCategory == nil)
    }

    @Test("policy: validation categories restrict iOS 27 attestations; require-extensions decides for devices without the map")
    func validationCategoryPolicy() async throws {
        let scenario = try SimulatedScenario()
        let appStoreOnly = try scenario.verifier { $0.validationCategories = .only([.appStore]) }
        await Self.expect(.validationCategoryNotAllowed) {
            try await scenario.verify(verifier: appStoreOnly) { $0.authenticatorDataSuffix = SimulatedDevice.iOS27ExtensionMap() }
        }
        let category1 = try scenario.verifier { $0.validationCategories = .only([.osExecutable]) }
        #expect(
            try await scenario.verify(verifier: category1) { $0.authenticatorDataSuffix = SimulatedDevice.iOS27ExtensionMap() }
                .extensions?.validationCategory == .osExecutable
        )
        // Devices before iOS 27 write no map: accepted, unless the policy requires the signals.
        #expect(try await scenario.verify(verifier: appStoreOnly).extensions == nil)
        let required = try scenario.verifier {
            $0.validationCategories = .only([.osExecutable])
            $0.requireExtensions = true
        }
        await Self.expect(.extensionsRequired) { try await scenario.verify(verifier: required) }
    }
}
