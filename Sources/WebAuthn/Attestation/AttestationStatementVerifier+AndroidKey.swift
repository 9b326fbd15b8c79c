//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CBOR
import SwiftASN1
import X509

extension AttestationStatementVerifier {
    // MARK: - android-key (§8.4)

    /// §8.4 verification procedure: x5c[0]'s key signed authData ‖ clientDataHash and is the
    /// credential key; its key description (1.3.6.1.4.1.11129.2.1.17) carries clientDataHash as the
    /// attestation challenge, no `allApplications`, and, in the union of the two authorization
    /// lists (software and TEE enforced), origin KM_ORIGIN_GENERATED and purpose KM_PURPOSE_SIGN.
    func verifyAndroidKey() async throws(WebAuthnError) -> Bool? {
        let members = try self.members(required: ["alg", "sig", "x5c"])
        guard let alg = members["alg"]?.integer, let signature = members["sig"]?.byteString, let x5c = members["x5c"] else {
            throw WebAuthnError.malformedAttestation("android-key alg is not an integer or sig not a byte string")
        }
        let chain = try AttestationChain(x5c: x5c)
        // Step 2: the signature, with the key of x5c[0].
        let signer = try CredentialPublicKey(certificateKey: chain.leaf.publicKey, algorithm: COSEAlgorithm(rawValue: alg))
        guard signer.isValidSignature(signature, for: self.signedData) else {
            throw WebAuthnError(code: .attestationSignatureInvalid, reason: "the android-key signature does not verify with x5c[0]")
        }
        // Step 3: that key is the credential public key.
        guard signer.isSameKey(as: self.credential.publicKey) else {
            throw WebAuthnError(code: .publicKeyMismatch, reason: "the android-key certificate's key is not the credential public key")
        }
        // Step 4: the key description.
        let description = try AndroidKeyDescription(certificate: chain.leaf)
        guard bytesMatch(description.attestationChallenge, self.clientDataHash) else {
            throw WebAuthnError(code: .nonceMismatch, reason: "the key description's attestationChallenge is not clientDataHash")
        }
        guard !description.allApplications else {
            throw WebAuthnError(
                code: .attestationCertificateInvalid, reason: "the key description has allApplications: the key is not scoped to the RP")
        }
        guard description.origins.contains(AndroidKeyDescription.originGenerated) else {
            throw WebAuthnError(
                code: .attestationCertificateInvalid,
                reason: "no authorization list has origin KM_ORIGIN_GENERATED: the key was not made in the keystore")
        }
        guard description.purposes.contains(AndroidKeyDescription.purposeSign) else {
            throw WebAuthnError(code: .attestationCertificateInvalid, reason: "no authorization list has purpose KM_PURPOSE_SIGN")
        }
        return try await chain.validate(anchors: self.anchors, at: self.time)
    }
}

/// The Android Keystore key description (extension 1.3.6.1.4.1.11129.2.1.17): what §8.4 reads of it.
///
/// `KeyDescription ::= SEQUENCE { attestationVersion, attestationSecurityLevel, keyMintVersion,
/// keyMintSecurityLevel, attestationChallenge OCTET STRING, uniqueId OCTET STRING,
/// softwareEnforced AuthorizationList, hardwareEnforced AuthorizationList }`; each list is a
/// SEQUENCE of optional `[n] EXPLICIT` fields, of which purpose `[1] SET OF INTEGER`,
/// allApplications `[600] NULL` and origin `[702] INTEGER` are read (from both lists: the union).
struct AndroidKeyDescription {
    static let extensionOID: ASN1ObjectIdentifier = [1, 3, 6, 1, 4, 1, 11129, 2, 1, 17]
    static let originGenerated = 0
    static let purposeSign = 2

    let attestationChallenge: [UInt8]
    var allApplications = false
    var origins: [Int] = []
    var purposes: [Int] = []

    init(certificate: Certificate) throws(WebAuthnError) {
        guard let descriptionExtension = certificate.extensions[oid: Self.extensionOID] else {
            throw WebAuthnError(code: .attestationCertificateInvalid, reason: "the android-key certificate has no key description extension")
        }
        do {
            let root = try DER.parse(descriptionExtension.value)
            guard root.identifier == .sequence, case .constructed(let children) = root.content else {
                throw ASN1Error.unexpectedFieldType(root.identifier)
            }
            let fields = Array(children)
            guard fields.count == 8 else { throw ASN1Error.invalidASN1Object(reason: "KeyDescription has \(fields.count) fields") }
            self.attestationChallenge = Array(try ASN1OctetString(derEncoded: fields[4]).bytes)
            for list in fields[6...] {
                guard list.identifier == .sequence, case .constructed(let entries) = list.content else {
                    throw ASN1Error.unexpectedFieldType(list.identifier)
                }
                for entry in entries {
                    guard entry.identifier.tagClass == .contextSpecific, case .constructed(let wrapped) = entry.content,
                        let inner = wrapped.first(where: { _ in true })
                    else {
                        throw ASN1Error.unexpectedFieldType(entry.identifier)
                    }
                    switch entry.identifier.tagNumber {
                    case 1:
                        guard inner.identifier == .set, case .constructed(let values) = inner.content else {
                            throw ASN1Error.unexpectedFieldType(inner.identifier)
                        }
                        for value in values { self.purposes.append(try Int(derEncoded: value)) }
                    case 600: self.allApplications = true
                    case 702: self.origins.append(try Int(derEncoded: inner))
                    default: break
                    }
                }
            }
        } catch {
            throw WebAuthnError(code: .attestationCertificateInvalid, reason: "the android-key key description is malformed: \(error)")
        }
    }
}
