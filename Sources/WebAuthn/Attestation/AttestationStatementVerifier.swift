//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CBOR
import Crypto
import Foundation
import SwiftASN1
import X509

/// The verification procedures of the implemented attestation statement formats (WebAuthn §8),
/// one function per format, each a flat sequence of guards in the spec's order.
struct AttestationStatementVerifier {
    let object: WebAuthnAttestationObject
    let credential: WebAuthnAuthenticatorData.AttestedCredential
    let clientDataHash: [UInt8]
    let anchors: [Certificate]
    let time: Date

    /// The statement's verdict: whether a certificate path reached a trust anchor (`nil` for
    /// formats without certificates: `none` and packed self attestation).
    func verify() async throws(WebAuthnError) -> Bool? {
        switch AttestationFormat(rawValue: self.object.format) {
        case .none: return try self.verifyNone()
        case .packed: return try await self.verifyPacked()
        case .fidoU2F: return try await self.verifyFIDOU2F()
        case .apple: return try await self.verifyApple()
        case .tpm: return try await self.verifyTPM()
        case .androidKey: return try await self.verifyAndroidKey()
        default:
            throw WebAuthnError(code: .unsupportedFormat, reason: "attestation format \"\(self.object.format)\" is not implemented")
        }
    }

    /// The statement's members, exactly `names` (some of them optional).
    func members(required: Set<String>, optional: Set<String> = []) throws(WebAuthnError) -> [String: CBORItem] {
        let entries = self.object.statement.mapEntries ?? []
        var members: [String: CBORItem] = [:]
        for entry in entries {
            guard let name = entry.key.textString, required.contains(name) || optional.contains(name) else {
                throw WebAuthnError.malformedAttestation("\(self.object.format) attStmt has an unexpected member")
            }
            members[name] = entry.value
        }
        guard required.isSubset(of: Set(members.keys)) else {
            throw WebAuthnError.malformedAttestation("\(self.object.format) attStmt lacks one of \(required.sorted())")
        }
        return members
    }

    /// The signed bytes of packed, apple and tpm: authData ‖ clientDataHash.
    var signedData: [UInt8] { self.object.authenticatorData.rawValue + self.clientDataHash }

    // MARK: - none (§8.7)

    private func verifyNone() throws(WebAuthnError) -> Bool? {
        _ = try self.members(required: [])
        return nil
    }

    // MARK: - packed (§8.2)

    private func verifyPacked() async throws(WebAuthnError) -> Bool? {
        let members = try self.members(required: ["alg", "sig"], optional: ["x5c"])
        guard let alg = members["alg"]?.integer, let signature = members["sig"]?.byteString else {
            throw WebAuthnError.malformedAttestation("packed alg is not an integer or sig not a byte string")
        }
        let algorithm = COSEAlgorithm(rawValue: alg)
        guard let x5c = members["x5c"] else {
            // Self attestation: the statement's alg is the credential's, and its key signed.
            guard algorithm == self.credential.publicKey.algorithm else {
                throw WebAuthnError(
                    code: .algorithmNotAllowed,
                    reason: "packed self attestation alg \(alg) is not the credential's \(self.credential.publicKey.algorithm)"
                )
            }
            guard self.credential.publicKey.isValidSignature(signature, for: self.signedData) else {
                throw WebAuthnError(code: .attestationSignatureInvalid, reason: "the packed self-attestation signature does not verify")
            }
            return nil
        }
        let chain = try AttestationChain(x5c: x5c)
        let signer = try CredentialPublicKey(certificateKey: chain.leaf.publicKey, algorithm: algorithm)
        guard signer.isValidSignature(signature, for: self.signedData) else {
            throw WebAuthnError(code: .attestationSignatureInvalid, reason: "the packed signature does not verify with x5c[0]")
        }
        try self.checkPackedCertificate(chain.leaf)
        return try await chain.validate(anchors: self.anchors, at: self.time)
    }

    /// §8.2.1: version 3; subject C, O, OU = "Authenticator Attestation", CN; CA false; the AAGUID
    /// extension, when present, not critical and equal to authData's aaguid.
    private func checkPackedCertificate(_ certificate: Certificate) throws(WebAuthnError) {
        guard certificate.version == .v3 else {
            throw WebAuthnError(code: .attestationCertificateInvalid, reason: "the packed attestation certificate is not version 3")
        }
        var subject: [ASN1ObjectIdentifier: String] = [:]
        for relativeName in certificate.subject {
            for attribute in relativeName {
                subject[attribute.type] = String(attribute.value)
            }
        }
        guard let country = subject[.RDNAttributeType.countryName], country.utf8.count == 2,
            subject[.RDNAttributeType.organizationName]?.isEmpty == false,
            subject[.RDNAttributeType.organizationalUnitName] == "Authenticator Attestation",
            subject[.RDNAttributeType.commonName]?.isEmpty == false
        else {
            throw WebAuthnError(
                code: .attestationCertificateInvalid,
                reason: "the packed certificate's subject lacks C, O, CN or OU = \"Authenticator Attestation\""
            )
        }
        try self.checkNotCertificateAuthority(certificate, "packed")
        try self.checkAAGUIDExtension(certificate)
    }

