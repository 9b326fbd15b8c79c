//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import CBOR
import CanonicalJSON
import Crypto
import FormAttestForm
import FormAttestTestSupport
import FormAttestTokens
import Foundation
import JWTKit
import Testing

struct TokenTests {
    static func verifiedSample() async throws -> (RealSample, VerifiedAttestation) {
        let sample = try RealSample.named("uebelack_production")
        let verifier = try AppAttestVerifier(policy: AppAttestPolicy(appIDs: [sample.appID], environments: [.production]))
        let verified = try await verifier.verifyAttestation(
            try #require(sample.attestation),
            keyID: try #require(sample.keyID),
            clientDataHash: try #require(sample.clientDataHash),
            at: try #require(sample.validAt)
        )
        return (sample, verified)
    }

    @Test("the FIDO2 wrapper carries the original untouched and Apple's own COSE key bytes")
    func wrapper() async throws {
        let (sample, verified) = try await Self.verifiedSample()
        let attestation = try #require(sample.attestation)
        let wrapper = FIDO2Wrapper.make(
            credential: AttestedCredential(verified),
            attestationObject: attestation,
            clientDataHash: try #require(sample.clientDataHash),
            counter: 0,
            verifiedAt: try #require(sample.validAt)
        )
        let credential = try #require(wrapper["credential"])
        let credentialData = try #require(verified.authenticatorData.attestedCredentialData)
        let appleCOSE = Array(verified.authenticatorData.rawValue[credentialData.publicKeyRange])
        let publicKey = try #require(credential["publicKey"]?.stringValue)
        #expect(Base64URL.decode(publicKey) == appleCOSE)
        let original = try #require(wrapper["original"]?["attestationObject"]?.stringValue)
        #expect(Base64URL.decode(original) == attestation)
        #expect(credential["aaguid"]?.stringValue == "61707061-7474-6573-7400-000000000000")
        #expect(credential["id"]?.stringValue == Base64URL.encode(try #require(sample.keyID)))
        // No claims the data does not support.
        for invented in ["flags", "userPresent", "userVerified", "uv", "up", "attStmt"] {
            #expect(credential[invented] == nil && wrapper[invented] == nil)
        }
        // Canonical serialization is a fixed point.
        #expect(try CanonicalJSON.canonicalize(wrapper.canonicalBytes) == wrapper.canonicalBytes)
    }

    @Test("the kid is the RFC 7638 thumbprint, computed here from the JWK's required members")
    func thumbprint() throws {
        let key = P256.Signing.PrivateKey().publicKey
        let point = Array(key.x963Representation)
        let text = #"{"crv":"P-256","kty":"EC","x":"\#(Base64URL.encode(point[1..<33]))","y":"\#(Base64URL.encode(point[33..<65]))"}"#
        #expect(SigningKeys.thumbprint(key) == Base64URL.encode(SHA256.hash(data: Array(text.utf8))))
    }

