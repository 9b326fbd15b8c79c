//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CBOR
public import Crypto
import SwiftASN1
public import X509

/// The `attStmt` of an `apple-appattest` attestation: `{x5c: [leaf, intermediate], receipt}`.
public struct AppleAppAttestStatement: Sendable, Hashable {
    /// The DER certificates, leaf (the credential certificate) first. Always exactly two.
    public let certificateChain: [[UInt8]]
    /// The receipt (CMS SignedData from Apple's fraud receipt service), opaque here.
    public let receipt: [UInt8]

    /// The leaf (credential) certificate's DER.
    public var leafCertificate: [UInt8] { self.certificateChain[0] }
    /// The intermediate certificate's DER.
    public var intermediateCertificate: [UInt8] { self.certificateChain[1] }

    init(cbor item: CBORItem) throws(AppAttestError) {
        guard let entries = item.mapEntries else {
            throw AppAttestError.malformedAttestation("attStmt is not a CBOR map")
        }
        try AttestationObject.requireExactTextKeys(entries, ["x5c", "receipt"], in: "attStmt")
        guard let chainItems = item[textKey: "x5c"]?.arrayElements else {
            throw AppAttestError.malformedAttestation("x5c is not an array")
        }
        // App Attest always sends [credCert, intermediate]; the root is never included. Anything
        // else is refused here so that `leafCertificate` and `intermediateCertificate` are total.
        guard chainItems.count == 2 else {
            throw AppAttestError.malformedAttestation("x5c holds \(chainItems.count) certificate(s); App Attest sends 2")
        }
        let chain = try chainItems.map { element throws(AppAttestError) -> [UInt8] in
            guard let der = element.byteString, !der.isEmpty else {
                throw AppAttestError.malformedAttestation("an x5c element is not a non-empty byte string")
            }
            return der
        }
        guard let receipt = item[textKey: "receipt"]?.byteString else {
            throw AppAttestError.malformedAttestation("receipt is not a byte string")
        }
        self.certificateChain = chain
        self.receipt = receipt
    }

    /// The credential certificate and the intermediate, parsed (not verified).
    ///
    /// - Throws: ``AppAttestError/Code/malformedCertificate`` naming the one that does not parse.
    public func parsedCertificates() throws(AppAttestError) -> (leaf: Certificate, intermediate: Certificate) {
        func parse(_ der: [UInt8], role: String, repeated: Bool) throws(AppAttestError) -> Certificate {
            do {
                return repeated ? try RepeatedCertificates.shared.parse(der) : try Certificate(derEncoded: der)
            } catch {
                throw AppAttestError(code: .malformedCertificate, reason: "the \(role) is not a valid X.509 certificate")
            }
        }
        return (
            try parse(self.leafCertificate, role: "credential certificate", repeated: false),
            try parse(self.intermediateCertificate, role: "intermediate", repeated: true)
        )
    }

    /// The credential certificate's P-256 key, read without verifying anything.
    ///
    /// - Warning: Trust it only after ``AppAttestVerifier/verifyAttestation(_:keyID:clientDataHash:at:)``
    ///   succeeded for this attestation.
    public func unverifiedCredentialPublicKey() throws(AppAttestError) -> P256.Signing.PublicKey {
        guard let key = P256.Signing.PublicKey(try self.parsedCertificates().leaf.publicKey) else {
            throw AppAttestError(code: .malformedCertificate, reason: "the credential certificate's key is not P-256")
        }
        return key
    }
}
