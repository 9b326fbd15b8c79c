//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import CBOR
import FormAttestForm
import Foundation
import RFC3339
import SwiftASN1
import X509

/// The semantic view (and, through its ranges, the forensic one): each field by name with what it
/// means. Built tolerantly from the CBOR and BER items, so that a malformed part is shown as
/// undecodable where it is and the rest is still shown. It never says whether anything is valid.
enum SemanticView {
    static func view(_ bytes: [UInt8]) -> InspectionNode {
        if bytes.first == 0x30 {
            // A ContentInfo starts with its content type (an OID); a certificate with its TBS SEQUENCE.
            if let top = try? BERWalker.single(bytes), top.parts.first?.tagNumber == 16, top.parts.first?.constructed == true {
                return self.certificate(bytes, base: 0, label: "certificate")
            }
            return self.receipt(bytes, base: 0, label: "receipt")
        }
        let item: CBORItem
        do {
            item = try CBORDecoder.decode(bytes)
        } catch {
            return .undecodable("input", reason: "\(error)", range: 0..<bytes.count)
        }
        if item[textKey: "fmt"] != nil || item[textKey: "attStmt"] != nil {
            return self.attestation(item, bytes)
        }
        if item[textKey: "signature"] != nil || item[textKey: "authenticatorData"] != nil {
            return self.assertion(item, bytes)
        }
        return InspectionNode(
            "CBOR item (neither an attestation object nor an assertion)",
            range: item.range,
            children: [TreeView.cbor(item, in: bytes, base: 0, parentKey: nil)]
        )
    }

    // MARK: - Attestation and assertion

    static func attestation(_ item: CBORItem, _ bytes: [UInt8]) -> InspectionNode {
        var root = InspectionNode("attestation object", value: "\(bytes.count) bytes", range: item.range)
        for entry in item.mapEntries ?? [] {
            let key = entry.key.textString ?? "\(entry.key.value)"
            switch (key, entry.value.value) {
            case ("fmt", .textString(let format)):
                root.children.append(InspectionNode("fmt", value: format, range: entry.value.range))
            case ("attStmt", .map(let statement)):
                var node = InspectionNode("attStmt", range: entry.value.range)
                for field in statement {
                    node.children.append(self.statementField(field, bytes))
                }
                root.children.append(node)
            case ("authData", .byteString(let content)):
                root.children.append(
                    self.authenticatorData(content, base: self.contentStart(entry.value), label: "authData", attested: true)
                )
            default:
                root.children.append(self.other(key, entry.value, bytes))
            }
        }
        return root
    }

    private static func statementField(_ field: CBORMapEntry, _ bytes: [UInt8]) -> InspectionNode {
        let key = field.key.textString ?? "\(field.key.value)"
        switch (key, field.value.value) {
        case ("x5c", .array(let certificates)):
            var node = InspectionNode("x5c", value: "\(certificates.count) certificate(s)", range: field.value.range)
            for (index, certificate) in certificates.enumerated() {
                let role = index == 0 ? "credential certificate" : index == 1 ? "intermediate" : "certificate"
                guard case .byteString(let der) = certificate.value else {
                    node.children.append(self.other("x5c[\(index)]", certificate, bytes))
                    continue
                }
                node.children.append(self.certificate(der, base: self.contentStart(certificate), label: "x5c[\(index)] \(role)"))
            }
            return node
        case ("receipt", .byteString(let receipt)):
            return self.receipt(receipt, base: self.contentStart(field.value), label: "receipt")
        default:
            return self.other(key, field.value, bytes)
        }
    }

    static func assertion(_ item: CBORItem, _ bytes: [UInt8]) -> InspectionNode {
        var root = InspectionNode("assertion", value: "\(bytes.count) bytes", range: item.range)
        for entry in item.mapEntries ?? [] {
            let key = entry.key.textString ?? "\(entry.key.value)"
            switch (key, entry.value.value) {
            case ("signature", .byteString(let signature)):
                root.children.append(self.ecdsaSignature(signature, base: self.contentStart(entry.value), label: "signature"))
            case ("authenticatorData", .byteString(let content)):
                root.children.append(
                    self.authenticatorData(content, base: self.contentStart(entry.value), label: "authenticatorData", attested: false)
                )
            default:
                root.children.append(self.other(key, entry.value, bytes))
            }
        }
        return root
    }

