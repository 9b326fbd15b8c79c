//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
import Crypto
import FormAttestForm
public import Foundation
import RFC3339
import SwiftASN1
public import X509

/// A test receipt service shaped like Apple's: a P-384 root standing in for Apple Root CA - G3, a
/// P-256 intermediate ("Application Integration CA"), and a P-256 signer, which signs receipts as
/// CMS SignedData in BER with indefinite lengths and the payload split into 1000-byte chunks,
/// as Apple's are.
///
/// - Warning: Trusted only by a verifier configured with ``rootCertificate`` in
///   ``AppAttestPolicy/receiptTrustAnchors``. The seed, and so the keys, are public.
public struct SimulatedReceiptAuthority: Sendable {
    /// The test receipt root.
    public let rootCertificate: Certificate
    /// The intermediate that issues the signer.
    public let intermediateCertificate: Certificate
    /// The receipt signing certificate.
    public let signerCertificate: Certificate
    let signerKey: P256.Signing.PrivateKey

    /// Creates the receipt CA for `seed`; the same seed gives the same keys and certificates.
    public init(seed: UInt64) throws {
        let rootKey = SeededKeys.p384(seed: seed, label: "receipt-root")
        let intermediateKey = SeededKeys.p256(seed: seed, label: "receipt-intermediate")
        let signerKey = SeededKeys.p256(seed: seed, label: "receipt-signer")
        let rootName = try DistinguishedName {
            CommonName("FormAttest Simulated Root CA - G3")
            OrganizationName("FormAttest Simulator")
        }
        let intermediateName = try DistinguishedName {
            CommonName("FormAttest Simulated Application Integration CA")
            OrganizationName("FormAttest Simulator")
        }
        let signerName = try DistinguishedName {
            CommonName("FormAttest Simulated Fraud Receipt Signing")
            OrganizationName("FormAttest Simulator")
        }
        let from = SimulatedAttestationAuthority.validFrom
        let until = SimulatedAttestationAuthority.intermediateValidUntil
        self.rootCertificate = try SimulatedCertificates.authority(
            serial: SeededKeys.bytes(seed: seed, label: "receipt-root-serial", count: 8),
            publicKey: .init(rootKey.publicKey),
            subject: rootName,
            issuer: rootName,
            issuerKey: .init(rootKey),
            validity: (from, SimulatedAttestationAuthority.rootValidUntil),
            pathLength: nil,
            subjectKeyIdentifier: false
        )
        self.intermediateCertificate = try SimulatedCertificates.authority(
            serial: SeededKeys.bytes(seed: seed, label: "receipt-intermediate-serial", count: 16),
            publicKey: .init(intermediateKey.publicKey),
            subject: intermediateName,
            issuer: rootName,
            issuerKey: .init(rootKey),
            validity: (from, until),
            pathLength: 0,
            subjectKeyIdentifier: false
        )
        self.signerCertificate = try Certificate(
            version: .v3,
            serialNumber: .init(bytes: SeededKeys.bytes(seed: seed, label: "receipt-signer-serial", count: 16)),
            publicKey: .init(signerKey.publicKey),
            notValidBefore: from,
            notValidAfter: until,
            issuer: intermediateName,
            subject: signerName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
            },
            issuerPrivateKey: .init(intermediateKey)
        )
        self.signerKey = signerKey
    }

    /// What a receipt says.
    public struct Content: Sendable {
        public var appID: String
        public var attestedCertificate: [UInt8]
        public var clientHash: [UInt8]
        public var token: String
        public var type: ReceiptPayload.ReceiptType
        public var environment: AppAttestEnvironment
        public var creationTime: Date
        public var riskMetric: Int?
        public var notBefore: Date?
        public var expirationTime: Date

        /// An attestation receipt: type ATTEST, expiring 90 days after `creationTime`.
        public init(
            appID: String,
            attestedCertificate: [UInt8],
            clientHash: [UInt8],
            environment: AppAttestEnvironment,
            creationTime: Date
        ) {
            self.appID = appID
            self.attestedCertificate = attestedCertificate
            self.clientHash = clientHash
            self.token = Data(SHA256.hash(data: attestedCertificate + clientHash)).base64EncodedString()
            self.type = .attest
            self.environment = environment
            self.creationTime = creationTime
            self.riskMetric = nil
            self.notBefore = nil
            self.expirationTime = creationTime.addingTimeInterval(90 * 86_400)
        }
    }

    /// Signs a receipt.
    public func receipt(_ content: Content) throws -> [UInt8] {
        func field(_ type: Int, _ value: [UInt8]) throws -> [UInt8] {
            try DERBytes.sequence([DERBytes.integer(type), DERBytes.integer(1), DERBytes.tlv(0x04, value)])
        }
        func text(_ type: Int, _ value: String) throws -> [UInt8] { try field(type, Array(value.utf8)) }
        var fields = [
            try text(ReceiptPayload.FieldType.appID, content.appID),
            try field(ReceiptPayload.FieldType.attestedCertificate, content.attestedCertificate),
            try field(ReceiptPayload.FieldType.clientHash, content.clientHash),
            try text(ReceiptPayload.FieldType.token, content.token),
            try text(ReceiptPayload.FieldType.receiptType, content.type.rawValue),
            try text(ReceiptPayload.FieldType.environment, content.environment == .development ? "sandbox" : "production"),
            try text(ReceiptPayload.FieldType.creationTime, RFC3339UTC.format(content.creationTime)),
        ]
        if let metric = content.riskMetric {
            fields.append(try text(ReceiptPayload.FieldType.riskMetric, String(metric)))
        }
        if let notBefore = content.notBefore {
            fields.append(try text(ReceiptPayload.FieldType.notBefore, RFC3339UTC.format(notBefore)))
        }
        fields.append(try text(ReceiptPayload.FieldType.expirationTime, RFC3339UTC.format(content.expirationTime)))
        let payload = try DERBytes.tlv(0x31, fields.flatMap { $0 })
        return try self.sign(payload)
    }

    /// Wraps `payload` in a SignedData the way Apple's receipts are laid out.
    func sign(_ payload: [UInt8]) throws -> [UInt8] {
        let signature = try self.signerKey.signature(for: payload).derRepresentation
        var issuer = DER.Serializer()
        try issuer.serialize(self.signerCertificate.issuer)
        let sha256 = try DERBytes.sequence([DERBytes.oid([2, 16, 840, 1, 101, 3, 4, 2, 1]), [0x05, 0x00]])
        let signerInfo = try DERBytes.sequence([
            DERBytes.integer(1),
            DERBytes.sequence([issuer.serializedBytes, DERBytes.tlv(0x02, Array(self.signerCertificate.serialNumber.bytes))]),
            sha256,
            DERBytes.sequence([DERBytes.oid([1, 2, 840, 10045, 4, 3, 2])]),
            DERBytes.tlv(0x04, Array(signature)),
        ])
        var certificates: [[UInt8]] = []
        for certificate in [self.signerCertificate, self.intermediateCertificate, self.rootCertificate] {
            var serializer = DER.Serializer()
            try serializer.serialize(certificate)
            certificates.append(serializer.serializedBytes)
        }
        // 1000-byte primitive chunks inside a constructed, indefinite OCTET STRING (as Apple's).
        var chunks: [[UInt8]] = []
        var start = 0
        while start < payload.count {
            chunks.append(try DERBytes.tlv(0x04, Array(payload[start..<min(start + 1000, payload.count)])))
            start += 1000
        }
        let encapsulated = BERBytes.indefinite(
            0x30,
            [
                try DERBytes.oid([1, 2, 840, 113_549, 1, 7, 1]),
                BERBytes.indefinite(0xA0, [BERBytes.indefinite(0x24, chunks)]),
            ])
        let signedData = BERBytes.indefinite(
            0x30,
            [
                try DERBytes.integer(1),
                try DERBytes.tlv(0x31, sha256),
                encapsulated,
                BERBytes.indefinite(0xA0, certificates),
                try DERBytes.tlv(0x31, signerInfo),
            ])
        return BERBytes.indefinite(
            0x30,
            [
                try DERBytes.oid([1, 2, 840, 113_549, 1, 7, 2]),
                BERBytes.indefinite(0xA0, [signedData]),
            ])
    }
}

