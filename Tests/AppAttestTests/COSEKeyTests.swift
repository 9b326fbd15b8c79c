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

struct HexTests {
    @Test("hex: two lowercase digits a byte, as the tests' own encoder gives them, for all 256 values; read back")
    func everyByte() {
        let bytes = (0...255).map { UInt8($0) }
        #expect(hex(bytes) == hexString(bytes))
        #expect(AppAttest.bytes(hex: hex(bytes)) == bytes)
        #expect(hex([]) == "")
        #expect(hex([0x0A, 0xF0]) == "0af0")
    }
}
