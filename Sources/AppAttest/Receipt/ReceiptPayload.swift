//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Foundation
import RFC3339
import SwiftASN1
public import X509

/// The signed content of an App Attest receipt.
///
/// ```
/// ReceiptAttribute ::= SEQUENCE { type INTEGER, version INTEGER, value OCTET STRING }
/// Payload ::= SET OF ReceiptAttribute
/// ```
///
/// Field types (Apple, "Assessing fraud risk"): 2 app id, 3 attested key's certificate (DER),
/// 4 client hash, 5 token, 6 receipt type, 12 creation time, 17 risk metric, 19 not before,
/// 21 expiration time; 7 (undocumented) reads `sandbox` in development receipts. Times are
/// RFC 3339 strings. Every field is kept in ``fields``, including types not listed here.
public struct ReceiptPayload: Sendable {
    /// One `ReceiptAttribute`, as signed.
    public struct Field: Sendable, Hashable {
        /// The attribute type (2 = app id, ...).
        public let type: Int
        /// The attribute version (1 in every receipt seen).
        public let version: Int
        /// The value's octets.
        public let value: [UInt8]
    }

    /// What kind of receipt this is: ``attest`` in an attestation, ``receipt`` after a refresh.
    public struct ReceiptType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { self.rawValue }

        /// The receipt that came with an attestation (no risk metric).
        public static let attest = ReceiptType(rawValue: "ATTEST")
        /// A receipt returned by Apple's refresh endpoint (with a risk metric).
        public static let receipt = ReceiptType(rawValue: "RECEIPT")
    }

    /// Field type numbers.
    public enum FieldType {
        public static let appID = 2
        public static let attestedCertificate = 3
        public static let clientHash = 4
        public static let token = 5
        public static let receiptType = 6
        public static let environment = 7
        public static let creationTime = 12
        public static let riskMetric = 17
        public static let notBefore = 19
        public static let expirationTime = 21
    }

    /// Every attribute, in the order signed.
    public let fields: [Field]
    /// Field 2: the app id (`TEAMID.bundleID`).
    public let appID: String
    /// Field 3: the attested key's certificate, as DER.
    public let attestedCertificateDER: [UInt8]
    /// Field 3, parsed (on demand: a receipt checked against its attestation compares the DER).
    public var attestedCertificate: Certificate {
        get throws(AppAttestError) {
            do {
                return try Certificate(derEncoded: self.attestedCertificateDER)
            } catch {
                throw AppAttestError.receiptMalformed("field 3 is not a DER certificate: \(error)")
            }
        }
    }
    /// Field 4: the client hash (for an attestation receipt, the clientDataHash given to `attestKey`).
    public let clientHash: [UInt8]
    /// Field 5: an opaque token.
    public let token: String
    /// Field 6.
    public let type: ReceiptType
    /// Field 7, when present (`sandbox` for development receipts).
    public let environment: String?
    /// Field 12.
    public let creationTime: Date
    /// Field 17: the risk metric (refreshed receipts only).
    public let riskMetric: Int?
    /// Field 19: before this time Apple returns the same receipt (refreshed receipts only).
    public let notBefore: Date?
    /// Field 21: after this time Apple no longer refreshes the receipt.
    public let expirationTime: Date

    /// Decodes the payload.
    ///
    /// - Throws: ``AppAttestError/Code/receiptMalformed`` when the structure is wrong, a required
    ///   field (2, 3, 4, 5, 6, 12, 21) is missing, a field appears twice, or a value does not decode.
    public init(derEncoded bytes: [UInt8]) throws(AppAttestError) {
        let fields: [Field]
        do {
            fields = try BER.set(BER.parse(bytes), identifier: .set) { nodes in
                var fields: [Field] = []
                while let node = nodes.next() {
                    fields.append(
                        try BER.sequence(node, identifier: .sequence) { nodes in
                            let type = try Int(berEncoded: &nodes)
                            let version = try Int(berEncoded: &nodes)
                            let value = try ASN1OctetString(berEncoded: &nodes)
                            return Field(type: type, version: version, value: Array(value.bytes))
                        }
                    )
                }
                return fields
            }
        } catch {
            throw AppAttestError.receiptMalformed("the payload is not a SET OF SEQUENCE { INTEGER, INTEGER, OCTET STRING }: \(error)")
        }
        var byType: [Int: [UInt8]] = [:]
        for field in fields {
            guard byType.updateValue(field.value, forKey: field.type) == nil else {
                throw AppAttestError.receiptMalformed("field \(field.type) appears twice")
            }
        }
        func required(_ type: Int, _ name: String) throws(AppAttestError) -> [UInt8] {
            guard let value = byType[type] else {
                throw AppAttestError.receiptMalformed("field \(type) (\(name)) is missing")
            }
            return value
        }
        func string(_ value: [UInt8], _ type: Int) throws(AppAttestError) -> String {
            guard let string = String(validating: value, as: UTF8.self) else {
                throw AppAttestError.receiptMalformed("field \(type) is not UTF-8")
            }
            return string
        }
        func time(_ value: [UInt8], _ type: Int) throws(AppAttestError) -> Date {
            let text = try string(value, type)
            guard let date = RFC3339UTC.parse(text) else {
                throw AppAttestError.receiptMalformed("field \(type) is not an RFC 3339 time: \(text)")
            }
            return date
        }
        /// Fields 17 and 19 may be present but empty in an attestation receipt.
        func optional(_ type: Int) throws(AppAttestError) -> String? {
            guard let value = byType[type], !value.isEmpty else { return nil }
            return try string(value, type)
        }

        self.fields = fields
        self.appID = try string(required(FieldType.appID, "app id"), FieldType.appID)
        self.attestedCertificateDER = try required(FieldType.attestedCertificate, "attested certificate")
        self.clientHash = try required(FieldType.clientHash, "client hash")
        self.token = try string(required(FieldType.token, "token"), FieldType.token)
        self.type = ReceiptType(rawValue: try string(required(FieldType.receiptType, "type"), FieldType.receiptType))
        self.environment = try optional(FieldType.environment)
        self.creationTime = try time(required(FieldType.creationTime, "creation time"), FieldType.creationTime)
        if let metric = try optional(FieldType.riskMetric) {
            guard let value = Int(metric), value >= 0 else {
                throw AppAttestError.receiptMalformed("field 17 (risk metric) is not a count: \(metric)")
            }
            self.riskMetric = value
        } else {
            self.riskMetric = nil
        }
        if let notBefore = try optional(FieldType.notBefore) {
            self.notBefore = try time(Array(notBefore.utf8), FieldType.notBefore)
        } else {
            self.notBefore = nil
        }
        self.expirationTime = try time(required(FieldType.expirationTime, "expiration time"), FieldType.expirationTime)
    }
}