    private static func other(_ label: String, _ item: CBORItem, _ bytes: [UInt8]) -> InspectionNode {
        var node = TreeView.cbor(item, in: bytes, base: 0, parentKey: nil)
        node.label = "\(label) (\(node.label))"
        node.headerLength = nil
        return node
    }

    private static func contentStart(_ item: CBORItem) -> Int { item.range.lowerBound + item.headerLength }

    // MARK: - Authenticator data

    static func authenticatorData(_ content: [UInt8], base: Int, label: String, attested: Bool) -> InspectionNode {
        var node = InspectionNode(label, value: "\(content.count) bytes", range: base..<(base + content.count))
        func range(_ start: Int, _ count: Int) -> Range<Int> { (base + start)..<(base + start + count) }
        guard content.count >= AuthenticatorData.fixedLength else {
            node.children.append(.undecodable("rpIdHash | flags | signCount", reason: "\(content.count) bytes, 37 needed", range: node.range))
            return node
        }
        node.children.append(InspectionNode("rpIdHash", value: hex(content[0..<32]), range: range(0, 32)))
        node.children.append(InspectionNode("flags", value: self.flags(content[32]), range: range(32, 1)))
        let counter = content[33..<37].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        node.children.append(InspectionNode("signCount", value: "\(counter)", range: range(33, 4)))
        var position = AuthenticatorData.fixedLength
        if attested {
            guard content.count >= position + 18 else {
                node.children.append(.undecodable("attested credential data", reason: "truncated", range: range(position, content.count - position)))
                return node
            }
            let aaguid = Array(content[37..<53])
            let environment =
                AppAttestEnvironment(aaguid: aaguid).map { " (\"\(self.printable(aaguid))\": \($0.rawValue))" } ?? " (not an App Attest aaguid)"
            node.children.append(InspectionNode("aaguid", value: hex(aaguid) + environment, range: range(37, 16)))
            let length = Int(content[53]) << 8 | Int(content[54])
            node.children.append(InspectionNode("credentialIdLength", value: "\(length)", range: range(53, 2)))
            position = 55
            guard content.count >= position + length else {
                node.children.append(
                    .undecodable(
                        "credentialId", reason: "\(length) bytes announced, \(content.count - position) left",
                        range: range(position, content.count - position)))
                return node
            }
            // The keyId, spelled as everywhere else (base64url); the node's `hex` keeps the bytes.
            node.children.append(
                InspectionNode("credentialId", value: Base64URL.encode(content[position..<(position + length)]), range: range(position, length))
            )
            position += length
            guard let (key, consumed) = try? CBORDecoder.decodePrefix(content[position...]) else {
                node.children.append(.undecodable("credentialPublicKey", reason: "not CBOR", range: range(position, content.count - position)))
                return node
            }
            node.children.append(self.coseKey(key, base: base + position))
            position += consumed
        }
        if position < content.count {
            node.children.append(self.extensions(Array(content[position...]), base: base + position, edFlag: content[32] & 0x80 != 0))
        }
        return node
    }

    private static func flags(_ byte: UInt8) -> String {
        let names: [(UInt8, String)] = [
            (0x01, "UP user present"), (0x02, "RFU1"), (0x04, "UV user verified"), (0x08, "BE backup eligible"),
            (0x10, "BS backed up"), (0x20, "RFU2"), (0x40, "AT attested credential data"), (0x80, "ED extension data"),
        ]
        let set = names.filter { byte & $0.0 != 0 }.map(\.1)
        return String(format: "0x%02x", byte) + " (" + (set.isEmpty ? "none" : set.joined(separator: ", ")) + ")"
    }

