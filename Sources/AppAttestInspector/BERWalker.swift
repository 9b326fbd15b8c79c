//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// A tolerant walk over BER/DER tag-length-value items, for display only.
///
/// The verifier parses ASN.1 with swift-asn1, which rejects malformed input as a whole. The
/// inspector must instead show every item up to the fault, with exact header lengths, indefinite
/// lengths and end-of-contents markers, so it walks the TLVs itself. Nothing here decides
/// validity; every read is bounds-checked and depth-limited.
struct BERItem: Sendable, Hashable {
    enum TagClass: UInt8, Sendable {
        case universal = 0, application = 1, contextSpecific = 2, `private` = 3
    }

    let offset: Int
    let headerLength: Int
    /// The content's length; `nil` for indefinite length.
    let contentLength: Int?
    let tagClass: TagClass
    let constructed: Bool
    let tagNumber: UInt64
    /// For constructed items: the children, including a final end-of-contents item when indefinite.
    let children: [BERItem]
    /// The item's end (after the end-of-contents marker for indefinite lengths).
    let end: Int

    var range: Range<Int> { self.offset..<self.end }
    var contentRange: Range<Int> {
        (self.offset + self.headerLength)..<(self.contentLength.map { self.offset + self.headerLength + $0 } ?? (self.end - 2))
    }
    var isEndOfContents: Bool { self.tagClass == .universal && self.tagNumber == 0 && !self.constructed }
}

struct BERWalkError: Error, Sendable, Hashable {
    let offset: Int
    let reason: String
}

enum BERWalker {
    static let maximumDepth = 32

    /// Walks exactly one TLV that spans `bytes` entirely.
    static func single(_ bytes: [UInt8]) throws(BERWalkError) -> BERItem {
        let item = try self.item(in: bytes, at: 0, limit: bytes.count, depth: 1)
        guard item.end == bytes.count else {
            throw BERWalkError(offset: item.end, reason: "\(bytes.count - item.end) byte(s) after the item")
        }
        return item
    }

    private static func item(in bytes: [UInt8], at start: Int, limit: Int, depth: Int) throws(BERWalkError) -> BERItem {
        guard depth <= self.maximumDepth else {
            throw BERWalkError(offset: start, reason: "nested deeper than \(self.maximumDepth)")
        }
        var position = start
        func next() throws(BERWalkError) -> UInt8 {
            guard position < limit else { throw BERWalkError(offset: position, reason: "truncated header") }
            defer { position += 1 }
            return bytes[position]
        }
        let first = try next()
        let tagClass = BERItem.TagClass(rawValue: first >> 6) ?? .universal
        let constructed = first & 0x20 != 0
        var tagNumber = UInt64(first & 0x1f)
        if tagNumber == 0x1f {
            tagNumber = 0
            while true {
                let byte = try next()
                guard tagNumber < (1 << 56) else { throw BERWalkError(offset: position - 1, reason: "tag number too large") }
                tagNumber = tagNumber << 7 | UInt64(byte & 0x7f)
                if byte & 0x80 == 0 { break }
            }
        }
        let lengthByte = try next()
        var contentLength: Int?
        if lengthByte < 0x80 {
            contentLength = Int(lengthByte)
        } else if lengthByte == 0x80 {
            guard constructed else {
                throw BERWalkError(offset: position - 1, reason: "indefinite length on a primitive item")
            }
        } else {
            let count = Int(lengthByte & 0x7f)
            guard count <= 4 else { throw BERWalkError(offset: position - 1, reason: "a \(count)-byte length") }
            var length = 0
            for _ in 0..<count { length = length << 8 | Int(try next()) }
            contentLength = length
        }
        let headerLength = position - start

        guard let length = contentLength else {
            // Indefinite: children until end-of-contents.
            var children: [BERItem] = []
            while true {
                let child = try self.item(in: bytes, at: position, limit: limit, depth: depth + 1)
                children.append(child)
                position = child.end
                if child.isEndOfContents {
                    guard child.contentLength == 0 else {
                        throw BERWalkError(offset: child.offset, reason: "end-of-contents with a length")
                    }
                    break
                }
            }
            return BERItem(
                offset: start, headerLength: headerLength, contentLength: nil, tagClass: tagClass,
                constructed: true, tagNumber: tagNumber, children: children, end: position
            )
        }
        guard length <= limit - position else {
            throw BERWalkError(offset: start, reason: "length \(length) runs past the end (\(limit - position) byte(s) left)")
        }
        let end = position + length
        let children = constructed ? try self.items(in: bytes, range: position..<end, depth: depth + 1) : []
        return BERItem(
            offset: start, headerLength: headerLength, contentLength: length, tagClass: tagClass,
            constructed: constructed, tagNumber: tagNumber, children: children, end: end
        )
    }

    /// Walks `bytes[range]` as a sequence of TLVs that fills it exactly.
    static func items(in bytes: [UInt8], range: Range<Int>, depth: Int = 1) throws(BERWalkError) -> [BERItem] {
        var position = range.lowerBound
        var items: [BERItem] = []
        while position < range.upperBound {
            let item = try self.item(in: bytes, at: position, limit: range.upperBound, depth: depth)
            items.append(item)
            position = item.end
        }
        return items
    }
}
