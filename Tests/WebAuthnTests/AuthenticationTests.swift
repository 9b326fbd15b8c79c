//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
import Foundation
import Testing
import WebAuthn

/// §7.2, one check per test: each starts from a valid assertion and changes exactly one thing.
struct AuthenticationTests {
    func authenticate(
        _ authenticator: SoftwareAuthenticator,
        policy: WebAuthnPolicy? = nil,
        previousSignCount: UInt32 = 0,
        credentialID: [UInt8]? = nil,
        userHandle: [UInt8]? = nil
    ) throws(WebAuthnError) -> VerifiedAuthentication {
        let verifier = try WebAuthnVerifier(policy: policy ?? authenticator.policy())
        return try verifier.verifyAuthentication(
            AuthenticationResponse(json: authenticator.authenticationJSON()),
            publicKey: CredentialPublicKey(cborEncoded: authenticator.cosePublicKey),
            challenge: SoftwareAuthenticator().challenge,
            previousSignCount: previousSignCount,
            credentialID: credentialID,
            userHandle: userHandle
        )
    }

    func expectRefusal(
        _ code: WebAuthnError.Code,
        _ authenticator: SoftwareAuthenticator,
        policy: WebAuthnPolicy? = nil,
        previousSignCount: UInt32 = 0,
        credentialID: [UInt8]? = nil,
        userHandle: [UInt8]? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(throws: WebAuthnError(code: code, reason: ""), sourceLocation: sourceLocation) {
            _ = try self.authenticate(
                authenticator,
                policy: policy,
                previousSignCount: previousSignCount,
                credentialID: credentialID,
                userHandle: userHandle
            )
        }
    }

    @Test("a valid assertion verifies and reports its flags and count")
    func valid() throws {
        var authenticator = SoftwareAuthenticator()
        authenticator.signCount = 5
        authenticator.flags |= 0x08 | 0x10
        authenticator.userHandle = Array("user-1".utf8)
        let result = try self.authenticate(
            authenticator,
            previousSignCount: 4,
            credentialID: authenticator.credentialID,
            userHandle: Array("user-1".utf8)
        )
        #expect(result.signCount == 5 && result.userVerified && result.backupEligible && result.backedUp)
        #expect(result.credentialID == authenticator.credentialID && result.userHandle == Array("user-1".utf8))
    }

    @Test("clientDataJSON's type must be webauthn.get")
    func type() {
        var authenticator = SoftwareAuthenticator()
        authenticator.clientDataType = "webauthn.create"
        self.expectRefusal(.typeMismatch, authenticator)
    }

    @Test("the challenge must be the expected one")
    func challenge() {
        var authenticator = SoftwareAuthenticator()
        authenticator.challenge[0] ^= 0x80
        self.expectRefusal(.challengeMismatch, authenticator)
    }

    @Test("the origin must be an allowed one")
    func origin() {
        var authenticator = SoftwareAuthenticator()
        authenticator.origin = "https://example.com:8443"
        self.expectRefusal(.originNotAllowed, authenticator)
    }

    @Test("crossOrigin: true is refused by default")
    func crossOrigin() {
        var authenticator = SoftwareAuthenticator()
        authenticator.clientDataExtra = #","crossOrigin":true"#
        self.expectRefusal(.crossOriginNotAllowed, authenticator)
    }

    @Test("topOrigin is refused unless allowed")
    func topOrigin() {
        var authenticator = SoftwareAuthenticator()
        authenticator.clientDataExtra = #","topOrigin":"https://top.example""#
        self.expectRefusal(.topOriginNotAllowed, authenticator)
    }

    @Test("rpIdHash must be SHA-256 of the RP id")
    func rpIDHash() {
        var authenticator = SoftwareAuthenticator()
        authenticator.rpIDHash = Array(SHA256.hash(data: Array("example.org".utf8)))
        self.expectRefusal(.rpIDMismatch, authenticator)
    }

    @Test("the UP flag must be set")
    func userPresent() {
        var authenticator = SoftwareAuthenticator()
        authenticator.flags &= ~0x01
        self.expectRefusal(.userNotPresent, authenticator)
    }