/// Definite-length TLVs, by hand for the few shapes above.
enum DERBytes {
    static func tlv(_ tag: UInt8, _ content: [UInt8]) throws -> [UInt8] {
        var bytes = [tag]
        let count = content.count
        switch count {
        case 0..<0x80: bytes.append(UInt8(count))
        case 0x80..<0x100: bytes += [0x81, UInt8(count)]
        case 0x100..<0x10000: bytes += [0x82, UInt8(count >> 8), UInt8(count & 0xff)]
        default: throw SimulatorEncodingError(reason: "a TLV of \(count) bytes")
        }
        return bytes + content
    }

    static func sequence(_ children: [[UInt8]]) throws -> [UInt8] { try self.tlv(0x30, children.flatMap { $0 }) }

    static func integer(_ value: Int) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(value)
        return serializer.serializedBytes
    }

    static func oid(_ components: ASN1ObjectIdentifier) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(components)
        return serializer.serializedBytes
    }
}

/// Indefinite-length constructed BER: `tag 0x80 children... 00 00`.
enum BERBytes {
    static func indefinite(_ tag: UInt8, _ children: [[UInt8]]) -> [UInt8] {
        [tag, 0x80] + children.flatMap { $0 } + [0x00, 0x00]
    }
}

struct SimulatorEncodingError: Error {
    let reason: String
}