    /// The AAGUID extension (packed, tpm), when present: not critical and equal to authData's aaguid.
    func checkAAGUIDExtension(_ certificate: Certificate) throws(WebAuthnError) {
        if let aaguidExtension = certificate.extensions[oid: Self.fidoAAGUIDExtension] {
            guard !aaguidExtension.critical else {
                throw WebAuthnError(code: .attestationCertificateInvalid, reason: "the AAGUID extension is marked critical")
            }
            guard Array(aaguidExtension.value) == [0x04, 0x10] + self.credential.aaguid else {
                throw WebAuthnError(code: .aaguidMismatch, reason: "the certificate's AAGUID extension differs from authData's aaguid")
            }
        }
    }

    /// Basic constraints present and saying CA false (packed, tpm).
    func checkNotCertificateAuthority(_ certificate: Certificate, _ what: String) throws(WebAuthnError) {
        let basicConstraints: BasicConstraints?
        do {
            basicConstraints = try certificate.extensions.basicConstraints
        } catch {
            throw WebAuthnError(code: .attestationCertificateInvalid, reason: "the \(what) certificate's basic constraints are malformed")
        }
        guard case .notCertificateAuthority? = basicConstraints else {
            throw WebAuthnError(code: .attestationCertificateInvalid, reason: "the \(what) certificate's basic constraints do not say CA false")
        }
    }

    /// id-fido-gen-ce-aaguid.
    static let fidoAAGUIDExtension: ASN1ObjectIdentifier = [1, 3, 6, 1, 4, 1, 45724, 1, 1, 4]

    // MARK: - fido-u2f (§8.6)

    private func verifyFIDOU2F() async throws(WebAuthnError) -> Bool? {
        let members = try self.members(required: ["sig", "x5c"])
        guard let signature = members["sig"]?.byteString, let x5c = members["x5c"] else {
            throw WebAuthnError.malformedAttestation("fido-u2f sig is not a byte string")
        }
        let chain = try AttestationChain(x5c: x5c)
        guard chain.intermediates.isEmpty else {
            throw WebAuthnError.malformedAttestation("fido-u2f x5c has \(chain.intermediates.count + 1) certificates; exactly one is allowed")
        }
        guard P256.Signing.PublicKey(chain.leaf.publicKey) != nil else {
            throw WebAuthnError(code: .attestationCertificateInvalid, reason: "the fido-u2f certificate's key is not P-256")
        }
        guard let point = self.credential.publicKey.p256X963Representation else {
            throw WebAuthnError(code: .publicKeyMismatch, reason: "a fido-u2f credential key must be ES256 (P-256)")
        }
        var verificationData: [UInt8] = [0x00]
        verificationData += self.object.authenticatorData.relyingPartyIDHash
        verificationData += self.clientDataHash
        verificationData += self.credential.credentialID
        verificationData += point
        let signer = try CredentialPublicKey(certificateKey: chain.leaf.publicKey, algorithm: .es256)
        guard signer.isValidSignature(signature, for: verificationData) else {
            throw WebAuthnError(code: .attestationSignatureInvalid, reason: "the fido-u2f signature does not verify with x5c[0]")
        }
        return try await chain.validate(anchors: self.anchors, at: self.time)
    }

    // MARK: - apple (§8.8)

    private func verifyApple() async throws(WebAuthnError) -> Bool? {
        let members = try self.members(required: ["x5c"])
        guard let x5c = members["x5c"] else {
            throw WebAuthnError.malformedAttestation("apple attStmt lacks x5c")
        }
        let chain = try AttestationChain(x5c: x5c)
        // Steps 2–4: the nonce extension holds SHA-256(authData ‖ clientDataHash).
        let nonce = try Self.appleNonce(chain.leaf)
        guard bytesMatch(Array(SHA256.hash(data: self.signedData)), nonce) else {
            throw WebAuthnError(code: .nonceMismatch, reason: "the certificate's nonce is not SHA-256(authData ‖ clientDataHash)")
        }
        // Step 5: the certificate's key is the credential public key.
        guard let certificateKey = P256.Signing.PublicKey(chain.leaf.publicKey),
            Array(certificateKey.x963Representation) == self.credential.publicKey.p256X963Representation
        else {
            throw WebAuthnError(code: .publicKeyMismatch, reason: "the apple certificate's key is not the credential public key")
        }
        return try await chain.validate(anchors: self.anchors, at: self.time)
    }

    /// The nonce of Apple's extension 1.2.840.113635.100.8.2: `SEQUENCE { [1] EXPLICIT OCTET STRING (32) }`.
    private static func appleNonce(_ certificate: Certificate) throws(WebAuthnError) -> [UInt8] {
        let oid: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 8, 2]
        guard let nonceExtension = certificate.extensions[oid: oid] else {
            throw WebAuthnError(code: .nonceMismatch, reason: "the apple certificate has no nonce extension 1.2.840.113635.100.8.2")
        }
        let octets: ASN1OctetString
        do {
            let root = try DER.parse(nonceExtension.value)
            octets = try DER.sequence(root, identifier: .sequence) { nodes in
                try DER.explicitlyTagged(&nodes, tagNumber: 1, tagClass: .contextSpecific) { node in
                    try ASN1OctetString(derEncoded: node)
                }
            }
        } catch {
            throw WebAuthnError(code: .nonceMismatch, reason: "the nonce extension is not SEQUENCE { [1] OCTET STRING }")
        }
        let bytes = Array(octets.bytes)
        guard bytes.count == SHA256.byteCount else {
            throw WebAuthnError(code: .nonceMismatch, reason: "the nonce has \(bytes.count) bytes, not 32")
        }
        return bytes
    }
}