    private static func coseKey(_ item: CBORItem, base: Int) -> InspectionNode {
        let range = (base + item.range.lowerBound)..<(base + item.range.upperBound)
        var node = InspectionNode("credentialPublicKey (COSE_Key)", range: range)
        let names: [Int64: String] = [1: "kty", 3: "alg", -1: "crv", -2: "x", -3: "y"]
        for entry in item.mapEntries ?? [] {
            let label = entry.key.integer.map { "\(names[$0] ?? "label") (\($0))" } ?? "\(entry.key.value)"
            let valueRange = (base + entry.value.range.lowerBound)..<(base + entry.value.range.upperBound)
            var value: String
            switch (entry.key.integer, entry.value.value) {
            case (1, _): value = "\(entry.value.integer.map(String.init) ?? "?")" + (entry.value.integer == 2 ? " (EC2)" : "")
            case (3, _): value = "\(entry.value.integer.map(String.init) ?? "?")" + (entry.value.integer == -7 ? " (ES256)" : "")
            case (-1, _): value = "\(entry.value.integer.map(String.init) ?? "?")" + (entry.value.integer == 1 ? " (P-256)" : "")
            case (_, .byteString(let bytes)): value = hex(bytes)
            default: value = CBORDisplay.summary(entry.value)
            }
            node.children.append(InspectionNode(label, value: value, range: valueRange))
        }
        return node
    }

    private static func extensions(_ content: [UInt8], base: Int, edFlag: Bool) -> InspectionNode {
        let label = "extensions (\(edFlag ? "ED flag set" : "ED flag not set, as iOS 27 writes them"))"
        guard let item = try? CBORDecoder.decode(content), let entries = item.mapEntries else {
            return .undecodable(label, reason: "\(content.count) trailing byte(s) are not one CBOR map", range: base..<(base + content.count))
        }
        var node = InspectionNode(label, value: "\(entries.count) entr\(entries.count == 1 ? "y" : "ies")", range: base..<(base + content.count))
        for entry in entries {
            let key = entry.key.textString ?? CBORDisplay.summary(entry.key)
            let valueRange = (base + entry.value.range.lowerBound)..<(base + entry.value.range.upperBound)
            node.children.append(
                InspectionNode(key, value: CBORDisplay.summary(entry.value) + self.signalMeaning(key, entry.value), range: valueRange))
        }
        return node
    }

    /// What a known signal's value means: ` = 4 (app-store)` for a category, ` = 2 (SHA-256)` for a
    /// CDHash type. Shown, never judged: a value of another shape says so and nothing more.
    private static func signalMeaning(_ key: String, _ value: CBORItem) -> String {
        switch key {
        case AuthenticatorExtensions.validationCategoryKey, AuthenticatorExtensions.validationCategoryShortKey:
            guard let category = value.byteString.flatMap(ValidationCategory.init(littleEndianBytes:)) else {
                return " (a validation category is 4 bytes, little-endian)"
            }
            return " = validation category \(category)"
        case AuthenticatorExtensions.cdHashTypeKey:
            guard let type = value.byteString.flatMap({ UInt32(littleEndianBytes: $0).map(Int64.init) }) ?? value.integer else { return "" }
            return type == Int64(AuthenticatorExtensions.cdHashTypeSHA256)
                ? " = CodeDirectory hash type 2 (SHA-256)" : " = CodeDirectory hash type \(type)"
        case AuthenticatorExtensions.cdHashKey:
            return value.byteString.map { " = CodeDirectory hash, \($0.count) bytes" } ?? ""
        default:
            return ""
        }
    }

    // MARK: - Signatures and certificates

    private static func ecdsaSignature(_ der: [UInt8], base: Int, label: String) -> InspectionNode {
        var node = InspectionNode(label, value: "\(der.count) bytes", range: base..<(base + der.count))
        guard let sequence = try? BERWalker.single(der), sequence.children.count == 2 else {
            node.value = "\(der.count) bytes, not a DER ECDSA-Sig-Value: \(hex(der))"
            return node
        }
        node.value = "ECDSA-Sig-Value, \(der.count) bytes"
        for (name, item) in zip(["r", "s"], sequence.children) {
            node.children.append(InspectionNode(name, value: hex(der[item.contentRange]), range: self.shift(item.range, base)))
        }
        return node
    }