    @Test(
        "a form signed by a passkey too: the JWS's amr and passkey claims state it, verify through jwt-kit, and follow UV and BE",
        arguments: [
            (true, false, ["hwk", "user", "mfa"]), (false, false, ["hwk", "user"]), (true, true, ["hwk", "swk", "user", "mfa"]),
        ] as [(Bool, Bool, [String])])
    func passkeyClaims(userVerified: Bool, backupEligible: Bool, amr: [String]) async throws {
        let (sample, verified) = try await Self.verifiedSample()
        let keys = SigningKeys(current: P256.Signing.PrivateKey())
        let signer = ServerAttestationSigner(keys: keys, issuer: "https://bank.example", audience: "payments")
        let passkey = PasskeyFactor(
            credentialID: [1, 2, 3], userVerified: userVerified, backupEligible: backupEligible, backedUp: backupEligible, signCount: 0)
        let token = try signer.sign(
            username: "alice", credential: AttestedCredential(verified), formHash: try #require(sample.clientDataHash), counter: 7, now: Date(),
            passkey: passkey)
        let verifiers = JWTKeyCollection()
        try await verifiers.add(jwksJSON: String(decoding: keys.jwks.canonicalBytes, as: UTF8.self))
        let claims = try await verifiers.verify(token, as: ServerAttestationClaims.self)
        #expect(claims.methodReferences == amr)
        #expect(claims.passkey == passkey)
        // The member-by-member payload is the Codable encoding, and the bytes RFC 8785.
        let payload = try #require(Base64URL.decode(String(token.split(separator: ".")[1])))
        #expect(try CanonicalJSON.canonicalize(payload) == payload)
        #expect(try CanonicalJSON.parse(payload)["passkey"]?["cred_id"]?.stringValue == "AQID")
        // Without a passkey: neither claim.
        let plain = try signer.sign(
            username: "alice", credential: AttestedCredential(verified), formHash: try #require(sample.clientDataHash), counter: 7, now: Date())
        let plainClaims = try await verifiers.verify(plain, as: ServerAttestationClaims.self)
        #expect(plainClaims.methodReferences == nil && plainClaims.passkey == nil)
    }

    @Test("the JWS verifies with the JWKS through jwt-kit, carries every claim, and fails when altered")
    func jws() async throws {
        let (sample, verified) = try await Self.verifiedSample()
        let keys = SigningKeys(current: P256.Signing.PrivateKey())
        let signer = ServerAttestationSigner(keys: keys, issuer: "https://bank.example", audience: "payments")
        let now = Date()
        let token = try signer.sign(
            username: "alice",
            credential: AttestedCredential(verified),
            formHash: try #require(sample.clientDataHash),
            counter: 7,
            now: now
        )
        let verifiers = JWTKeyCollection()
        try await verifiers.add(jwksJSON: String(decoding: keys.jwks.canonicalBytes, as: UTF8.self))
        let claims = try await verifiers.verify(token, as: ServerAttestationClaims.self)
        #expect(claims.subject.value == "alice")
        #expect(claims.issuer.value == "https://bank.example")
        #expect(claims.audience.value == ["payments"])
        #expect(claims.counter == 7)
        #expect(claims.appID == sample.appID)
        #expect(claims.environment == "production")
        #expect(claims.keyID == Base64URL.encode(try #require(sample.keyID)))
        #expect(claims.formHash == Base64URL.encode(try #require(sample.clientDataHash)))
        #expect(abs(claims.expiration.value.timeIntervalSince(now) - 300) < 1)
        let point = Array(verified.publicKey.x963Representation)
        #expect(claims.confirmation.jwk.x == Base64URL.encode(point[1..<33]))
        let header = try #require(Base64URL.decode(String(token.split(separator: ".")[0])))
        let headerJSON = try CanonicalJSON.parse(header)
        #expect(headerJSON["kid"]?.stringValue == keys.currentKeyID)
        #expect(headerJSON["typ"]?.stringValue == ServerAttestationSigner.tokenType)
        #expect(headerJSON["alg"]?.stringValue == "ES256")
        // Header and claims are RFC 8785 bytes, times whole NumericDate seconds.
        #expect(headerJSON.canonicalBytes == header)
        let payload = try #require(Base64URL.decode(String(token.split(separator: ".")[1])))
        let payloadJSON = try CanonicalJSON.parse(payload)
        #expect(payloadJSON.canonicalBytes == payload)
        #expect(payloadJSON["iat"] == .number(now.timeIntervalSince1970.rounded(.down)))
        #expect(payloadJSON["exp"] == .number(now.timeIntervalSince1970.rounded(.down) + 300))
        // The signer builds the claims' JSON member by member; Codable's encoding of the same claims
        // is the reference it must equal, byte for byte.
        #expect(claims.jsonValue == (try JSONValueEncoder(dateEncoding: .numericDate).encode(claims)))
        #expect(claims.jsonValue.canonicalBytes == payload)

        var altered = Array(token.utf8)
        let index = token.split(separator: ".")[0].count + 5
        altered[index] = altered[index] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        await #expect(throws: (any Error).self) {
            _ = try await verifiers.verify(String(decoding: altered, as: UTF8.self), as: ServerAttestationClaims.self)
        }
    }

    @Test("signing keys: created 0600 on first use; rotation keeps the previous key in the JWKS")
    func keyDirectory() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keys-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let keys = SigningKeyDirectory(directory: directory)
        let first = try keys.loadOrCreate()
        let mode = try FileManager.default.attributesOfItem(atPath: keys.currentKeyFile.path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        #expect(try keys.loadOrCreate().currentKeyID == first.currentKeyID)
        let rotated = try keys.rotate()
        #expect(rotated.currentKeyID != first.currentKeyID)
        #expect(rotated.previous.map(SigningKeys.thumbprint) == [first.currentKeyID])
        guard case .array(let published) = rotated.jwks["keys"] else {
            Issue.record("no keys array")
            return
        }
        #expect(published.compactMap { $0["kid"]?.stringValue } == [rotated.currentKeyID, first.currentKeyID])
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasPrefix(".") }
        #expect(leftovers.isEmpty)
    }

    @Test("packed-like is marked invalid, never claims fmt packed, and comes only when asked for")
    func packedLike() async throws {
        let (sample, verified) = try await Self.verifiedSample()
        let input = TokenFormatter.Input(
            credential: AttestedCredential(verified),
            attestationObject: try #require(sample.attestation),
            authenticatorData: verified.authenticatorData.rawValue,
            clientDataHash: try #require(sample.clientDataHash),
            counter: 0,
            verifiedAt: Date(),
            username: "alice"
        )
        let formatter = TokenFormatter(signer: nil)
        let defaults = try await formatter.formats([.fido2], for: input)
        #expect(defaults["packedLikeUnsafe"] == nil)
        let unsafe = try await formatter.formats([.packedLikeUnsafe], for: input)
        let document = try #require(unsafe["packedLikeUnsafe"])
        #expect(document["valid"] == .bool(false))
        #expect(document["warning"]?.stringValue?.hasPrefix("TEST ONLY") == true)
        let encoded = try #require(document["attestationObject"]?.stringValue)
        let cbor = try CBORDecoder.decode(try #require(Base64URL.decode(encoded)))
        #expect(cbor[textKey: "fmt"]?.textString == "packed-like-unsafe-test-only")
        await #expect(throws: TokenFormatter.MissingSigner.self) { _ = try await formatter.formats([.jws], for: input) }
    }
}
