//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
public import Crypto
import FormAttestForm

/// The parts of an ES256 JWS (RFC 7515) the server signs: its tokens (``ServerAttestationSigner``,
/// compact) and its evidence records (flattened JSON).
///
/// The protected header and the payload are RFC 8785 bytes, so a token's JSON is deterministic; the
/// signature is P-256 over `BASE64URL(header) "." BASE64URL(payload)`, written as `r || s` (RFC 7518
/// §3.4). Readers use any JWS library: the tests verify these tokens with jwt-kit. Signing does not
/// go through jwt-kit because its key collection is an actor: a profile of the service under load
/// found every answer hopping onto it, and its Foundation `JSONEncoder` cost more than the signature.
public struct JWS: Sendable {
    /// `BASE64URL(UTF8(JWS Protected Header))`.
    public var protected: String
    /// `BASE64URL(JWS Payload)`.
    public var payload: String
    /// `BASE64URL(JWS Signature)`.
    public var signature: String

    /// Signs `payload` with `key` under the header `alg: ES256`, `kid` and `typ`.
    public static func es256(payload: [UInt8], key: P256.Signing.PrivateKey, kid: String, type: String) throws -> JWS {
        let header = JSONValue.object(
            JSONObject(constantMembers: [
                ("alg", .string(JSONString("ES256"))),
                ("kid", .string(JSONString(kid))),
                ("typ", .string(JSONString(type))),
            ])
        )
        let protected = Base64URL.encode(header.canonicalBytes)
        let encodedPayload = Base64URL.encode(payload)
        let signature = try key.signature(for: Array("\(protected).\(encodedPayload)".utf8))
        return JWS(protected: protected, payload: encodedPayload, signature: Base64URL.encode(signature.rawRepresentation))
    }

    /// The compact serialization (RFC 7515 §7.1): `protected.payload.signature`.
    public var compact: String { "\(self.protected).\(self.payload).\(self.signature)" }
}
