//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import SwiftASN1
public import X509

/// An App Attest receipt, parsed but not verified: a CMS (PKCS #7) SignedData, BER-encoded with
/// indefinite lengths, whose signed content is the ``ReceiptPayload``.
///
/// ```
/// ContentInfo ::= SEQUENCE { contentType id-signedData, content [0] EXPLICIT SignedData }
/// SignedData ::= SEQUENCE { version, digestAlgorithms SET, encapContentInfo SEQUENCE {
///     eContentType id-data, eContent [0] EXPLICIT OCTET STRING (constructed in BER) },
///     certificates [0] IMPLICIT SET OF Certificate, signerInfos SET OF SignerInfo }
/// ```
///
/// Parsing is strict about what a verifier relies on (exactly one signer, identified by issuer and
/// serial, with a certificate in the set) and throws ``AppAttestError/Code/receiptMalformed`` with
/// the reason otherwise. ``AppAttestVerifier/verifyReceipt(_:expecting:at:)`` checks signature and chain.
public struct AppAttestReceipt: Sendable {
    /// The signer's description, as the SignerInfo states it.
    public struct Signer: Sendable {
        /// The digest algorithm (Apple: SHA-256, 2.16.840.1.101.3.4.2.1).
        public let digestAlgorithm: ASN1ObjectIdentifier
        /// The signature algorithm (Apple: ecdsa-with-SHA256, 1.2.840.10045.4.3.2).
        public let signatureAlgorithm: ASN1ObjectIdentifier
        /// The DER ECDSA signature.
        public let signature: [UInt8]
        /// The DER of the signed attributes re-tagged as `SET` (what is signed when present); Apple's
        /// receipts carry none, so the signature covers the content itself.
        public let signedAttributes: [UInt8]?
        /// The `message-digest` attribute, when signed attributes are present.
        public let messageDigest: [UInt8]?
        /// Index of the signing certificate in ``AppAttestReceipt/certificates``.
        public let certificateIndex: Int
    }

    /// The receipt exactly as received.
    public let rawValue: [UInt8]
    /// The signed content (eContent, its BER chunks joined): the DER of the payload.
    public let content: [UInt8]
    /// The decoded payload.
    public let payload: ReceiptPayload
    /// The DER of the certificates the SignedData carries (Apple: signer, intermediate, root), in
    /// order. Only the signer's is parsed up front; the others when asked for.
    public let certificatesDER: [[UInt8]]
    /// Who signed and how.
    public let signer: Signer
    /// The signing certificate ("Application Attestation Fraud Receipt Signing" for Apple's).
    public let signingCertificate: Certificate

    /// Every certificate the SignedData carries, parsed.
    public var certificates: [Certificate] {
        get throws(AppAttestError) { try self.certificatesDER.indices.map(self.certificate(at:)) }
    }

    /// The certificate at `index` of ``certificatesDER``, parsed.
    public func certificate(at index: Int) throws(AppAttestError) -> Certificate {
        if index == self.signer.certificateIndex { return self.signingCertificate }
        do {
            return try RepeatedCertificates.shared.parse(self.certificatesDER[index])
        } catch {
            throw AppAttestError.receiptMalformed("certificate \(index) is not DER X.509: \(error)")
        }
    }

    /// Parses a receipt.
    ///
    /// - Throws: ``AppAttestError/Code/receiptTooLarge`` above ``AppAttestLimits/maximumReceiptSize``,
    ///   ``AppAttestError/Code/receiptMalformed`` for anything that is not the structure above.
    public init(berEncoded bytes: some Collection<UInt8>) throws(AppAttestError) {
        guard bytes.count <= AppAttestLimits.maximumReceiptSize else {
            throw AppAttestError(
                code: .receiptTooLarge,
                reason: "the receipt is \(bytes.count) bytes; at most \(AppAttestLimits.maximumReceiptSize) accepted"
            )
        }
        let raw = Array(bytes)
        let parsed: (content: [UInt8], certificates: [[UInt8]], signer: Signer, signingCertificate: Certificate)
        do {
            parsed = try Self.parseSignedData(BER.parse(raw))
        } catch let error as AppAttestError {
            throw error
        } catch {
            throw AppAttestError.receiptMalformed("not a CMS SignedData: \(error)")
        }
        self.rawValue = raw
        self.content = parsed.content
        self.certificatesDER = parsed.certificates
        self.signingCertificate = parsed.signingCertificate
        self.signer = parsed.signer
        self.payload = try ReceiptPayload(derEncoded: parsed.content)
    }

