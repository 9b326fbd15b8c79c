//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import CanonicalJSON
public import Crypto
import FormAttestForm

/// The server's JWS signing keys: the current P-256 key, and the public key of the previous one
/// (``SigningKeyDirectory`` keeps one), still published so that tokens signed before a rotation
/// verify until they expire.
public struct SigningKeys: Sendable {
    public var current: P256.Signing.PrivateKey
    public var previous: [P256.Signing.PublicKey]

    public init(current: P256.Signing.PrivateKey, previous: [P256.Signing.PublicKey] = []) {
        self.current = current
        self.previous = previous
    }

    /// The current key's id: its RFC 7638 thumbprint.
    public var currentKeyID: String { Self.thumbprint(self.current.publicKey) }

    /// RFC 7638: base64url(SHA-256 of the JWK's required members, in lexicographic order, with no
    /// whitespace): exactly the RFC 8785 form of `{crv, kty, x, y}`.
    public static func thumbprint(_ key: P256.Signing.PublicKey) -> String {
        let jwk = Self.requiredMembers(key)
        return Base64URL.encode(SHA256.hash(data: JSONValue.object(jwk).canonicalBytes))
    }

    /// The public JWK of a key, with `kid`, `use` and `alg`.
    public static func jwk(_ key: P256.Signing.PublicKey) -> JSONValue {
        var members = Self.requiredMembers(key).members.map { (name: $0.name.string, value: $0.value) }
        members.append(("kid", .string(JSONString(Self.thumbprint(key)))))
        members.append(("use", .string(JSONString("sig"))))
        members.append(("alg", .string(JSONString("ES256"))))
        return .object(JSONObject(constantMembers: members))
    }

    /// The JWKS document: the current key first, then the previous one.
    public var jwks: JSONValue {
        let keys = [self.current.publicKey] + self.previous
        return .object(JSONObject(constantMembers: [("keys", .array(keys.map(Self.jwk)))]))
    }

    /// `{crv, kty, x, y}` of a P-256 key.
    static func requiredMembers(_ key: P256.Signing.PublicKey) -> JSONObject {
        // The x963 form of a P-256 public key is always 65 bytes: 04 || x || y.
        let point = Array(key.x963Representation)
        return JSONObject(constantMembers: [
            ("crv", .string(JSONString("P-256"))),
            ("kty", .string(JSONString("EC"))),
            ("x", .string(JSONString(Base64URL.encode(point[1..<33])))),
            ("y", .string(JSONString(Base64URL.encode(point[33..<65])))),
        ])
    }
}