    static func certificate(_ der: [UInt8], base: Int, label: String) -> InspectionNode {
        let whole = base..<(base + der.count)
        let walked: BERItem
        do {
            walked = try BERWalker.single(der)
        } catch {
            return .undecodable(label, reason: "not DER at offset \(base + error.offset): \(error.reason)", range: whole)
        }
        let certificate: Certificate
        do {
            certificate = try Certificate(derEncoded: der)
        } catch {
            return .undecodable(label, reason: "not an X.509 certificate: \(error)", range: whole)
        }
        guard walked.children.count == 3, walked.children[0].children.count >= 6 else {
            return .undecodable(label, reason: "not Certificate ::= SEQUENCE { tbs, algorithm, signature }", range: whole)
        }
        var node = InspectionNode(label, value: certificate.subject.description, range: whole)
        var fields = walked.children[0].children
        func r(_ item: BERItem) -> Range<Int> { self.shift(item.range, base) }
        if fields[0].tagClass == .contextSpecific, fields[0].tagNumber == 0 {
            let version = fields[0].children.first.map { ASN1Display.integer(Array(der[$0.contentRange])) } ?? "?"
            node.children.append(InspectionNode("version", value: "\(certificate.version) (\(version))", range: r(fields[0])))
            fields.removeFirst()
        }
        guard fields.count >= 6 else { return node }
        node.children.append(InspectionNode("serialNumber", value: hex(der[fields[0].contentRange]), range: r(fields[0])))
        node.children.append(InspectionNode("signature", value: self.algorithm(fields[1], der), range: r(fields[1])))
        node.children.append(InspectionNode("issuer", value: certificate.issuer.description, range: r(fields[2])))
        var validity = InspectionNode("validity", range: r(fields[3]))
        if fields[3].children.count == 2 {
            validity.children = [
                InspectionNode("notBefore", value: self.time(certificate.notValidBefore), range: r(fields[3].children[0])),
                InspectionNode("notAfter", value: self.time(certificate.notValidAfter), range: r(fields[3].children[1])),
            ]
        }
        node.children.append(validity)
        node.children.append(InspectionNode("subject", value: certificate.subject.description, range: r(fields[4])))
        node.children.append(self.publicKeyInfo(fields[5], der, base: base))
        if let extensionsItem = fields.dropFirst(6).first(where: { $0.tagClass == .contextSpecific && $0.tagNumber == 3 }),
            let list = extensionsItem.children.first
        {
            var extensions = InspectionNode("extensions", value: "\(list.children.count)", range: r(extensionsItem))
            for (item, ext) in zip(list.children, certificate.extensions) {
                extensions.children.append(self.certificateExtension(ext, item: item, in: der, base: base, certificate: certificate))
            }
            node.children.append(extensions)
        }
        node.children.append(InspectionNode("signatureAlgorithm", value: self.algorithm(walked.children[1], der), range: r(walked.children[1])))
        let signature = walked.children[2]
        node.children.append(InspectionNode("signatureValue", value: hex(der[signature.contentRange].dropFirst()), range: r(signature)))
        return node
    }

    private static func publicKeyInfo(_ item: BERItem, _ der: [UInt8], base: Int) -> InspectionNode {
        var node = InspectionNode("subjectPublicKeyInfo", range: self.shift(item.range, base))
        guard item.children.count == 2 else { return node }
        let algorithm = item.children[0]
        let oids = algorithm.children.compactMap { $0.tagNumber == 6 ? ASN1Display.objectIdentifier(Array(der[$0.contentRange])) : nil }
        node.value = oids.map { ASN1Display.oidNames[$0] ?? $0 }.joined(separator: ", ")
        node.children.append(
            InspectionNode("algorithm", value: oids.map(ASN1Display.describeOID).joined(separator: ", "), range: self.shift(algorithm.range, base)))
        let key = item.children[1]
        node.children.append(InspectionNode("subjectPublicKey", value: hex(der[key.contentRange].dropFirst()), range: self.shift(key.range, base)))
        return node
    }

