//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import CanonicalJSON
import FormAttestClient
import FormAttestForm
import Foundation
import Testing

/// The whole client path on the simulated device, checked by the real verifier.
struct SimulatedServiceTests {
    @Test("form -> client -> simulated device -> verifier: attestation, then assertions with rising counters")
    func endToEnd() async throws {
        let authority = try SimulatedAttestationAuthority()
        let device = SimulatedDevice(authority: authority, appID: "ABCDE12345.com.formattest.bank")
        let now = Date(timeIntervalSince1970: 1_795_341_600)
        let client = AppAttestClient(service: SimulatedAppAttestService(device: device, now: { now }))
        let verifier = try AppAttestVerifier(
            policy: AppAttestPolicy(
                appIDs: [device.appID], environments: [.development], trustAnchors: [authority.rootCertificate],
                receiptTrustAnchors: [authority.receiptAuthority.rootCertificate])
        )

        let registrationForm = try SignedForm.make(fields: ["action": .string(JSONString("register"))], username: "bob", now: now)
        let registration = try await client.register(clientDataHash: Data(registrationForm.clientDataHash))
        let attested = try await verifier.verifyAttestation(
            registration.attestation,
            keyID: try #require(Base64URL.decode(registration.keyId)),
            clientDataHash: registrationForm.clientDataHash,
            at: now
        )
        var counter = attested.counter
        for amount in [10.0, 20.5] {
            let form = try SignedForm.make(fields: ["amount": .number(amount)], username: "bob", now: now)
            let assertion = try await client.generateAssertion(keyId: registration.keyId, clientDataHash: Data(form.clientDataHash))
            let verified = try verifier.verifyAssertion(
                assertion, publicKey: attested.publicKey, clientDataHash: form.clientDataHash, previousCounter: counter)
            #expect(verified.counter == counter + 1)
            counter = verified.counter
        }
    }

    @Test("an unknown keyId gets DeviceCheck's invalidKey")
    func unknownKey() async throws {
        let device = SimulatedDevice(authority: try SimulatedAttestationAuthority(), appID: "A.b")
        let client = AppAttestClient(service: SimulatedAppAttestService(device: device))
        do {
            _ = try await client.generateAssertion(keyId: "bm8=", clientDataHash: Data(count: 32))
            Issue.record("no error")
        } catch {
            #expect(error.code == .assertion, "\(error)")
            #expect(error.underlying.flatMap(DCErrorCode.init) == .invalidKey)
        }
    }
}
