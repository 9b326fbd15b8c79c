//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import Crypto
public import Foundation
import SwiftASN1
public import X509

/// A test CA shaped like Apple's App Attestation CA: a P-384 root (self-signed, ecdsa-with-SHA384)
/// and a P-384 intermediate (pathlen 0), which issues P-256 credential certificates with
/// ecdsa-with-SHA256.
///
/// - Warning: Its root is trusted only by a verifier explicitly configured with ``rootCertificate``.
///   Never configure it in production: the seed, and so the keys, are public.
public struct SimulatedAttestationAuthority: Sendable {
    /// The seed everything here is derived from.
    public let seed: UInt64
    /// The test root ("FormAttest Simulated App Attestation Root CA").
    public let rootCertificate: Certificate
    /// The intermediate that issues credential certificates.
    public let intermediateCertificate: Certificate
    /// The intermediate's key.
    let intermediateKey: P384.Signing.PrivateKey
    /// The receipt service of this authority (its own root, as Apple's receipts chain to G3).
    public let receiptAuthority: SimulatedReceiptAuthority

    /// The root's validity starts here (2020-01-01T00:00:00Z).
    public static let validFrom = Date(timeIntervalSince1970: 1_577_836_800)
    /// The root's validity ends here (2050-01-01T00:00:00Z); the intermediate's 2045-01-01.
    public static let rootValidUntil = Date(timeIntervalSince1970: 2_524_608_000)
    static let intermediateValidUntil = Date(timeIntervalSince1970: 2_366_841_600)

    /// Creates the CA for `seed`; the same seed gives the same keys, names, serials and validity.
    public init(seed: UInt64 = 0x00F0_A77E_57) throws {
        self.seed = seed
        let rootKey = SeededKeys.p384(seed: seed, label: "root")
        let intermediateKey = SeededKeys.p384(seed: seed, label: "intermediate")
        let rootName = try DistinguishedName {
            CommonName("FormAttest Simulated App Attestation Root CA")
            OrganizationName("FormAttest Simulator")
            StateOrProvinceName("California")
        }
        let intermediateName = try DistinguishedName {
            CommonName("FormAttest Simulated App Attestation CA 1")
            OrganizationName("FormAttest Simulator")
            StateOrProvinceName("California")
        }
        self.rootCertificate = try SimulatedCertificates.authority(
            serial: SeededKeys.bytes(seed: seed, label: "root-serial", count: 16),
            publicKey: .init(rootKey.publicKey),
            subject: rootName,
            issuer: rootName,
            issuerKey: .init(rootKey),
            validity: (Self.validFrom, Self.rootValidUntil),
            pathLength: nil,
            subjectKeyIdentifier: true
        )
        self.intermediateCertificate = try SimulatedCertificates.authority(
            serial: SeededKeys.bytes(seed: seed, label: "intermediate-serial", count: 16),
            publicKey: .init(intermediateKey.publicKey),
            subject: intermediateName,
            issuer: rootName,
            issuerKey: .init(rootKey),
            validity: (Self.validFrom, Self.intermediateValidUntil),
            pathLength: 0,
            subjectKeyIdentifier: true
        )
        self.intermediateKey = intermediateKey
        self.receiptAuthority = try SimulatedReceiptAuthority(seed: seed)
    }

    /// The root in PEM, to hand to `formattest verify --root` or a test verifier.
    public var rootPEM: String {
        get throws { try self.rootCertificate.serializeAsPEM().pemString }
    }

    /// Issues a credential certificate for `publicKey` like Apple's: subject CN = hex(keyId),
    /// critical BasicConstraints CA:false and KeyUsage, and the App Attest extensions.
    func issueCredentialCertificate(
        for publicKey: P256.Signing.PublicKey,
        keyID: [UInt8],
        extensions appAttestExtensions: [Certificate.Extension],
        notValidBefore: Date,
        notValidAfter: Date
    ) throws -> Certificate {
        let subject = try DistinguishedName {
            CommonName(hex(keyID))
            OrganizationalUnitName("AAA Certification")
            OrganizationName("Apple Inc.")
            StateOrProvinceName("California")
        }
        var extensions = try Certificate.Extensions {
            Critical(BasicConstraints.notCertificateAuthority)
            Critical(KeyUsage(digitalSignature: true, nonRepudiation: true, keyEncipherment: true, dataEncipherment: true))
        }
        for ext in appAttestExtensions {
            try extensions.append(ext)
        }
        return try Certificate(
            version: .v3,
            serialNumber: .init(bytes: Array(keyID.prefix(16))),
            publicKey: .init(publicKey),
            notValidBefore: notValidBefore,
            notValidAfter: notValidAfter,
            issuer: self.intermediateCertificate.subject,
            subject: subject,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: extensions,
            issuerPrivateKey: .init(self.intermediateKey)
        )
    }
}