    private static func certificateExtension(
        _ ext: Certificate.Extension,
        item: BERItem,
        in der: [UInt8],
        base: Int,
        certificate: Certificate
    ) -> InspectionNode {
        let oid = ext.oid.description
        let name = ASN1Display.oidNames[oid].map { "\($0) (\(oid))" } ?? oid
        var node = InspectionNode(name + (ext.critical ? ", critical" : ""), range: self.shift(item.range, base))
        let valueRange = item.children.last.map { self.shift($0.contentRange, base) }
        switch ext.oid {
        case .AppAttest.nonce:
            if let nonce = try? certificate.appAttestNonce() {
                node.value = "nonce \(hex(nonce))"
            } else {
                node.value = "not the nonce shape: \(hex(ext.value))"
            }
        case .AppAttest.appProperties, .AppAttest.osProperties:
            node.value = "\(ext.value.count) bytes"
            node.children = self.taggedEntries(Array(ext.value), base: valueRange?.lowerBound ?? base)
        case .AppAttest.accessControl:
            node.value = "\(ext.value.count) bytes, base64url \(Base64URL.encode(ext.value))"
            node.children = self.accessControl(Array(ext.value), base: valueRange?.lowerBound ?? base)
        default:
            node.value = self.knownExtension(ext) ?? hex(ext.value)
        }
        return node
    }

    private static func knownExtension(_ ext: Certificate.Extension) -> String? {
        switch ext.oid {
        case .X509ExtensionID.basicConstraints: return (try? BasicConstraints(ext)).map { "\($0)" }
        case .X509ExtensionID.keyUsage: return (try? KeyUsage(ext)).map { "\($0)" }
        case .X509ExtensionID.extendedKeyUsage: return (try? ExtendedKeyUsage(ext)).map { "\($0)" }
        // Key identifiers in plain hex (the library's description drops leading zeros of bytes).
        case .X509ExtensionID.subjectKeyIdentifier: return (try? SubjectKeyIdentifier(ext)).map { hex($0.keyIdentifier) }
        case .X509ExtensionID.authorityKeyIdentifier:
            guard let identifier = try? AuthorityKeyIdentifier(ext) else { return nil }
            return identifier.keyIdentifier.map { "keyID \(hex($0))" } ?? "\(identifier)"
        case .X509ExtensionID.authorityInformationAccess: return (try? AuthorityInformationAccess(ext)).map { "\($0)" }
        default: return nil
        }
    }

    /// The key's access control (1.2.840.113635.100.8.6, macOS 27's "ACL blob"). In Apple's 2026
    /// sample: `SEQUENCE { [3] { OCTET STRING { SEQUENCE { UTF8String, SEQUENCE OF SEQUENCE {
    /// UTF8String operation, [1] constraint } } } } }`, the operations named as the keychain names
    /// them (`osgn` sign, `oa` attest, `od` decrypt; others shown as they are). Undocumented:
    /// another shape is shown as its ASN.1 tree.
    private static func accessControl(_ value: [UInt8], base: Int) -> [InspectionNode] {
        guard let outer = try? BERWalker.single(value) else {
            return [.undecodable("value", reason: "not DER", range: base..<(base + value.count))]
        }
        guard outer.tagNumber == 16, outer.children.count == 1, let tagged = outer.children.first,
            tagged.tagClass == .contextSpecific, tagged.children.count == 1, let octets = tagged.children.first,
            octets.tagNumber == 4, !octets.constructed,
            let inner = try? BERWalker.single(Array(value[octets.contentRange])),
            inner.tagNumber == 16, inner.children.count == 2, inner.children[0].tagNumber == 12, inner.children[1].tagNumber == 16
        else {
            return [TreeView.asn1(outer, in: value).shifted(by: base)]
        }
        let content = Array(value[octets.contentRange])
        let contentBase = base + octets.contentRange.lowerBound
        let operationNames = ["osgn": "sign", "oa": "attest", "od": "decrypt"]
        var list = InspectionNode("operations", value: "\(inner.children[1].children.count)", range: self.shift(inner.children[1].range, contentBase))
        for entry in inner.children[1].children {
            guard entry.children.count == 2, entry.children[0].tagNumber == 12,
                let name = String(validating: content[entry.children[0].contentRange], as: UTF8.self)
            else {
                list.children.append(TreeView.asn1(entry, in: content).shifted(by: contentBase))
                continue
            }
            let constraint = entry.children[1]
            let shown =
                constraint.children.count == 1 && !constraint.children[0].constructed
                ? ASN1Display.primitiveValue(constraint.children[0], in: content)
                : hex(content[constraint.contentRange])
            let label = "\"\(name)\"" + (operationNames[name].map { " (\($0))" } ?? "")
            list.children.append(InspectionNode(label, value: "[\(constraint.tagNumber)] \(shown)", range: self.shift(entry.range, contentBase)))
        }
        return [
            InspectionNode(
                "[\(tagged.tagNumber)] OCTET STRING",
                value: "\(octets.contentRange.count) bytes of DER",
                range: self.shift(tagged.range, base),
                children: [
                    InspectionNode(
                        "first field", value: ASN1Display.primitiveValue(inner.children[0], in: content),
                        range: self.shift(inner.children[0].range, contentBase)),
                    list,
                ]
            )
        ]
    }

