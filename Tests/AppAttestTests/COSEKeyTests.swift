//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import FormAttestTestSupport
import Testing

struct COSEKeyTests {
    @Test("a COSE key encodes byte for byte as Apple's does")
    func coseKeyMatchesApple() throws {
        let sample = try RealSample.named("uebelack_production")
        let object = try AttestationObject(cborEncoded: try #require(sample.attestation))
        let credential = try #require(object.authenticatorData.attestedCredentialData)
        let appleBytes = Array(object.authenticatorData.rawValue[credential.publicKeyRange])
        #expect(appleBytes.count == 77)
        #expect(credential.publicKey.cborEncoded == appleBytes)
    }
}
