//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// Names and printable values of ASN.1 items, for the views.
enum ASN1Display {
    /// `SEQUENCE`, `[0]`, `[APPLICATION 3]`, ...
    static func tagName(_ item: BERItem) -> String {
        switch item.tagClass {
        case .universal:
            let names: [UInt64: String] = [
                0: "END-OF-CONTENTS", 1: "BOOLEAN", 2: "INTEGER", 3: "BIT STRING", 4: "OCTET STRING", 5: "NULL",
                6: "OBJECT IDENTIFIER", 10: "ENUMERATED", 12: "UTF8String", 16: "SEQUENCE", 17: "SET",
                19: "PrintableString", 20: "T61String", 22: "IA5String", 23: "UTCTime", 24: "GeneralizedTime",
                26: "VisibleString", 30: "BMPString",
            ]
            return names[item.tagNumber] ?? "[UNIVERSAL \(item.tagNumber)]"
        case .contextSpecific: return "[\(item.tagNumber)]"
        case .application: return "[APPLICATION \(item.tagNumber)]"
        case .private: return "[PRIVATE \(item.tagNumber)]"
        }
    }

    /// The value of a primitive universal item, decoded where its type says how.
    static func primitiveValue(_ item: BERItem, in bytes: [UInt8]) -> String {
        let content = Array(bytes[item.contentRange])
        guard item.tagClass == .universal else { return hex(content) }
        switch item.tagNumber {
        case 0: return ""
        case 1: return content == [0x00] ? "FALSE" : content.count == 1 ? "TRUE (\(hex(content)))" : hex(content)
        case 2, 10: return self.integer(content)
        case 3:
            guard let unused = content.first else { return "(empty)" }
            return "\(unused) unused bit(s): \(hex(content.dropFirst()))"
        case 5: return content.isEmpty ? "" : hex(content)
        case 6: return self.objectIdentifier(content).map(self.describeOID) ?? "malformed: \(hex(content))"
        case 12, 19, 20, 22, 23, 24, 26:
            return String(validating: content, as: UTF8.self).map { "\"\($0)\"" } ?? hex(content)
        default: return hex(content)
        }
    }

    /// An INTEGER: decimal when it fits 64 bits, and always the hex.
    static func integer(_ content: [UInt8]) -> String {
        guard let value = self.integerValue(content) else {
            return content.isEmpty ? "(empty)" : "0x\(hex(content))"
        }
        return content.count <= 2 ? "\(value)" : "\(value) (0x\(hex(content)))"
    }

    /// An INTEGER's value when it fits 64 bits (two's complement, big-endian).
    static func integerValue(_ content: [UInt8]) -> Int64? {
        guard !content.isEmpty, content.count <= 8 else { return nil }
        var value = Int64(Int8(bitPattern: content[0]))
        for byte in content.dropFirst() { value = value << 8 | Int64(byte) }
        return value
    }

    /// Dotted decimal, or `nil` when the encoding is malformed.
    static func objectIdentifier(_ content: [UInt8]) -> String? {
        guard !content.isEmpty, content.last! & 0x80 == 0 else { return nil }
        var arcs: [UInt64] = []
        var value: UInt64 = 0
        for byte in content {
            guard value < (1 << 56) else { return nil }
            value = value << 7 | UInt64(byte & 0x7f)
            if byte & 0x80 == 0 {
                arcs.append(value)
                value = 0
            }
        }
        let first = arcs[0]
        let head: [UInt64] = first < 40 ? [0, first] : first < 80 ? [1, first - 40] : [2, first - 80]
        return (head + arcs.dropFirst()).map(String.init).joined(separator: ".")
    }

    static func describeOID(_ oid: String) -> String {
        self.oidNames[oid].map { "\(oid) (\($0))" } ?? oid
    }

    static let oidNames: [String: String] = [
        "1.2.840.113549.1.7.1": "id-data",
        "1.2.840.113549.1.7.2": "id-signedData",
        "1.2.840.113549.1.9.3": "content-type",
        "1.2.840.113549.1.9.4": "message-digest",
        "1.2.840.113549.1.9.5": "signing-time",
        "1.2.840.10045.2.1": "id-ecPublicKey",
        "1.2.840.10045.3.1.7": "prime256v1 (P-256)",
        "1.3.132.0.34": "secp384r1 (P-384)",
        "1.2.840.10045.4.3.2": "ecdsa-with-SHA256",
        "1.2.840.10045.4.3.3": "ecdsa-with-SHA384",
        "2.16.840.1.101.3.4.2.1": "sha256",
        "2.5.4.3": "commonName",
        "2.5.4.6": "countryName",
        "2.5.4.8": "stateOrProvinceName",
        "2.5.4.10": "organizationName",
        "2.5.4.11": "organizationalUnitName",
        "2.5.29.14": "subjectKeyIdentifier",
        "2.5.29.15": "keyUsage",
        "2.5.29.19": "basicConstraints",
        "2.5.29.31": "cRLDistributionPoints",
        "2.5.29.32": "certificatePolicies",
        "2.5.29.35": "authorityKeyIdentifier",
        "2.5.29.37": "extKeyUsage",
        "1.3.6.1.5.5.7.1.1": "authorityInfoAccess",
        "1.3.6.1.5.5.7.48.1": "ocsp",
        "1.3.6.1.5.5.7.2.1": "cps",
        "1.3.6.1.5.5.7.2.2": "unotice",
        "1.2.840.113635.100.5.1": "Apple certificate policy",
        "1.2.840.113635.100.8.2": "App Attest nonce",
        "1.2.840.113635.100.8.5": "App Attest app properties",
        "1.2.840.113635.100.8.6": "App Attest access control",
        "1.2.840.113635.100.8.7": "App Attest OS properties",
    ]
}
