//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
import Testing
import WebAuthn

/// The attestation statements' own checks, one change each (the client-data and flag steps are
/// in ``RegistrationTests``).
struct RegistrationStatementTests {
    func expectRefusal(
        _ code: WebAuthnError.Code,
        _ authenticator: SoftwareAuthenticator,
        anchored: Bool = false,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        await #expect(throws: WebAuthnError(code: code, reason: ""), sourceLocation: sourceLocation) {
            let verifier = try WebAuthnVerifier(policy: authenticator.policy(anchored: anchored))
            _ = try await verifier.verifyRegistration(
                json: authenticator.registrationJSON(),
                challenge: authenticator.challenge,
                at: SoftwareAuthenticator.now
            )
        }
    }

    func authenticator(_ format: SoftwareAuthenticator.Format) -> SoftwareAuthenticator {
        var authenticator = SoftwareAuthenticator()
        authenticator.format = format
        return authenticator
    }

    @Test("a registration without attested credential data (AT clear) is refused")
    func attestedCredentialMissing() async {
        var authenticator = self.authenticator(.none)
        authenticator.omitAttestedCredential = true
        await self.expectRefusal(.attestedCredentialMissing, authenticator)
    }

    @Test("packed self attestation: the statement's alg must be the credential's")
    func packedSelfAlgorithm() async {
        var authenticator = self.authenticator(.packedSelf)
        authenticator.packedSelfAlgorithm = -257
        await self.expectRefusal(.algorithmNotAllowed, authenticator)
    }

    @Test("a member the format does not define in attStmt is refused", arguments: [SoftwareAuthenticator.Format.none, .packedSelf, .fidoU2F, .apple])
    func extraMember(_ format: SoftwareAuthenticator.Format) async {
        var authenticator = self.authenticator(format)
        authenticator.extraStatementMember = true
        await self.expectRefusal(.malformedAttestation, authenticator)
    }

    @Test("android-key: a simulated statement verifies; with its certificate's key not the credential key, it is refused")
    func androidKeyCredentialKey() async throws {
        // Not reachable by changing a recording: the certificate's key must first verify sig over
        // authData (which holds the credential key), so the test signs with a key of its own.
        let valid = self.authenticator(.androidKey)
        let verifier = try WebAuthnVerifier(policy: valid.policy())
        _ = try await verifier.verifyRegistration(json: valid.registrationJSON(), challenge: valid.challenge, at: SoftwareAuthenticator.now)
        var changed = valid
        changed.androidKeyCertifiesAttestationKey = true
        let error = await #expect(throws: WebAuthnError.self) {
            _ = try await verifier.verifyRegistration(json: changed.registrationJSON(), challenge: changed.challenge, at: SoftwareAuthenticator.now)
        }
        #expect(error?.code == .publicKeyMismatch)
        #expect(error?.reason == "the android-key certificate's key is not the credential public key")
    }

    @Test("fido-u2f: exactly one certificate")
    func fidoU2FOneCertificate() async {
        var authenticator = self.authenticator(.fidoU2F)
        authenticator.certificatesAfterLeaf = [SoftwareAuthenticator.ca.leaf(for: P256.Signing.PrivateKey().publicKey)]
        await self.expectRefusal(.malformedAttestation, authenticator)
    }

    @Test("apple: the certificate's key must be the credential key")
    func applePublicKey() async {
        var authenticator = self.authenticator(.apple)
        authenticator.appleCertificateKey = P256.Signing.PrivateKey().publicKey
        await self.expectRefusal(.publicKeyMismatch, authenticator)
    }

    @Test("x5c[0] that is not a certificate is refused")
    func malformedCertificate() async {
        var authenticator = self.authenticator(.packedX5C)
        authenticator.leafOverride = [0x30, 0x03, 0x02, 0x01, 0x01]
        await self.expectRefusal(.malformedCertificate, authenticator)
    }

    @Test("without anchors, x5c[0] must still be signed by x5c[1]")
    func unanchoredChainSignature() async throws {
        var authenticator = self.authenticator(.apple)
        // A certificate that did not issue the leaf (another CA's root), as x5c[1].
        authenticator.certificatesAfterLeaf = [try SoftwareAuthenticator.AttestationCA().rootDER()]
        await self.expectRefusal(.certificateChainInvalid, authenticator)
        // The real issuer as x5c[1] verifies, unanchored.
        authenticator.certificatesAfterLeaf = [try SoftwareAuthenticator.ca.rootDER()]
        let verifier = try WebAuthnVerifier(policy: authenticator.policy())
        let result = try await verifier.verifyRegistration(
            json: authenticator.registrationJSON(),
            challenge: authenticator.challenge,
            at: SoftwareAuthenticator.now
        )
        #expect(result.attestationAnchored == false)
    }
}
