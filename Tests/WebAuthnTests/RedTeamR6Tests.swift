//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CBOR
import Crypto
import Foundation
import Testing
import WebAuthn
import _CryptoExtras

/// The verifier's fixes for the sixth red team's findings on passkeys (docs/reliability.md).
struct RedTeamR6Tests {
    /// A COSE OKP key (kty 1, alg EdDSA, crv Ed25519) with `x`.
    static func ed25519COSE(_ x: [UInt8]) -> [UInt8] {
        var serializer = CBORSerializer()
        try! serializer.appendMap([
            (.integer(1), { $0.appendInteger(1) }),
            (.integer(3), { $0.appendInteger(-8) }),
            (.integer(-1), { $0.appendInteger(6) }),
            (.integer(-2), { $0.appendByteString(x) }),
        ])
        return serializer.bytes
    }

    static let identity = [0x01] + [UInt8](repeating: 0, count: 31)

    @Test("R6-F2: BoringSSL's Ed25519 verification takes R = identity, S = 0 as a signature of anything by the identity key")
    func identityForgery() throws {
        // Why the key must be refused: with it, one constant "signature" verifies every message.
        let key = try Curve25519.Signing.PublicKey(rawRepresentation: Self.identity)
        let forged = Self.identity + [UInt8](repeating: 0, count: 32)
        #expect(key.isValidSignature(forged, for: Array("transfer 100.00 to mallory".utf8)))
        #expect(key.isValidSignature(forged, for: Array("transfer 200.00 to mallory".utf8)))
    }