    @Test("UV is required only when the policy requires it")
    func userVerified() throws {
        var authenticator = SoftwareAuthenticator()
        authenticator.flags &= ~0x04
        #expect(try !self.authenticate(authenticator).userVerified)
        self.expectRefusal(.userNotVerified, authenticator, policy: authenticator.policy(requireUserVerification: true))
    }

    @Test("BS without BE is refused")
    func backupState() {
        var authenticator = SoftwareAuthenticator()
        authenticator.flags |= 0x10
        self.expectRefusal(.backupStateInvalid, authenticator)
    }

    @Test("the signature must verify with the stored key")
    func signature() {
        var authenticator = SoftwareAuthenticator()
        let other = SoftwareAuthenticator()
        authenticator.signatureOverride = Array(
            try! other.credentialKey.signature(for: authenticator.authenticatorData(attested: false)).derRepresentation
        )
        self.expectRefusal(.signatureInvalid, authenticator)
    }

    @Test("a signature that is not DER is invalid, not a crash")
    func signatureGarbage() {
        var authenticator = SoftwareAuthenticator()
        authenticator.signatureOverride = [0x30, 0x02, 0x01]
        self.expectRefusal(.signatureInvalid, authenticator)
    }

    @Test("the sign count: greater is accepted, equal or lower refused, 0 after 0 accepted")
    func signCount() throws {
        var authenticator = SoftwareAuthenticator()
        authenticator.signCount = 0
        #expect(try self.authenticate(authenticator, previousSignCount: 0).signCount == 0)
        self.expectRefusal(.signCountNotIncreasing, authenticator, previousSignCount: 7)
        authenticator.signCount = 7
        self.expectRefusal(.signCountNotIncreasing, authenticator, previousSignCount: 7)
        authenticator.signCount = 8
        #expect(try self.authenticate(authenticator, previousSignCount: 7).signCount == 8)
    }

    @Test("the userHandle, when returned, must be the credential's user")
    func userHandle() throws {
        var authenticator = SoftwareAuthenticator()
        authenticator.userHandle = Array("user-2".utf8)
        self.expectRefusal(.userHandleMismatch, authenticator, userHandle: Array("user-1".utf8))
        // Without an expected user, a returned handle is reported, not judged.
        #expect(try self.authenticate(authenticator).userHandle == Array("user-2".utf8))
    }

    @Test("rawId must be the expected credential id when one is given")
    func credentialID() {
        let authenticator = SoftwareAuthenticator()
        self.expectRefusal(.credentialIDMismatch, authenticator, credentialID: Array(repeating: 9, count: 32))
    }

    @Test("the stored key's algorithm must still be accepted by the policy")
    func algorithm() {
        let authenticator = SoftwareAuthenticator()
        var policy = authenticator.policy()
        policy.credentialAlgorithms = [.rs256]
        self.expectRefusal(.algorithmNotAllowed, authenticator, policy: policy)
    }

    @Test("base64 with padding and the standard alphabet is accepted in binary fields")
    func standardBase64() throws {
        let authenticator = SoftwareAuthenticator()
        let verifier = try WebAuthnVerifier(policy: authenticator.policy())
        var json = String(decoding: authenticator.authenticationJSON(), as: UTF8.self)
        let signature = try #require(Self.member("signature", in: json))
        let bytes = try #require(WebAuthnBase64.decode(signature))
        json = json.replacingOccurrences(of: signature, with: Self.standardBase64(bytes))
        let result = try verifier.verifyAuthentication(
            AuthenticationResponse(json: Array(json.utf8)),
            publicKey: CredentialPublicKey(cborEncoded: authenticator.cosePublicKey),
            challenge: authenticator.challenge,
            previousSignCount: 0
        )
        #expect(result.userVerified)
    }

    static func member(_ name: String, in json: String) -> String? {
        guard let start = json.range(of: "\"\(name)\":\"")?.upperBound, let end = json[start...].firstIndex(of: "\"") else {
            return nil
        }
        return String(json[start..<end])
    }

    static func standardBase64(_ bytes: [UInt8]) -> String {
        var text = WebAuthnBase64.encode(bytes).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.utf8.count % 4 != 0 { text += "=" }
        return text
    }
}
