//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Crypto
public import Foundation
public import SwiftASN1
public import X509

/// The deployment's own attestation authority for FIDO2 `packed` attestations: a root and an
/// attestation certificate meeting WebAuthn Level 3 §8.2.1 (version 3; subject C, O,
/// OU = "Authenticator Attestation", CN; basic constraints CA false; the id-fido-gen-ce-aaguid
/// extension naming ``aaguid``).
///
/// What a `packed` attestation by this authority says: **this server verified an Apple App
/// Attest attestation of this key** and vouches for it, the way an authenticator vendor vouches
/// for its devices. It does not say the device made a packed attestation (it never does).
public struct PackedAttestationAuthority: Sendable {
    /// The AAGUID FormAttest assigns to "an App Attest key vouched for by this server":
    /// `f04a77e5-7a77-4e57-8a66-a7e57ab1e000`, the same in every deployment (each has its own
    /// root, which is what a relying party trusts).
    public static let aaguid: [UInt8] = [
        0xF0, 0x4A, 0x77, 0xE5, 0x7A, 0x77, 0x4E, 0x57, 0x8A, 0x66, 0xA7, 0xE5, 0x7A, 0xB1, 0xE0, 0x00,
    ]
    /// id-fido-gen-ce-aaguid (1.3.6.1.4.1.45724.1.1.4).
    public static let aaguidExtensionOID: ASN1ObjectIdentifier = [1, 3, 6, 1, 4, 1, 45724, 1, 1, 4]

    public let rootCertificate: Certificate
    public let attestationCertificate: Certificate
    let attestationKey: P256.Signing.PrivateKey

    /// An authority from its certificates and the attestation key (the root's key is not needed
    /// to sign attestations, and may be kept offline).
    public init(rootCertificate: Certificate, attestationCertificate: Certificate, attestationKey: P256.Signing.PrivateKey) {
        self.rootCertificate = rootCertificate
        self.attestationCertificate = attestationCertificate
        self.attestationKey = attestationKey
    }

    /// A new root (P-256, 20 years) and attestation certificate (5 years), valid from `now`.
    ///
    /// - Returns: the authority and the root's private key (to be stored apart, owner only).
    public static func generate(
        organization: String,
        country: String,
        commonName: String = "FormAttest App Attest Vouching",
        now: Date = Date()
    ) throws -> (authority: PackedAttestationAuthority, rootKey: P256.Signing.PrivateKey) {
        let rootKey = P256.Signing.PrivateKey()
        let attestationKey = P256.Signing.PrivateKey()
        let rootName = try DistinguishedName {
            CountryName(country)
            OrganizationName(organization)
            CommonName("\(commonName) Root CA")
        }
        let attestationName = try DistinguishedName {
            CountryName(country)
            OrganizationName(organization)
            OrganizationalUnitName("Authenticator Attestation")
            CommonName(commonName)
        }
        var generator = SystemRandomNumberGenerator()
        func serial() -> Certificate.SerialNumber {
            // 16 random bytes, the top bit clear (a positive INTEGER).
            var bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
            bytes[0] &= 0x7F
            return Certificate.SerialNumber(bytes: bytes)
        }
        let root = try Certificate(
            version: .v3,
            serialNumber: serial(),
            publicKey: .init(rootKey.publicKey),
            notValidBefore: now.addingTimeInterval(-300),
            notValidAfter: now.addingTimeInterval(20 * 365 * 86_400),
            issuer: rootName,
            subject: rootName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                SubjectKeyIdentifier(hash: .init(rootKey.publicKey))
            },
            issuerPrivateKey: .init(rootKey)
        )
        var aaguidValue = DER.Serializer()
        try aaguidValue.serialize(ASN1OctetString(contentBytes: ArraySlice(Self.aaguid)))
        let attestation = try Certificate(
            version: .v3,
            serialNumber: serial(),
            publicKey: .init(attestationKey.publicKey),
            notValidBefore: now.addingTimeInterval(-300),
            notValidAfter: now.addingTimeInterval(5 * 365 * 86_400),
            issuer: rootName,
            subject: attestationName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                Certificate.Extension(oid: Self.aaguidExtensionOID, critical: false, value: ArraySlice(aaguidValue.serializedBytes))
            },
            issuerPrivateKey: .init(rootKey)
        )
        return (PackedAttestationAuthority(rootCertificate: root, attestationCertificate: attestation, attestationKey: attestationKey), rootKey)
    }

    /// Signs `authenticatorData ‖ clientDataHash` with the attestation key (ES256, DER).
    func sign(_ authenticatorData: [UInt8], _ clientDataHash: [UInt8]) throws -> [UInt8] {
        Array(try self.attestationKey.signature(for: authenticatorData + clientDataHash).derRepresentation)
    }
}