    @Test(
        "R6-F2: an Ed25519 credential key of small order is refused (passkey_invalid_public_key), with either sign bit",
        arguments: [
            [UInt8](repeating: 0, count: 32),
            identity,
            [0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98, 0xf0]
                + [0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53, 0xfc, 0x05],
            [0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67, 0x0f]
                + [0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac, 0x03, 0x7a],
            [0xec] + [UInt8](repeating: 0xff, count: 30) + [0x7f],
            [0xed] + [UInt8](repeating: 0xff, count: 30) + [0x7f],
            [0xee] + [UInt8](repeating: 0xff, count: 30) + [0x7f],
        ]
    )
    func smallOrderKeys(encoding: [UInt8]) throws {
        for x in [encoding, Array(encoding.dropLast()) + [encoding[31] | 0x80]] {
            // Only keys BoringSSL takes as a point are in question: the check is what refuses them.
            guard (try? Curve25519.Signing.PublicKey(rawRepresentation: x)) != nil else { continue }
            #expect(throws: WebAuthnError(code: .invalidPublicKey, reason: "")) {
                _ = try CredentialPublicKey(cborEncoded: Self.ed25519COSE(x))
            }
        }
    }

    @Test("R6-F2: a genuine Ed25519 key is still accepted, and verifies its signatures")
    func genuineEd25519() throws {
        let key = Curve25519.Signing.PrivateKey()
        let parsed = try CredentialPublicKey(cborEncoded: Self.ed25519COSE(Array(key.publicKey.rawRepresentation)))
        let message = Array("a form".utf8)
        #expect(parsed.algorithm == .edDSA)
        #expect(parsed.isValidSignature(Array(try key.signature(for: message)), for: message))
    }

    @Test("R6-F3: a registration whose credential id is empty is refused (passkey_malformed_authenticator_data)")
    func emptyCredentialID() async {
        var authenticator = SoftwareAuthenticator()
        authenticator.credentialID = []
        await #expect(throws: WebAuthnError(code: .malformedAuthenticatorData, reason: "")) {
            let verifier = try WebAuthnVerifier(policy: authenticator.policy())
            _ = try await verifier.verifyRegistration(
                json: authenticator.registrationJSON(), challenge: authenticator.challenge, at: SoftwareAuthenticator.now)
        }
        // One byte is a credential id (WebAuthn sets no minimum for relying parties).
        authenticator.credentialID = [7]
        let verifier = try? WebAuthnVerifier(policy: authenticator.policy())
        let registered = try? await verifier?.verifyRegistration(
            json: authenticator.registrationJSON(), challenge: authenticator.challenge, at: SoftwareAuthenticator.now)
        #expect(registered?.credentialID == [7])
    }

    @Test("R6-F8: an assertion's BE flag must be the one the credential was registered with")
    func backupEligibility() throws {
        var authenticator = SoftwareAuthenticator()
        let verifier = try WebAuthnVerifier(policy: authenticator.policy())
        func verify(registeredBE: Bool?) throws(WebAuthnError) -> VerifiedAuthentication {
            try verifier.verifyAuthentication(
                AuthenticationResponse(json: authenticator.authenticationJSON()),
                publicKey: CredentialPublicKey(cborEncoded: authenticator.cosePublicKey),
                challenge: authenticator.challenge, previousSignCount: 0, backupEligible: registeredBE)
        }
        // Device-bound (BE clear) as registered: accepted; registered synced: refused.
        #expect(try verify(registeredBE: false).backupEligible == false)
        #expect(throws: WebAuthnError(code: .backupStateInvalid, reason: "")) { _ = try verify(registeredBE: true) }
        // A synced passkey (BE, BS) as registered: accepted; registered device-bound: refused.
        authenticator.flags |= 0x08 | 0x10
        #expect(try verify(registeredBE: true).backupEligible == true)
        #expect(throws: WebAuthnError(code: .backupStateInvalid, reason: "")) { _ = try verify(registeredBE: false) }
        // Without a record (the command line), the flags are reported as they are.
        #expect(try verify(registeredBE: nil).backupEligible == true)
    }

    @Test("R6-F10: RS1 (SHA-1) signs a packed x5c statement no more: refused (passkey_algorithm_not_allowed); RS256 by the same key is accepted")
    func packedRS1() async throws {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        var authenticator = SoftwareAuthenticator()
        authenticator.format = .packedX5C
        authenticator.packedX5CRSA = (key, -257)
        let verifier = try WebAuthnVerifier(policy: authenticator.policy())
        let registered = try await verifier.verifyRegistration(
            json: authenticator.registrationJSON(), challenge: authenticator.challenge, at: SoftwareAuthenticator.now)
        #expect(registered.format == .packed)
        authenticator.packedX5CRSA = (key, -65535)
        await #expect(throws: WebAuthnError(code: .algorithmNotAllowed, reason: "")) {
            _ = try await verifier.verifyRegistration(
                json: authenticator.registrationJSON(), challenge: authenticator.challenge, at: SoftwareAuthenticator.now)
        }
    }

    @Test("R6-F11: relying party ids and origins that no client can match are named; those that can pass")
    func settings() {
        for good in ["bank.example", "localhost", "a-b.example.co", "x1.example"] {
            #expect(WebAuthnPolicy.problem(relyingPartyID: good) == nil, "\(good)")
        }
        for bad in [
            "", "https://bank.example/", "Bank.Example", "bank.example.", ".bank.example", "bank..example", "127.0.0.1", "bank.example:443",
            "-bank.example", "bank_x.example", "bänk.example",
        ] {
            #expect(WebAuthnPolicy.problem(relyingPartyID: bad) != nil, "\(bad)")
        }
        for good in [
            "https://bank.example", "https://app.bank.example", "https://bank.example:8443", "http://localhost:8080", "http://localhost",
            "android:apk-key-hash:AbC-_1",
        ] {
            #expect(WebAuthnPolicy.problem(origin: good, relyingPartyID: good.contains("localhost") ? "localhost" : "bank.example") == nil, "\(good)")
        }
        for bad in [
            "bank.example", "https://bank.example/", "https://Bank.Example", "https://evil.example", "https://notbank.example", "http://bank.example",
            "https://bank.example:443", "https://bank.example:0", "https://bank.example:65536", "https://bank.example:08443",
            "https://bank.example/path",
            "https://user@bank.example", "android:apk-key-hash:", "android:apk-key-hash:a/b", "ftp://bank.example",
        ] {
            #expect(WebAuthnPolicy.problem(origin: bad, relyingPartyID: "bank.example") != nil, "\(bad)")
        }
    }
}
