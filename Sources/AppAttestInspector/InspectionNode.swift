//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// One line of an inspection: a named part of the input, what it decodes to, and where it is.
///
/// The three views build trees of these; the renderers turn a tree into text or JSON. A node
/// never says whether anything is valid: it shows what the bytes are.
public struct InspectionNode: Sendable, Hashable {
    /// What this part is (`authData`, `flags`, `SEQUENCE`, ...).
    public var label: String
    /// What it decodes to, when it is a leaf or has a short summary.
    public var value: String?
    /// Where it is in the input (absolute offsets), when it is one contiguous run of bytes.
    public var range: Range<Int>?
    /// The raw bytes when they are not one contiguous run of the input (a receipt field split
    /// across BER chunks); otherwise the renderers read them from the input through ``range``.
    public var detachedBytes: [UInt8]?
    /// Tree view: the length of the item's header (CBOR initial bytes, ASN.1 tag and length).
    public var headerLength: Int?
    /// Tree view: an ASN.1 item with indefinite length (its content ends with end-of-contents).
    public var indefiniteLength: Bool
    /// The parts of this part.
    public var children: [InspectionNode]

    public init(
        _ label: String,
        value: String? = nil,
        range: Range<Int>? = nil,
        detachedBytes: [UInt8]? = nil,
        headerLength: Int? = nil,
        indefiniteLength: Bool = false,
        children: [InspectionNode] = []
    ) {
        self.label = label
        self.value = value
        self.range = range
        self.detachedBytes = detachedBytes
        self.headerLength = headerLength
        self.indefiniteLength = indefiniteLength
        self.children = children
    }

    /// A part that could not be decoded: the inspector shows where and why, and goes on.
    static func undecodable(_ label: String, reason: String, range: Range<Int>?) -> InspectionNode {
        InspectionNode(label, value: "undecodable: \(reason)", range: range)
    }

    /// This node with every range (and so every offset) moved by `offset`.
    func shifted(by offset: Int) -> InspectionNode {
        var node = self
        node.range = self.range.map { ($0.lowerBound + offset)..<($0.upperBound + offset) }
        node.children = self.children.map { $0.shifted(by: offset) }
        return node
    }
}

/// Lowercase hex.
func hex(_ bytes: some Sequence<UInt8>) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out: [UInt8] = []
    for byte in bytes {
        out.append(digits[Int(byte >> 4)])
        out.append(digits[Int(byte & 0x0f)])
    }
    return String(decoding: out, as: UTF8.self)
}
