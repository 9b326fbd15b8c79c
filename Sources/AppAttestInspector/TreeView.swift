//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import CBOR

/// The lossless view: every CBOR item and every ASN.1 item, with its offset, header length,
/// length and value. Byte strings and OCTET/BIT STRINGs whose content is itself one constructed
/// BER item (certificates, the receipt, extension values) are shown decoded below them; authData
/// is split into its fixed fields and its CBOR items. Nothing is interpreted beyond that.
enum TreeView {
    static func view(_ bytes: [UInt8]) -> InspectionNode {
        if bytes.first == 0x30 {
            do {
                return self.asn1(try BERWalker.single(bytes), in: bytes)
            } catch {
                return .undecodable("ASN.1", reason: "at offset \(error.offset): \(error.reason)", range: 0..<bytes.count)
            }
        }
        do {
            return self.cbor(try CBORDecoder.decode(bytes), in: bytes, base: 0, parentKey: nil)
        } catch {
            return .undecodable("CBOR", reason: "\(error)", range: 0..<bytes.count)
        }
    }

    // MARK: - CBOR

    /// `item`'s ranges are relative to `base` in `bytes`.
    static func cbor(_ item: CBORItem, in bytes: [UInt8], base: Int, parentKey: String?) -> InspectionNode {
        let range = (base + item.range.lowerBound)..<(base + item.range.upperBound)
        var node = InspectionNode("", range: range, headerLength: item.headerLength)
        switch item.value {
        case .unsigned(let n):
            node.label = "unsigned"
            node.value = "\(n)"
        case .negative(let n):
            node.label = "negative"
            node.value = "-\(UInt128(n) + 1)"
        case .textString(let text):
            node.label = "text(\(text.utf8.count))"
            node.value = "\"\(text)\""
        case .byteString(let content):
            node.label = "bytes(\(content.count))"
            let contentStart = range.lowerBound + item.headerLength
            if parentKey == "authData" || parentKey == "authenticatorData" {
                node.value = "(authenticator data, below)"
                node.children = self.authenticatorData(content, in: bytes, base: contentStart, attested: parentKey == "authData")
            } else if content.first == 0x30, let inner = try? BERWalker.single(content) {
                node.value = "(BER, below)"
                node.children = [self.asn1(inner, in: content).shifted(by: contentStart)]
            } else {
                node.value = hex(content)
            }
        case .array(let items):
            node.label = "array(\(items.count))"
            node.children = items.map { self.cbor($0, in: bytes, base: base, parentKey: parentKey) }
        case .map(let entries):
            node.label = "map(\(entries.count))"
            for entry in entries {
                node.children.append(self.cbor(entry.key, in: bytes, base: base, parentKey: nil))
                node.children.append(self.cbor(entry.value, in: bytes, base: base, parentKey: entry.key.textString))
            }
        case .tagged(let tag, let inner):
            node.label = "tag(\(tag))"
            node.children = [self.cbor(inner, in: bytes, base: base, parentKey: parentKey)]
        case .boolean(let flag):
            node.label = "simple"
            node.value = flag ? "true" : "false"
        case .null:
            node.label = "simple"
            node.value = "null"
        case .undefined:
            node.label = "simple"
            node.value = "undefined"
        case .simple(let value):
            node.label = "simple"
            node.value = "\(value)"
        case .float(let value):
            node.label = "float"
            node.value = "\(value)"
        }
        return node
    }

    /// authData: its fixed fields as raw runs, then its CBOR items (COSE key, iOS 27 extensions).
    /// `content` starts at `base` in the input.
    static func authenticatorData(_ content: [UInt8], in bytes: [UInt8], base: Int, attested: Bool) -> [InspectionNode] {
        var nodes: [InspectionNode] = []
        var position = 0
        func raw(_ label: String, _ count: Int) -> Bool {
            guard content.count - position >= count else {
                nodes.append(
                    .undecodable(
                        label, reason: "\(content.count - position) byte(s) left, \(count) needed", range: (base + position)..<(base + content.count))
                )
                position = content.count
                return false
            }
            nodes.append(
                InspectionNode(
                    "raw(\(count)) \(label)", value: hex(content[position..<(position + count)]), range: (base + position)..<(base + position + count)
                ))
            position += count
            return true
        }
        guard raw("rpIdHash", 32), raw("flags", 1), raw("signCount", 4) else { return nodes }
        // An attestation's authData carries attested credential data; an assertion's does not
        // (Apple sets AT in both).
        if attested {
            guard raw("aaguid", 16), raw("credentialIdLength", 2) else { return nodes }
            let length = Int(content[53]) << 8 | Int(content[54])
            guard raw("credentialId", length) else { return nodes }
            guard let (key, consumed) = try? CBORDecoder.decodePrefix(content[position...]) else {
                nodes.append(.undecodable("credentialPublicKey", reason: "not CBOR", range: (base + position)..<(base + content.count)))
                return nodes
            }
            nodes.append(self.cbor(key, in: bytes, base: base + position, parentKey: nil))
            position += consumed
        }
        while position < content.count {
            guard let (item, consumed) = try? CBORDecoder.decodePrefix(content[position...]) else {
                nodes.append(
                    InspectionNode(
                        "raw(\(content.count - position)) trailing", value: hex(content[position...]),
                        range: (base + position)..<(base + content.count)))
                break
            }
            nodes.append(self.cbor(item, in: bytes, base: base + position, parentKey: nil))
            position += consumed
        }
        return nodes
    }

    // MARK: - ASN.1

    /// `item`'s offsets are indices of `bytes`.
    static func asn1(_ item: BERItem, in bytes: [UInt8]) -> InspectionNode {
        var node = InspectionNode(
            ASN1Display.tagName(item),
            range: item.range,
            headerLength: item.headerLength,
            indefiniteLength: item.contentLength == nil
        )
        if item.constructed {
            node.children = item.children.map { self.asn1($0, in: bytes) }
            return node
        }
        node.value = ASN1Display.primitiveValue(item, in: bytes)
        // An OCTET STRING or BIT STRING that holds one constructed DER item (an extension's value).
        if item.tagClass == .universal, item.tagNumber == 4 || item.tagNumber == 3 {
            let skip = item.tagNumber == 3 ? 1 : 0
            let content = Array(bytes[item.contentRange].dropFirst(skip))
            if let first = content.first, first & 0x20 != 0, let inner = try? BERWalker.single(content) {
                node.value = item.tagNumber == 3 ? "0 unused bit(s), encapsulates:" : "encapsulates:"
                node.children = [self.asn1(inner, in: content).shifted(by: item.contentRange.lowerBound + skip)]
            }
        }
        return node
    }
}
