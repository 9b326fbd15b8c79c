//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Crypto
import FormAttestForm
public import Foundation
import _CryptoExtras

/// An identity provider the tests own: its keys, its JWKS, and tokens built byte by byte (so
/// that a test can also build the ones a provider never would: `alg: none`, duplicate claims).
public struct TestIdentityProvider: Sendable {
    public static let issuer = "https://idp.bank.example"
    public static let audience = "formattest"

    public let ec = P256.Signing.PrivateKey()
    public let ed = Curve25519.Signing.PrivateKey()
    let rsa: _RSA.Signing.PrivateKey

    public init() throws {
        self.rsa = try _RSA.Signing.PrivateKey(keySize: .bits2048)
    }

    /// The provider's JWKS: `ec1` (ES256), `ed1` (EdDSA, no alg), `rsa1` (RS256).
    public func jwks() throws -> [UInt8] {
        let point = Array(self.ec.publicKey.x963Representation)
        let rsa = try self.rsa.publicKey.getKeyPrimitives()
        let keys: [[String: String]] = [
            [
                "kty": "EC", "crv": "P-256", "x": Base64URL.encode(point[1..<33]), "y": Base64URL.encode(point[33...]), "kid": "ec1", "alg": "ES256",
                "use": "sig",
            ],
            ["kty": "OKP", "crv": "Ed25519", "x": Base64URL.encode(self.ed.publicKey.rawRepresentation), "kid": "ed1", "use": "sig"],
            [
                "kty": "RSA", "n": Base64URL.encode(rsa.modulus), "e": Base64URL.encode(rsa.publicExponent), "kid": "rsa1", "alg": "RS256",
                "use": "sig",
            ],
        ]
        return Array(try JSONSerialization.data(withJSONObject: ["keys": keys], options: [.sortedKeys]))
    }

    /// Standard claims for `user` valid around `now`; `extra` replaces or adds claims.
    public static func claims(user: String = "alice", sid: String? = "session-1", now: Date = Date(), extra: String = "") -> String {
        let time = Int(now.timeIntervalSince1970)
        let sid = sid.map { #","sid":"\#($0)""# } ?? ""
        return #"{"iss":"\#(issuer)","aud":"\#(audience)","sub":"\#(user)","iat":\#(time),"nbf":\#(time - 5),"exp":\#(time + 300)\#(sid)\#(extra)}"#
    }

    public enum Signer: Sendable { case es256, eddsa, rs256, none }

    /// A compact JWS over `claims` (raw JSON text), with this header's `alg` and `kid`.
    public func token(
        _ claims: String, signer: Signer = .es256, kid: String? = nil, alg: String? = nil, with otherKey: P256.Signing.PrivateKey? = nil
    ) throws -> String {
        let (defaultAlg, defaultKid): (String, String) =
            switch signer {
            case .es256: ("ES256", "ec1")
            case .eddsa: ("EdDSA", "ed1")
            case .rs256: ("RS256", "rsa1")
            case .none: ("none", "ec1")
            }
        let header = #"{"alg":"\#(alg ?? defaultAlg)","kid":"\#(kid ?? defaultKid)","typ":"JWT"}"#
        let input = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(claims.utf8))
        let signature: [UInt8]
        switch signer {
        case .es256: signature = Array(try (otherKey ?? self.ec).signature(for: Array(input.utf8)).rawRepresentation)
        case .eddsa: signature = Array(try self.ed.signature(for: Array(input.utf8)))
        case .rs256: signature = Array(try self.rsa.signature(for: Array(input.utf8), padding: .insecurePKCS1v1_5).rawRepresentation)
        case .none: signature = []
        }
        return input + "." + Base64URL.encode(signature)
    }
}