    /// Apple's `SEQUENCE { [tag] EXPLICIT value, ... }` extensions (app id [1204], OS version [1400]).
    private static func taggedEntries(_ value: [UInt8], base: Int) -> [InspectionNode] {
        guard let sequence = try? BERWalker.single(value) else {
            return [.undecodable("value", reason: "not DER", range: base..<(base + value.count))]
        }
        let known: [UInt64: String] = [1204: "app id", 1400: "OS version"]
        return sequence.children.map { entry in
            let label = "[\(entry.tagNumber)]" + (known[entry.tagNumber].map { " \($0)" } ?? "")
            guard let inner = entry.children.first, !inner.constructed else {
                return InspectionNode(label, value: hex(value[entry.contentRange]), range: self.shift(entry.range, base))
            }
            let content = Array(value[inner.contentRange])
            let text: String
            if inner.tagNumber == 2 {
                text = ASN1Display.integer(content)
            } else if let string = String(validating: content, as: UTF8.self), string.allSatisfy({ $0.isASCII && !$0.isNewline }) {
                text = "\"\(string)\""
            } else {
                text = hex(content)
            }
            return InspectionNode(label, value: text, range: self.shift(entry.range, base))
        }
    }

    private static func algorithm(_ item: BERItem, _ der: [UInt8]) -> String {
        guard let oid = item.children.first, oid.tagNumber == 6, let dotted = ASN1Display.objectIdentifier(Array(der[oid.contentRange])) else {
            return hex(der[item.range])
        }
        return ASN1Display.describeOID(dotted)
    }

    // MARK: - Receipt

    /// Payload field names (Apple, "Assessing fraud risk"; 7 is undocumented).
    static let receiptFieldNames: [Int: String] = [
        2: "app id", 3: "attested certificate", 4: "client hash", 5: "token", 6: "receipt type", 7: "environment",
        12: "creation time", 17: "risk metric", 19: "not before", 21: "expiration time",
    ]

