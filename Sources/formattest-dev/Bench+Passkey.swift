//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
import FormattestCommands
import Foundation
import WebAuthn

extension Bench {
    /// Passkey assertion verification (WebAuthn §7.2 on a response in the `toJSON()` shape: JSON
    /// and base64url parsing, clientDataJSON, authenticator data, the signature, the sign count)
    /// and its cryptographic limit: SHA-256 of clientDataJSON and one P-256 verification over
    /// authenticatorData ‖ that hash (which hashes the 69 bytes once more).
    func passkeyCases(_ runner: BenchRunner) throws -> [CaseResult] {
        let key = P256.Signing.PrivateKey()
        let point = Array(key.publicKey.x963Representation)
        // The COSE ES256 key, written out: {1: 2, 3: -7, -1: 1, -2: x, -3: y}.
        let cose: [UInt8] = [0xA5, 0x01, 0x02, 0x03, 0x26, 0x20, 0x01, 0x21, 0x58, 0x20] + point[1..<33] + [0x22, 0x58, 0x20] + point[33..<65]
        let form = try InputFile.readBytes(self.formPath)
        // The challenge of a passkey over a form: SHA-256 of its RFC 8785 bytes (as App Attest's clientDataHash).
        let challenge = Array(SHA256.hash(data: form))
        let origin = "https://formattest.example"
        let clientData = Array(
            #"{"type":"webauthn.get","challenge":"\#(WebAuthnBase64.encode(challenge))","origin":"\#(origin)","crossOrigin":false}"#.utf8
        )
        // rpIdHash, flags UP|UV|BE|BS (a synced passkey), counter 0.
        let authData = Array(SHA256.hash(data: Array("formattest.example".utf8))) + [0x1D, 0, 0, 0, 0]
        let clientDataHash = Array(SHA256.hash(data: clientData))
        let signature = try key.signature(for: authData + clientDataHash)
        let der = Array(signature.derRepresentation)
        let credentialID = WebAuthnBase64.encode((0..<16).map { UInt8($0) })
        let json = Array(
            """
            {"id":"\(credentialID)","rawId":"\(credentialID)","type":"public-key","clientExtensionResults":{},\
            "authenticatorAttachment":"platform","response":{"clientDataJSON":"\(WebAuthnBase64.encode(clientData))",\
            "authenticatorData":"\(WebAuthnBase64.encode(authData))","signature":"\(WebAuthnBase64.encode(der))",\
            "userHandle":"\(WebAuthnBase64.encode(Array("alice".utf8)))"}}
            """.utf8
        )
        let verifier = try WebAuthnVerifier(
            policy: WebAuthnPolicy(relyingPartyID: "formattest.example", allowedOrigins: [origin], requireUserVerification: true)
        )
        let publicKey = try CredentialPublicKey(cborEncoded: cose)
        // Fail before measuring if the response does not verify.
        _ = try verifier.verifyAuthentication(AuthenticationResponse(json: json), publicKey: publicKey, challenge: challenge, previousSignCount: 0)
        return [
            try runner.measure("passkey.assertion.verify", bytesPerOperation: json.count) {
                _ = try verifier.verifyAuthentication(
                    AuthenticationResponse(json: json),
                    publicKey: publicKey,
                    challenge: challenge,
                    previousSignCount: 0,
                    userHandle: Array("alice".utf8)
                )
            },
            try runner.measure("limit.passkey(sha256(clientDataJSON)+p256.verify)", bytesPerOperation: clientData.count + authData.count) {
                let hash = SHA256.hash(data: clientData)
                guard key.publicKey.isValidSignature(signature, for: authData + Array(hash)) else { throw UsageError("bad") }
            },
        ]
    }
}
