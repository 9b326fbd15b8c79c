//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
import Foundation
import SwiftASN1
import Testing
import WebAuthn
import X509

/// §7.1, one check per test: each starts from a valid registration and changes exactly one thing.
struct RegistrationTests {
    func register(
        _ authenticator: SoftwareAuthenticator,
        policy: WebAuthnPolicy? = nil,
        at time: Date = SoftwareAuthenticator.now
    ) async throws(WebAuthnError) -> VerifiedRegistration {
        let verifier = try WebAuthnVerifier(policy: policy ?? authenticator.policy())
        return try await verifier.verifyRegistration(
            json: authenticator.registrationJSON(),
            challenge: SoftwareAuthenticator().challenge,
            at: time
        )
    }

    func expectRefusal(
        _ code: WebAuthnError.Code,
        _ authenticator: SoftwareAuthenticator,
        policy: WebAuthnPolicy? = nil,
        at time: Date = SoftwareAuthenticator.now,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        await #expect(throws: WebAuthnError(code: code, reason: ""), sourceLocation: sourceLocation) {
            _ = try await self.register(authenticator, policy: policy, at: time)
        }
    }

    @Test(
        "each implemented format verifies, unanchored and anchored",
        arguments: [SoftwareAuthenticator.Format.none, .packedSelf, .packedX5C, .fidoU2F, .apple]
    )
    func formats(_ format: SoftwareAuthenticator.Format) async throws {
        var authenticator = SoftwareAuthenticator()
        authenticator.format = format
        let unanchored = try await self.register(authenticator)
        let anchored = try await self.register(authenticator, policy: authenticator.policy(anchored: true))
        let hasCertificates = [.packedX5C, .fidoU2F, .apple].contains(format)
        #expect(unanchored.attestationAnchored == (hasCertificates ? false : nil))
        #expect(anchored.attestationAnchored == (hasCertificates ? true : nil))
        #expect(unanchored.credentialID == authenticator.credentialID)
        #expect(unanchored.publicKey.cborEncoded == authenticator.cosePublicKey)
        #expect(unanchored.userVerified && !unanchored.backupEligible && !unanchored.backedUp)
        #expect(unanchored.transports == ["internal", "hybrid"] && unanchored.authenticatorAttachment == "platform")
    }

    @Test("clientDataJSON's type must be webauthn.create")
    func type() async {
        var authenticator = SoftwareAuthenticator()
        authenticator.clientDataType = "webauthn.get"
        await self.expectRefusal(.typeMismatch, authenticator)
    }

    @Test("the challenge must be the one issued")
    func challenge() async {
        var authenticator = SoftwareAuthenticator()
        authenticator.challenge[31] ^= 0x01
        await self.expectRefusal(.challengeMismatch, authenticator)
    }

    @Test("a challenge that is not base64url is a mismatch")
    func challengeNotBase64() async {
        var authenticator = SoftwareAuthenticator()
        authenticator.challengeText = "not base64!"
        await self.expectRefusal(.challengeMismatch, authenticator)
    }

    @Test("the origin must be an allowed one")
    func origin() async {
        var authenticator = SoftwareAuthenticator()
        authenticator.origin = "https://evil.example"
        await self.expectRefusal(.originNotAllowed, authenticator)
    }

    @Test("crossOrigin: true is refused unless the policy allows it")
    func crossOrigin() async throws {
        var authenticator = SoftwareAuthenticator()
        authenticator.clientDataExtra = #","crossOrigin":true"#
        await self.expectRefusal(.crossOriginNotAllowed, authenticator)
        var policy = authenticator.policy()
        policy.allowCrossOrigin = true
        _ = try await self.register(authenticator, policy: policy)
    }

    @Test("topOrigin is refused unless it is an allowed top origin")
    func topOrigin() async throws {
        var authenticator = SoftwareAuthenticator()
        authenticator.clientDataExtra = #","topOrigin":"https://top.example""#
        await self.expectRefusal(.topOriginNotAllowed, authenticator)
        var policy = authenticator.policy()
        policy.allowedTopOrigins = ["https://top.example"]
        _ = try await self.register(authenticator, policy: policy)
    }

    @Test("clientDataJSON with a duplicate member is malformed")
    func duplicateMember() async {
        var authenticator = SoftwareAuthenticator()
        authenticator.clientDataExtra = #","origin":"https://example.com""#
        await self.expectRefusal(.malformedClientData, authenticator)
    }

    @Test("crossOrigin of another type than boolean is malformed")
    func crossOriginType() async {
        var authenticator = SoftwareAuthenticator()
        authenticator.clientDataExtra = #","crossOrigin":"false""#
        await self.expectRefusal(.malformedClientData, authenticator)
    }

    @Test("rpIdHash must be SHA-256 of the RP id")
    func rpIDHash() async {
        var authenticator = SoftwareAuthenticator()
        authenticator.rpIDHash = Array(SHA256.hash(data: Array("evil.example".utf8)))
        await self.expectRefusal(.rpIDMismatch, authenticator)
    }

    @Test("the UP flag must be set")
    func userPresent() async {
        var authenticator = SoftwareAuthenticator()
        authenticator.flags &= ~0x01
        await self.expectRefusal(.userNotPresent, authenticator)
    }

    @Test("the UV flag is required when the policy says so")
    func userVerified() async throws {
        var authenticator = SoftwareAuthenticator()
        authenticator.flags &= ~0x04
        _ = try await self.register(authenticator)
        await self.expectRefusal(.userNotVerified, authenticator, policy: authenticator.policy(requireUserVerification: true))
    }

    @Test("BS without BE is refused; BE with or without BS is accepted")
    func backupFlags() async throws {
        var authenticator = SoftwareAuthenticator()
        authenticator.flags |= 0x08
        let eligible = try await self.register(authenticator)
        authenticator.flags |= 0x10
        let backedUp = try await self.register(authenticator)
        #expect(eligible.backupEligible && !eligible.backedUp && backedUp.backedUp)
        authenticator.flags &= ~0x08
        await self.expectRefusal(.backupStateInvalid, authenticator)
    }

    @Test("rawId must be the credential id of the authenticator data")
    func rawID() async {
        var authenticator = SoftwareAuthenticator()
        authenticator.rawID = Array(repeating: 1, count: 32)
        await self.expectRefusal(.credentialIDMismatch, authenticator)
    }

    @Test("a credential id of 1023 bytes is accepted, 1024 is refused")
    func credentialIDLength() async throws {
        var authenticator = SoftwareAuthenticator()
        authenticator.credentialID = Array(repeating: 0x11, count: 1023)
        _ = try await self.register(authenticator)
        authenticator.credentialID = Array(repeating: 0x11, count: 1024)
        await self.expectRefusal(.credentialIDTooLong, authenticator)
    }

    @Test("the credential's algorithm must be one the policy accepts")
    func algorithmPolicy() async {
        let authenticator = SoftwareAuthenticator()
        var policy = authenticator.policy()
        policy.credentialAlgorithms = [.edDSA]
        await self.expectRefusal(.algorithmNotAllowed, authenticator, policy: policy)
    }

    @Test("a packed self attestation must verify with the credential key")
    func packedSelfSignature() async {
        var authenticator = SoftwareAuthenticator()
        authenticator.format = .packedSelf
        authenticator.corruptAttestationSignature = true
        await self.expectRefusal(.attestationSignatureInvalid, authenticator)
    }

    @Test("a packed x5c attestation must verify with the certificate's key")
    func packedX5CSignature() async {
        var authenticator = SoftwareAuthenticator()
        authenticator.format = .packedX5C
        authenticator.corruptAttestationSignature = true
        await self.expectRefusal(.attestationSignatureInvalid, authenticator)
    }

    @Test("a packed certificate's OU must be \"Authenticator Attestation\"")
    func packedSubject() async throws {
        var authenticator = SoftwareAuthenticator()
        authenticator.format = .packedX5C
        authenticator.attestationSubject = try DistinguishedName {
            CountryName("SE")
            OrganizationName("Test Vendor")
            OrganizationalUnitName("Something Else")
            CommonName("Test Authenticator")
        }
        await self.expectRefusal(.attestationCertificateInvalid, authenticator)
    }

    @Test("a packed certificate must not be a CA")
    func packedBasicConstraints() async {
        var authenticator = SoftwareAuthenticator()
        authenticator.format = .packedX5C
        authenticator.attestationIsCA = true
        await self.expectRefusal(.attestationCertificateInvalid, authenticator)
    }

    @Test("the certificate's AAGUID extension must equal authData's aaguid")
    func packedAAGUID() async {
        var authenticator = SoftwareAuthenticator()
        authenticator.format = .packedX5C
        authenticator.attestationExtensions = [
            Certificate.Extension(oid: [1, 3, 6, 1, 4, 1, 45724, 1, 1, 4], critical: false, value: [0x04, 0x10] + Array(repeating: 0xB8, count: 16))
        ]
        await self.expectRefusal(.aaguidMismatch, authenticator)
    }

    @Test("the AAGUID extension must not be critical")
    func packedAAGUIDCritical() async {
        var authenticator = SoftwareAuthenticator()
        authenticator.format = .packedX5C
        authenticator.attestationExtensions = [
            Certificate.Extension(oid: [1, 3, 6, 1, 4, 1, 45724, 1, 1, 4], critical: true, value: [0x04, 0x10] + authenticator.aaguid[...])
        ]
        await self.expectRefusal(.attestationCertificateInvalid, authenticator)
    }

    @Test("a fido-u2f signature must verify with the certificate's key")
    func fidoU2FSignature() async {
        var authenticator = SoftwareAuthenticator()
        authenticator.format = .fidoU2F
        authenticator.corruptAttestationSignature = true
        await self.expectRefusal(.attestationSignatureInvalid, authenticator)
    }

    @Test("apple: the nonce must be SHA-256(authData ‖ clientDataHash)")
    func appleNonce() async {
        var authenticator = SoftwareAuthenticator()
        authenticator.format = .apple
        authenticator.appleNonceOverride = Array(repeating: 0x42, count: 32)
        await self.expectRefusal(.nonceMismatch, authenticator)
    }

    @Test("certificates are checked at the given time")
    func certificateTimes() async {
        var authenticator = SoftwareAuthenticator()
        authenticator.format = .fidoU2F
        await self.expectRefusal(.certificateExpired, authenticator, at: Date(timeIntervalSince1970: 2_100_000_000))
        await self.expectRefusal(.certificateNotYetValid, authenticator, at: Date(timeIntervalSince1970: 1_600_000_000))
    }

    @Test("with trust anchors, a chain that reaches none of them is refused")
    func otherAnchor() async {
        var authenticator = SoftwareAuthenticator()
        authenticator.format = .packedX5C
        var policy = authenticator.policy()
        policy.trustAnchors = [SoftwareAuthenticator.AttestationCA().root]
        await self.expectRefusal(.certificateChainInvalid, authenticator, policy: policy)
    }

    @Test(
        "an unknown format is refused as unsupported; tpm and android-key with another format's statement as malformed",
        arguments: [
            ("android-safetynet", WebAuthnError.Code.unsupportedFormat), ("x", .unsupportedFormat), ("TPM", .unsupportedFormat),
            ("tpm", .malformedAttestation), ("android-key", .malformedAttestation),
        ]
    )
    func unsupportedFormat(name: String, code: WebAuthnError.Code) async throws {
        let authenticator = SoftwareAuthenticator()
        let verifier = try WebAuthnVerifier(policy: authenticator.policy())
        let json = String(decoding: authenticator.registrationJSON(), as: UTF8.self)
        // "none" is encoded as the CBOR text 64 6E 6F 6E 65; rebuild the object with another fmt.
        let object = try #require(Self.attestationObject(in: json))
        let renamed = Self.replacingFormat(in: object, with: name)
        let changed = json.replacingOccurrences(of: WebAuthnBase64.encode(object), with: WebAuthnBase64.encode(renamed))
        await #expect(throws: WebAuthnError(code: code, reason: "")) {
            _ = try await verifier.verifyRegistration(
                json: Array(changed.utf8), challenge: authenticator.challenge, at: SoftwareAuthenticator.now)
        }
    }

    @Test("a policy without RP id, origin or algorithm is refused")
    func invalidPolicy() {
        for policy in [
            WebAuthnPolicy(relyingPartyID: "", allowedOrigins: ["https://example.com"]),
            WebAuthnPolicy(relyingPartyID: "example.com", allowedOrigins: []),
            WebAuthnPolicy(relyingPartyID: "example.com", allowedOrigins: ["https://example.com"], credentialAlgorithms: []),
        ] {
            #expect(throws: WebAuthnError(code: .invalidPolicy, reason: "")) { _ = try WebAuthnVerifier(policy: policy) }
        }
    }

    static func attestationObject(in json: String) -> [UInt8]? {
        guard let start = json.range(of: #""attestationObject":""#)?.upperBound,
            let end = json[start...].firstIndex(of: "\"")
        else { return nil }
        return WebAuthnBase64.decode(String(json[start..<end]))
    }

    /// The attestation object with `fmt` replaced (a `none` object: `{fmt, attStmt: {}, authData}`).
    static func replacingFormat(in object: [UInt8], with name: String) -> [UInt8] {
        let old: [UInt8] = [0x64] + Array("none".utf8)
        let new: [UInt8] = [0x60 | UInt8(name.utf8.count)] + Array(name.utf8)
        guard let index = (0...(object.count - old.count)).first(where: { Array(object[$0..<($0 + old.count)]) == old }) else {
            return object
        }
        return Array(object[..<index]) + new + Array(object[(index + old.count)...])
    }
}
