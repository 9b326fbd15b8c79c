//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CBOR
import Crypto
import SwiftASN1
import X509

extension AttestationStatementVerifier {
    // MARK: - tpm (§8.3)

    /// §8.3 verification procedure: the AIK (x5c[0]) signed certInfo, certInfo certifies pubArea
    /// (its Name) and binds this registration (extraData), pubArea holds the credential key, and the
    /// AIK certificate meets §8.3.2. RS1 is accepted here, for the statement only: Windows TPMs
    /// still sign certInfo with it (the credential's own algorithm follows the policy).
    func verifyTPM() async throws(WebAuthnError) -> Bool? {
        let members = try self.members(required: ["ver", "alg", "x5c", "sig", "certInfo", "pubArea"])
        guard members["ver"]?.textString == "2.0" else {
            throw WebAuthnError.malformedAttestation("tpm ver is not \"2.0\"")
        }
        guard let alg = members["alg"]?.integer, let signature = members["sig"]?.byteString,
            let certInfoBytes = members["certInfo"]?.byteString, let pubAreaBytes = members["pubArea"]?.byteString,
            let x5c = members["x5c"]
        else {
            throw WebAuthnError.malformedAttestation("tpm alg is not an integer, or sig, certInfo or pubArea not a byte string")
        }
        let algorithm = COSEAlgorithm(rawValue: alg)
        let pubArea = try TPMPublicArea(bytes: pubAreaBytes)
        let certInfo = try TPMCertifyInfo(bytes: certInfoBytes)
        // Step 2: pubArea's key is the credential public key (an ECC key on P-256, the one curve here).
        if case .ecc(let curve, _, _) = pubArea.key, curve != TPMAlgorithm.curveP256 {
            throw WebAuthnError(code: .publicKeyMismatch, reason: "tpm pubArea's ECC curve 0x\(String(curve, radix: 16)) is not NIST P-256")
        }
        guard Self.tpmKey(pubArea.key, matches: self.credential.publicKey) else {
            throw WebAuthnError(code: .publicKeyMismatch, reason: "tpm pubArea's key is not the credential public key")
        }
        // Step 4: extraData is the hash, with alg's hash, of authData ‖ clientDataHash.
        guard let expectedExtraData = Self.hash(self.signedData, for: algorithm) else {
            throw WebAuthnError(code: .algorithmNotAllowed, reason: "the tpm statement's alg \(alg) is not supported")
        }
        guard bytesMatch(certInfo.extraData, expectedExtraData) else {
            throw WebAuthnError(code: .nonceMismatch, reason: "tpm certInfo's extraData is not the hash of authData ‖ clientDataHash")
        }
        // Step 4: attested.name is pubArea's Name: nameAlg ‖ H_nameAlg(pubArea).
        guard let name = Self.tpmName(of: pubArea) else {
            throw WebAuthnError(
                code: .publicKeyMismatch,
                reason: "tpm pubArea's nameAlg 0x\(String(pubArea.nameAlgorithm, radix: 16)) is not SHA-1, SHA-256, SHA-384 or SHA-512")
        }
        guard bytesMatch(certInfo.attestedName, name) else {
            throw WebAuthnError(code: .publicKeyMismatch, reason: "tpm certInfo does not name pubArea (attested.name differs)")
        }
        // Step 3: the AIK certificate's key signed certInfo with alg.
        let chain = try AttestationChain(x5c: x5c)
        let signer = try CredentialPublicKey(certificateKey: chain.leaf.publicKey, algorithm: algorithm, allowingRS1: true)
        guard signer.isValidSignature(signature, for: certInfo.rawValue) else {
            throw WebAuthnError(code: .attestationSignatureInvalid, reason: "the tpm signature over certInfo does not verify with x5c[0]")
        }
        try self.checkAIKCertificate(chain.leaf)
        // The AIK certificate marks its subject alternative name (read above) and its certificate
        // policies critical; WebAuthn asks nothing of the policies.
        return try await chain.validate(
            anchors: self.anchors,
            at: self.time,
            handledCriticalExtensions: [.X509ExtensionID.subjectAlternativeName, Self.certificatePoliciesExtension]
        )
    }

