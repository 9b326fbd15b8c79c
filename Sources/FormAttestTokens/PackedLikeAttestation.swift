//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import CBOR
public import CanonicalJSON
import Crypto
import FormAttestClient

/// A structure shaped like a FIDO2 `packed` attestation, for testing systems that only parse
/// that shape. **It is not an attestation**: no device made it, its signature is by a throwaway
/// key, and its `fmt` says so. It is only produced on explicit request and always marked invalid.
public enum PackedLikeAttestation {
    /// The `fmt` it carries: deliberately not `packed`, so that no verifier mistakes it.
    public static let format = "packed-like-unsafe-test-only"
    static let warning = "TEST ONLY: not an attestation. The device never signed this; its signature is by a throwaway server key."

    /// The CBOR object `{fmt, attStmt: {alg: -7, sig}, authData}` and the JSON document that
    /// carries it (`valid: false`, a warning).
    public static func makeUnsafeTestOnly(authenticatorData: [UInt8], clientDataHash: [UInt8]) throws -> JSONValue {
        let throwaway = P256.Signing.PrivateKey()
        let signature = try throwaway.signature(for: authenticatorData + clientDataHash)
        var serializer = CBORSerializer()
        try serializer.appendMap([
            (.text("fmt"), { $0.appendTextString(Self.format) }),
            (
                .text("attStmt"),
                { statement in
                    try statement.appendMap([
                        (.text("alg"), { $0.appendInteger(-7) }),
                        (.text("sig"), { $0.appendByteString(Array(signature.derRepresentation)) }),
                    ])
                }
            ),
            (.text("authData"), { $0.appendByteString(authenticatorData) }),
        ])
        return .object(
            JSONObject(constantMembers: [
                ("type", .string(JSONString(Self.format))),
                ("valid", .bool(false)),
                ("warning", .string(JSONString(Self.warning))),
                ("attestationObject", .string(JSONString(Base64URL.encode(serializer.bytes)))),
            ])
        )
    }
}
