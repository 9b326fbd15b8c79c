//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import CBOR
import Crypto
import Testing

/// Assertion verification on simulated assertions that are genuine but for one thing.
struct AssertionTests {
    @Test("a genuine simulated assertion verifies and reports its counter")
    func genuineVerifies() throws {
        let scenario = try SimulatedScenario()
        let result = try scenario.verifyAssertion(counter: 5, previousCounter: 4)
        #expect(result.counter == 5)
        #expect(result.appID == SimulatedScenario.appID)
        #expect(result.keyID == scenario.key.keyID)
        #expect(result.authenticatorData.rawValue.count == 37)
    }

    @Test("step 3: a signature by another key is rejected")
    func otherSigner() throws {
        let scenario = try SimulatedScenario()
        #expect(throws: AppAttestError(code: .signatureInvalid, reason: "")) {
            try scenario.verifyAssertion { $0.signingKey = scenario.device.key(1).privateKey }
        }
    }

    @Test("step 3: a signature over another clientDataHash is rejected")
    func otherClientData() throws {
        let scenario = try SimulatedScenario()
        #expect(throws: AppAttestError(code: .signatureInvalid, reason: "")) {
            try scenario.verifier().verifyAssertion(
                try scenario.assertion(counter: 1),
                publicKey: scenario.key.publicKey,
                clientDataHash: Array(SHA256.hash(data: Array("other form".utf8))),
                previousCounter: 0
            )
        }
    }

    @Test("step 4: rpIdHash of another app id is rejected")
    func otherApp() throws {
        let scenario = try SimulatedScenario()
        #expect(throws: AppAttestError(code: .appIDMismatch, reason: "")) {
            try scenario.verifyAssertion { $0.relyingPartyID = "ABCDE12345.com.formattest.other" }
        }
    }

    @Test("step 5: a counter equal to or below the stored one is rejected", arguments: [(3, 3), (2, 3), (0, 0)])
    func counterNotIncreasing(counter: UInt32, previous: UInt32) throws {
        let scenario = try SimulatedScenario()
        #expect(throws: AppAttestError(code: .counterNotIncreasing, reason: "")) {
            try scenario.verifyAssertion(counter: counter, previousCounter: previous)
        }
    }

    @Test("iOS 27: an extension map after the 37 bytes is accepted whatever the flags say", arguments: [UInt8(0x40), 0x00, 0xC0, 0x80])
    func iOS27Map(flags: UInt8) throws {
        let scenario = try SimulatedScenario()
        let result = try scenario.verifyAssertion {
            $0.flags = flags
            $0.authenticatorDataSuffix = SimulatedDevice.iOS27ExtensionMap()
        }
        #expect(result.extensions?.validationCategory == .osExecutable)
    }

    @Test("iOS 27: the category policy applies to assertions that carry one, and not to those without")
    func iOS27CategoryPolicy() throws {
        let scenario = try SimulatedScenario()
        let verifier = try scenario.verifier { $0.validationCategories = .only([.testFlight]) }
        #expect(throws: AppAttestError(code: .validationCategoryNotAllowed, reason: "")) {
            try scenario.verifyAssertion(verifier: verifier) { $0.authenticatorDataSuffix = SimulatedDevice.iOS27ExtensionMap() }
        }
        #expect(try scenario.verifyAssertion(verifier: verifier).extensions == nil)
    }

    @Test("bytes after the 37 that are not one CBOR map are rejected", arguments: [[UInt8(0x00)], [0xA0, 0x00], [0x40]])
    func trailingGarbage(suffix: [UInt8]) throws {
        let scenario = try SimulatedScenario()
        #expect(throws: AppAttestError(code: .malformedAuthenticatorData, reason: "")) {
            try scenario.verifyAssertion { $0.authenticatorDataSuffix = suffix }
        }
    }

    @Test("structure: extra keys, missing keys, wrong types and bad DER are rejected")
    func malformedStructure() throws {
        let scenario = try SimulatedScenario()
        let genuine = try AssertionObject(cborEncoded: scenario.assertion(counter: 1))
        func encode(_ entries: [(key: CBORSerializer.MapKey, value: (inout CBORSerializer) throws -> Void)]) throws -> [UInt8] {
            var serializer = CBORSerializer()
            try serializer.appendMap(entries)
            return serializer.bytes
        }
        let cases: [[UInt8]] = [
            try encode([(.text("signature"), { $0.appendByteString(genuine.signature) })]),
            try encode([
                (.text("signature"), { $0.appendByteString(genuine.signature) }),
                (.text("authenticatorData"), { $0.appendByteString(genuine.authenticatorData.rawValue) }),
                (.text("extra"), { $0.appendInteger(1) }),
            ]),
            try encode([
                (.text("signature"), { $0.appendTextString("not bytes") }),
                (.text("authenticatorData"), { $0.appendByteString(genuine.authenticatorData.rawValue) }),
            ]),
            try encode([
                (.text("signature"), { $0.appendByteString([0x30, 0x02, 0x02, 0x00]) }),
                (.text("authenticatorData"), { $0.appendByteString(genuine.authenticatorData.rawValue) }),
            ]),
            [0x80],  // an array
        ]
        for bytes in cases {
            #expect(throws: AppAttestError(code: .malformedAssertion, reason: "")) {
                try scenario.verifier().verifyAssertion(
                    bytes, publicKey: scenario.key.publicKey, clientDataHash: scenario.clientDataHash, previousCounter: 0)
            }
        }
        let short = try encode([
            (.text("signature"), { $0.appendByteString(genuine.signature) }),
            (.text("authenticatorData"), { $0.appendByteString(genuine.authenticatorData.rawValue.prefix(36)) }),
        ])
        #expect(throws: AppAttestError(code: .malformedAuthenticatorData, reason: "")) {
            try AssertionObject(cborEncoded: short)
        }
    }

    @Test("an assertion over 2 KiB is rejected before parsing")
    func tooLarge() throws {
        let scenario = try SimulatedScenario()
        #expect(throws: AppAttestError(code: .assertionTooLarge, reason: "")) {
            try scenario.verifyAssertion { $0.authenticatorDataSuffix = [0x59, 0x08, 0x00] + [UInt8](repeating: 0, count: 2048) }
        }
    }
}