    /// Whether pubArea's key is `credential` (an exponent of 0 means 65537, TPM 2.0 Part 2 12.2.3.5).
    static func tpmKey(_ key: TPMPublicArea.Key, matches credential: CredentialPublicKey) -> Bool {
        switch key {
        case .rsa(let modulus, let exponent):
            guard let primitives = credential.rsaPrimitives else { return false }
            let value = exponent == 0 ? 65537 : exponent
            let exponentBytes = [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: value >> $0) }.drop(while: { $0 == 0 })
            return Array(modulus.drop(while: { $0 == 0 })) == primitives.modulus && Array(exponentBytes) == primitives.exponent
        case .ecc(let curve, let x, let y):
            guard curve == TPMAlgorithm.curveP256, let point = credential.p256X963Representation else { return false }
            let tpmPoint: [UInt8] = [0x04] + x + y
            return tpmPoint == point
        }
    }

    /// The digest of `data` with the hash of a statement's `alg`, `nil` for an algorithm without one here.
    static func hash(_ data: [UInt8], for algorithm: COSEAlgorithm) -> [UInt8]? {
        switch algorithm {
        case .rs1: Array(Insecure.SHA1.hash(data: data))
        case .rs256, .ps256, .es256: Array(SHA256.hash(data: data))
        case .ps384: Array(SHA384.hash(data: data))
        default: nil
        }
    }

    /// pubArea's Name (TPM 2.0 Part 1, 16): nameAlg, then the hash of pubArea with it.
    static func tpmName(of pubArea: TPMPublicArea) -> [UInt8]? {
        let digest: [UInt8]
        switch pubArea.nameAlgorithm {
        case TPMAlgorithm.sha1: digest = Array(Insecure.SHA1.hash(data: pubArea.rawValue))
        case TPMAlgorithm.sha256: digest = Array(SHA256.hash(data: pubArea.rawValue))
        case TPMAlgorithm.sha384: digest = Array(SHA384.hash(data: pubArea.rawValue))
        case TPMAlgorithm.sha512: digest = Array(SHA512.hash(data: pubArea.rawValue))
        default: return nil
        }
        return [UInt8(pubArea.nameAlgorithm >> 8), UInt8(pubArea.nameAlgorithm & 0xFF)] + digest
    }

    /// id-ce-certificatePolicies (RFC 5280 4.2.1.4).
    static let certificatePoliciesExtension: ASN1ObjectIdentifier = [2, 5, 29, 32]
    /// tcg-kp-AIKCertificate.
    static let aikCertificateUsage: ASN1ObjectIdentifier = [2, 23, 133, 8, 3]
    /// tcg-at-tpmManufacturer, tcg-at-tpmModel, tcg-at-tpmVersion.
    static let tpmDeviceAttributes: [ASN1ObjectIdentifier] = [[2, 23, 133, 2, 1], [2, 23, 133, 2, 2], [2, 23, 133, 2, 3]]

    /// §8.3.2: version 3; an empty subject; a subject alternative name with the TPM's
    /// manufacturer, model and version; the AIK extended key usage; CA false; the AAGUID extension,
    /// when present, equal to authData's aaguid.
    func checkAIKCertificate(_ certificate: Certificate) throws(WebAuthnError) {
        guard certificate.version == .v3 else {
            throw WebAuthnError(code: .attestationCertificateInvalid, reason: "the tpm AIK certificate is not version 3")
        }
        guard certificate.subject.isEmpty else {
            throw WebAuthnError(code: .attestationCertificateInvalid, reason: "the tpm AIK certificate's subject is not empty")
        }
        let names: SubjectAlternativeNames?
        let usages: ExtendedKeyUsage?
        do {
            names = try certificate.extensions.subjectAlternativeNames
            usages = try certificate.extensions.extendedKeyUsage
        } catch {
            throw WebAuthnError(
                code: .attestationCertificateInvalid, reason: "the tpm AIK certificate's subject alternative name or extended key usage is malformed")
        }
        var attributes: Set<ASN1ObjectIdentifier> = []
        for case .directoryName(let directory) in names.map({ Array($0) }) ?? [] {
            for relativeName in directory {
                for attribute in relativeName { attributes.insert(attribute.type) }
            }
        }
        guard Set(Self.tpmDeviceAttributes).isSubset(of: attributes) else {
            throw WebAuthnError(
                code: .attestationCertificateInvalid,
                reason: "the tpm AIK certificate's subject alternative name lacks the TPM manufacturer, model or version"
            )
        }
        guard let usages, usages.contains(ExtendedKeyUsage.Usage(oid: Self.aikCertificateUsage)) else {
            throw WebAuthnError(
                code: .attestationCertificateInvalid, reason: "the tpm AIK certificate's extended key usage lacks tcg-kp-AIKCertificate")
        }
        try self.checkNotCertificateAuthority(certificate, "tpm AIK")
        try self.checkAAGUIDExtension(certificate)
    }
}
