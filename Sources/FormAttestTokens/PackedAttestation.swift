//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
public import CanonicalJSON
import Crypto
import FormAttestForm
import SwiftASN1
import X509

/// A FIDO2 `packed` attestation of an App Attest key, made by this server's
/// ``PackedAttestationAuthority`` after the App Attest attestation verified (WebAuthn Level 3
/// §8.2, "full attestation"):
///
/// - authenticatorData: SHA-256(rpID) ‖ flags AT (0x40), no extensions ‖ counter 0 ‖ aaguid ‖
///   credentialId = keyId ‖ the App Attest key as a COSE key;
/// - attStmt: `{alg: -7, sig, x5c: [attestation certificate]}`, `sig` by the authority's
///   attestation key over authenticatorData ‖ clientDataHash.
///
/// A relying party that trusts the deployment's root learns that this server vouches that Apple
/// attested the key; the device itself made no packed attestation (docs/formats.md).
public enum PackedAttestation {
    public static let format = "packed"

    /// The attestation object (CBOR `{fmt, attStmt, authData}`).
    public static func attestationObject(
        credential: AttestedCredential,
        relyingPartyID: String,
        clientDataHash: [UInt8],
        authority: PackedAttestationAuthority
    ) throws -> [UInt8] {
        var authenticatorData = Array(SHA256.hash(data: Array(relyingPartyID.utf8)))
        authenticatorData.append(0x40)  // AT: attested credential data follows; no UP, UV or ED
        authenticatorData += [0, 0, 0, 0]  // signature counter 0
        authenticatorData += PackedAttestationAuthority.aaguid
        authenticatorData += [UInt8(credential.keyID.count >> 8), UInt8(credential.keyID.count & 0xFF)]
        authenticatorData += credential.keyID
        authenticatorData += credential.coseKey
        let signature = try authority.sign(authenticatorData, clientDataHash)
        var certificate = DER.Serializer()
        try certificate.serialize(authority.attestationCertificate)
        return try PackedStatement(signature: signature, certificate: certificate.serializedBytes)
            .attestationObject(format: Self.format, authenticatorData: authenticatorData)
    }

    /// The JSON the HTTP answer and `wrap` carry: `{fmt, rpId, clientDataHash, attestationObject}`.
    public static func make(
        credential: AttestedCredential,
        relyingPartyID: String,
        clientDataHash: [UInt8],
        authority: PackedAttestationAuthority
    ) throws -> JSONValue {
        let object = try Self.attestationObject(
            credential: credential, relyingPartyID: relyingPartyID, clientDataHash: clientDataHash, authority: authority)
        return .object(
            JSONObject(constantMembers: [
                ("fmt", .string(JSONString(Self.format))),
                ("rpId", .string(JSONString(relyingPartyID))),
                ("clientDataHash", .string(JSONString(Base64URL.encode(clientDataHash)))),
                ("attestationObject", .string(JSONString(Base64URL.encode(object)))),
                (
                    "vouches",
                    .string(JSONString("this server verified an Apple App Attest attestation of this key; the device made no packed attestation"))
                ),
            ])
        )
    }
}