    // MARK: - CMS

    private static let signedDataOID: ASN1ObjectIdentifier = [1, 2, 840, 113_549, 1, 7, 2]
    private static let dataOID: ASN1ObjectIdentifier = [1, 2, 840, 113_549, 1, 7, 1]
    private static let messageDigestOID: ASN1ObjectIdentifier = [1, 2, 840, 113_549, 1, 9, 4]

    private static func parseSignedData(
        _ root: ASN1Node
    ) throws -> (content: [UInt8], certificates: [[UInt8]], signer: Signer, signingCertificate: Certificate) {
        try BER.sequence(root, identifier: .sequence) { nodes in
            let contentType = try ASN1ObjectIdentifier(berEncoded: &nodes)
            guard contentType == Self.signedDataOID else {
                throw AppAttestError.receiptMalformed("content type is \(contentType), not id-signedData")
            }
            return try BER.explicitlyTagged(&nodes, tagNumber: 0, tagClass: .contextSpecific) { node in
                try BER.sequence(node, identifier: .sequence) { nodes in
                    _ = try Int(berEncoded: &nodes)  // version: 1 for Apple's; any is tolerated
                    // digestAlgorithms: informative; the signer names its own, which is checked.
                    try BER.set(Self.next(&nodes, "digestAlgorithms"), identifier: .set) { algorithms in
                        while algorithms.next() != nil {}
                    }
                    let content = try Self.parseEncapsulatedContent(Self.next(&nodes, "encapContentInfo"))

                    var node = try Self.next(&nodes, "certificates or signerInfos")
                    var certificates: [[UInt8]] = []
                    if node.identifier == ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific) {
                        guard case .constructed(let children) = node.content else {
                            throw AppAttestError.receiptMalformed("certificates is not constructed")
                        }
                        for child in children {
                            guard child.identifier == .sequence else {
                                throw AppAttestError.receiptMalformed("an element of certificates is not a Certificate")
                            }
                            certificates.append(Array(child.encodedBytes))
                        }
                        node = try Self.next(&nodes, "signerInfos")
                    }
                    if node.identifier == ASN1Identifier(tagWithNumber: 1, tagClass: .contextSpecific) {
                        node = try Self.next(&nodes, "signerInfos")  // CRLs: not used by Apple, skipped
                    }
                    let signers: [(Signer, Certificate)] = try BER.set(node, identifier: .set) { children in
                        var signers: [(Signer, Certificate)] = []
                        while let child = children.next() {
                            signers.append(try Self.parseSignerInfo(child, certificates: certificates))
                        }
                        return signers
                    }
                    guard signers.count == 1 else {
                        throw AppAttestError.receiptMalformed("\(signers.count) signers; exactly one expected")
                    }
                    return (content, certificates, signers[0].0, signers[0].1)
                }
            }
        }
    }

    private static func parseEncapsulatedContent(_ node: ASN1Node) throws -> [UInt8] {
        try BER.sequence(node, identifier: .sequence) { nodes in
            let type = try ASN1ObjectIdentifier(berEncoded: &nodes)
            guard type == Self.dataOID else {
                throw AppAttestError.receiptMalformed("encapsulated content type is \(type), not id-data")
            }
            let content = try BER.optionalExplicitlyTagged(&nodes, tagNumber: 0, tagClass: .contextSpecific) {
                try ASN1OctetString(berEncoded: $0)
            }
            guard let content else {
                throw AppAttestError.receiptMalformed("the payload is detached; a receipt carries it")
            }
            return Array(content.bytes)
        }
    }

    /// The signer, and its certificate: the first of `certificates` with its issuer and serial.
    private static func parseSignerInfo(_ node: ASN1Node, certificates: [[UInt8]]) throws -> (Signer, Certificate) {
        try BER.sequence(node, identifier: .sequence) { nodes in
            _ = try Int(berEncoded: &nodes)  // version: 1 with issuerAndSerialNumber
            let sid = try Self.next(&nodes, "sid")
            guard sid.identifier == .sequence else {
                throw AppAttestError.receiptMalformed("the signer is named by key identifier; issuer and serial expected")
            }
            let (issuer, serial) = try BER.sequence(sid, identifier: .sequence) { nodes in
                // Certificates are DER, so the issuer name in the signer's reference is DER too.
                let issuer = try DistinguishedName(derEncoded: Self.next(&nodes, "issuer"))
                let serial = try Self.next(&nodes, "serial number")
                guard serial.identifier == .integer, case .primitive(let bytes) = serial.content else {
                    throw AppAttestError.receiptMalformed("the signer's serial number is not an INTEGER")
                }
                return (issuer, Certificate.SerialNumber(bytes: bytes))
            }
            var found: (index: Int, certificate: Certificate)?
            for (index, der) in certificates.enumerated() {
                guard let certificate = try? RepeatedCertificates.shared.parse(der) else { continue }
                if certificate.issuer == issuer && certificate.serialNumber == serial {
                    found = (index, certificate)
                    break
                }
            }
            guard let found else {
                throw AppAttestError.receiptMalformed("the signer's certificate is not in the receipt")
            }
            let digestAlgorithm = try Self.algorithm(Self.next(&nodes, "digestAlgorithm"))

            var next = try Self.next(&nodes, "signatureAlgorithm")
            var signedAttributes: [UInt8]?
            var messageDigest: [UInt8]?
            if next.identifier == ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific) {
                // RFC 5652 §5.4: the signature covers the DER of the attributes with the SET tag.
                var bytes = Array(next.encodedBytes)
                bytes[0] = 0x31
                signedAttributes = bytes
                messageDigest = try Self.messageDigest(in: next)
                next = try Self.next(&nodes, "signatureAlgorithm")
            }
            let signatureAlgorithm = try Self.algorithm(next)
            let signature = try ASN1OctetString(berEncoded: &nodes)
            // unsignedAttrs [1], if any, are ignored: nothing in them is covered by the signature.
            let signer = Signer(
                digestAlgorithm: digestAlgorithm,
                signatureAlgorithm: signatureAlgorithm,
                signature: Array(signature.bytes),
                signedAttributes: signedAttributes,
                messageDigest: messageDigest,
                certificateIndex: found.index
            )
            return (signer, found.certificate)
        }
    }

    private static func messageDigest(in attributes: ASN1Node) throws -> [UInt8] {
        guard case .constructed(let children) = attributes.content else {
            throw AppAttestError.receiptMalformed("signed attributes are not constructed")
        }
        var digest: [UInt8]?
        for attribute in children {
            try BER.sequence(attribute, identifier: .sequence) { nodes in
                let type = try ASN1ObjectIdentifier(berEncoded: &nodes)
                let values = try Self.next(&nodes, "attribute values")
                guard type == Self.messageDigestOID else { return }
                guard digest == nil else {
                    throw AppAttestError.receiptMalformed("two message-digest attributes")
                }
                digest = try BER.set(values, identifier: .set) { values in
                    let value = try ASN1OctetString(berEncoded: &values)
                    guard values.next() == nil else {
                        throw AppAttestError.receiptMalformed("the message-digest attribute has several values")
                    }
                    return Array(value.bytes)
                }
            }
        }
        guard let digest else {
            throw AppAttestError.receiptMalformed("signed attributes without a message-digest")
        }
        return digest
    }

    private static func algorithm(_ node: ASN1Node) throws -> ASN1ObjectIdentifier {
        try BER.sequence(node, identifier: .sequence) { nodes in
            let oid = try ASN1ObjectIdentifier(berEncoded: &nodes)
            _ = nodes.next()  // parameters: NULL or absent
            guard nodes.next() == nil else {
                throw AppAttestError.receiptMalformed("an algorithm identifier has extra fields")
            }
            return oid
        }
    }

    private static func next(_ nodes: inout ASN1NodeCollection.Iterator, _ what: String) throws -> ASN1Node {
        guard let node = nodes.next() else {
            throw AppAttestError.receiptMalformed("\(what) is missing")
        }
        return node
    }
}