    static func receipt(_ bytes: [UInt8], base: Int, label: String) -> InspectionNode {
        let whole = base..<(base + bytes.count)
        let top: BERItem
        do {
            top = try BERWalker.single(bytes)
        } catch {
            return .undecodable(label, reason: "not BER at offset \(base + error.offset): \(error.reason)", range: whole)
        }
        var node = InspectionNode(label + " (CMS SignedData)", value: "\(bytes.count) bytes", range: whole)
        let content = top.parts
        guard content.count == 2, let contentType = content.first, let signedData = content[1].parts.first else {
            node.children.append(.undecodable("ContentInfo", reason: "not SEQUENCE { contentType, [0] content }", range: whole))
            return node
        }
        node.children.append(
            InspectionNode("contentType", value: ASN1Display.primitiveValue(contentType, in: bytes), range: self.shift(contentType.range, base)))
        var parts = signedData.parts
        guard parts.count >= 4 else {
            node.children.append(.undecodable("SignedData", reason: "\(parts.count) parts", range: self.shift(signedData.range, base)))
            return node
        }
        node.children.append(
            InspectionNode("version", value: ASN1Display.primitiveValue(parts[0], in: bytes), range: self.shift(parts[0].range, base)))
        node.children.append(
            InspectionNode(
                "digestAlgorithms",
                value: parts[1].parts.map { self.algorithm($0, bytes) }.joined(separator: ", "),
                range: self.shift(parts[1].range, base)
            )
        )
        node.children.append(self.encapsulatedContent(parts[2], bytes, base: base))
        parts.removeFirst(3)
        if let certificates = parts.first, certificates.tagClass == .contextSpecific, certificates.tagNumber == 0 {
            var list = InspectionNode("certificates", value: "\(certificates.parts.count)", range: self.shift(certificates.range, base))
            for (index, certificate) in certificates.parts.enumerated() {
                list.children.append(
                    self.certificate(Array(bytes[certificate.range]), base: base + certificate.offset, label: "certificate[\(index)]"))
            }
            node.children.append(list)
            parts.removeFirst()
        }
        if let crls = parts.first, crls.tagClass == .contextSpecific, crls.tagNumber == 1 {
            node.children.append(InspectionNode("crls", value: hex(bytes[crls.range]), range: self.shift(crls.range, base)))
            parts.removeFirst()
        }
        if let signerInfos = parts.first {
            for signer in signerInfos.parts {
                node.children.append(self.signerInfo(signer, bytes, base: base))
            }
        }
        return node
    }

    private static func encapsulatedContent(_ item: BERItem, _ bytes: [UInt8], base: Int) -> InspectionNode {
        var node = InspectionNode("encapContentInfo", range: self.shift(item.range, base))
        let parts = item.parts
        if let type = parts.first {
            node.children.append(
                InspectionNode("eContentType", value: ASN1Display.primitiveValue(type, in: bytes), range: self.shift(type.range, base)))
        }
        guard parts.count == 2, let octets = parts[1].parts.first else { return node }
        // The payload: one OCTET STRING, or (BER) a constructed one split into primitive chunks.
        let chunks = octets.constructed ? octets.parts : [octets]
        var payload: [UInt8] = []
        var map: [(payloadStart: Int, inputStart: Int, count: Int)] = []
        for chunk in chunks {
            map.append((payload.count, base + chunk.contentRange.lowerBound, chunk.contentRange.count))
            payload += bytes[chunk.contentRange]
        }
        func absolute(_ range: Range<Int>) -> Range<Int>? {
            for part in map where range.lowerBound >= part.payloadStart && range.upperBound <= part.payloadStart + part.count {
                return (range.lowerBound - part.payloadStart + part.inputStart)..<(range.upperBound - part.payloadStart + part.inputStart)
            }
            return nil
        }
        var payloadNode = InspectionNode(
            "payload",
            value: "\(payload.count) bytes in \(chunks.count) BER chunk(s)",
            range: self.shift(octets.range, base)
        )
        guard let set = try? BERWalker.single(payload) else {
            payloadNode.children.append(InspectionNode("undecodable payload", value: hex(payload), detachedBytes: payload))
            node.children.append(payloadNode)
            return node
        }
        for field in set.children {
            let items = field.children
            guard items.count == 3, items[0].tagNumber == 2, items[2].tagNumber == 4, !items[2].constructed else {
                payloadNode.children.append(
                    InspectionNode(
                        "undecodable field", value: hex(payload[field.range]), range: absolute(field.range),
                        detachedBytes: Array(payload[field.range])))
                continue
            }
            let type = ASN1Display.integerValue(Array(payload[items[0].contentRange])).map(Int.init) ?? -1
            let version = ASN1Display.integerValue(Array(payload[items[1].contentRange])).map(Int.init) ?? -1
            let valueRange = items[2].contentRange
            let value = Array(payload[valueRange])
            let name = Self.receiptFieldNames[type].map { "field \(type) \($0)" } ?? "field \(type)"
            let label = version == 1 ? name : "\(name) (version \(version))"
            let location = absolute(valueRange)
            var fieldNode = InspectionNode(label, range: location, detachedBytes: location == nil ? value : nil)
            switch type {
            case 3:
                let certificate = self.certificate(value, base: location?.lowerBound ?? 0, label: "certificate")
                fieldNode.value = certificate.value
                fieldNode.children = location == nil ? [] : certificate.children
            case 4:
                fieldNode.value = hex(value)
            default:
                if let text = String(validating: value, as: UTF8.self), text.allSatisfy({ !$0.isNewline }) {
                    fieldNode.value = "\"\(text)\""
                } else {
                    fieldNode.value = hex(value)
                }
            }
            payloadNode.children.append(fieldNode)
        }
        node.children.append(payloadNode)
        return node
    }

