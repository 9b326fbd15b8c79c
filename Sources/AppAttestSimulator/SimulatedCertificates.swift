//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation
import X509

/// How the simulated CAs issue their CA certificates (roots and intermediates): one way, for the
/// attestation CA and the receipt CA alike, as Apple's are (P-384 issuers, ecdsa-with-SHA384).
enum SimulatedCertificates {
    /// A CA certificate; self-signed when `issuer` is `subject`. `pathLength` nil: unlimited.
    static func authority(
        serial: [UInt8],
        publicKey: Certificate.PublicKey,
        subject: DistinguishedName,
        issuer: DistinguishedName,
        issuerKey: Certificate.PrivateKey,
        validity: (from: Date, until: Date),
        pathLength: Int?,
        subjectKeyIdentifier: Bool
    ) throws -> Certificate {
        var extensions = try Certificate.Extensions {
            Critical(BasicConstraints.isCertificateAuthority(maxPathLength: pathLength))
            Critical(KeyUsage(keyCertSign: true, cRLSign: true))
        }
        if subjectKeyIdentifier {
            try extensions.append(Certificate.Extension(SubjectKeyIdentifier(hash: publicKey), critical: false))
        }
        return try Certificate(
            version: .v3,
            serialNumber: .init(bytes: serial),
            publicKey: publicKey,
            notValidBefore: validity.from,
            notValidAfter: validity.until,
            issuer: issuer,
            subject: subject,
            signatureAlgorithm: .ecdsaWithSHA384,
            extensions: extensions,
            issuerPrivateKey: issuerKey
        )
    }
}