    private static func signerInfo(_ item: BERItem, _ bytes: [UInt8], base: Int) -> InspectionNode {
        var node = InspectionNode("signerInfo", range: self.shift(item.range, base))
        var parts = item.parts
        guard parts.count >= 5 else { return node }
        node.children.append(
            InspectionNode("version", value: ASN1Display.primitiveValue(parts[0], in: bytes), range: self.shift(parts[0].range, base)))
        let sid = parts[1]
        if sid.parts.count == 2, let name = try? DistinguishedName(derEncoded: DER.parse(Array(bytes[sid.parts[0].range]))) {
            node.children.append(InspectionNode("sid issuer", value: name.description, range: self.shift(sid.parts[0].range, base)))
            node.children.append(
                InspectionNode("sid serialNumber", value: hex(bytes[sid.parts[1].contentRange]), range: self.shift(sid.parts[1].range, base)))
        } else {
            node.children.append(InspectionNode("sid", value: hex(bytes[sid.range]), range: self.shift(sid.range, base)))
        }
        node.children.append(InspectionNode("digestAlgorithm", value: self.algorithm(parts[2], bytes), range: self.shift(parts[2].range, base)))
        parts.removeFirst(3)
        if let attributes = parts.first, attributes.tagClass == .contextSpecific, attributes.tagNumber == 0 {
            node.children.append(InspectionNode("signedAttrs", value: hex(bytes[attributes.range]), range: self.shift(attributes.range, base)))
            parts.removeFirst()
        }
        if parts.count >= 2 {
            node.children.append(
                InspectionNode("signatureAlgorithm", value: self.algorithm(parts[0], bytes), range: self.shift(parts[0].range, base)))
            node.children.append(
                self.ecdsaSignature(Array(bytes[parts[1].contentRange]), base: base + parts[1].contentRange.lowerBound, label: "signature"))
        }
        return node
    }

    // MARK: - Helpers

    private static func shift(_ range: Range<Int>, _ base: Int) -> Range<Int> {
        (range.lowerBound + base)..<(range.upperBound + base)
    }

    private static func time(_ date: Date) -> String {
        RFC3339UTC.format(date, fractionDigits: 0)
    }

    private static func printable(_ bytes: [UInt8]) -> String {
        String(decoding: bytes.map { $0 >= 0x20 && $0 < 0x7f ? $0 : UInt8(ascii: ".") }, as: UTF8.self)
    }
}

extension BERItem {
    /// The children without end-of-contents markers.
    var parts: [BERItem] { self.children.filter { !$0.isEndOfContents } }
}

/// Short printable forms of CBOR items.
enum CBORDisplay {
    static func summary(_ item: CBORItem) -> String {
        switch item.value {
        case .unsigned(let n): return "\(n)"
        case .negative(let n): return "-\(UInt128(n) + 1)"
        case .byteString(let bytes): return "h'\(hex(bytes))'"
        case .textString(let text): return "\"\(text)\""
        case .array(let items): return "[" + items.map(summary).joined(separator: ", ") + "]"
        case .map(let entries): return "{" + entries.map { "\(summary($0.key)): \(summary($0.value))" }.joined(separator: ", ") + "}"
        case .tagged(let tag, let inner): return "\(tag)(\(summary(inner)))"
        case .boolean(let flag): return flag ? "true" : "false"
        case .null: return "null"
        case .undefined: return "undefined"
        case .simple(let value): return "simple(\(value))"
        case .float(let value): return "\(value)"
        }
    }
}
