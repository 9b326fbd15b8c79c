//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import CanonicalJSON

/// Which view of the input to show.
public enum InspectionMode: String, Sendable, Hashable, CaseIterable {
    /// Each field by name with what it means (the default).
    case semantic
    /// The semantic view with each field's offset, length and raw bytes.
    case forensic
    /// Every CBOR item and ASN.1 item with its offset, header length, length and value.
    case tree
}

/// A decoded view of an App Attest attestation object, an assertion or a receipt.
///
/// Pure: bytes in, text and JSON out, never a verdict (no "valid", no checkmarks). The command
/// line (`formattest inspect`), the HTTP API (`POST /api/appattest/inspect`) and the demo page all
/// show what this produces. Malformed input is shown up to the fault; nothing makes it trap.
public struct Inspection: Sendable {
    /// The largest input inspected: 64 KiB (real attestation objects are under 6 KB).
    public static let maximumInputSize = 64 * 1024

    public let mode: InspectionMode
    public let input: [UInt8]
    public let root: InspectionNode

    /// Inspects `bytes`: a CBOR attestation object or assertion, a DER/BER receipt, or a DER certificate.
    public init(_ bytes: [UInt8], mode: InspectionMode) {
        self.mode = mode
        self.input = bytes
        if bytes.count > Self.maximumInputSize {
            self.root = .undecodable(
                "input",
                reason: "\(bytes.count) bytes; at most \(Self.maximumInputSize) are inspected",
                range: nil
            )
        } else if bytes.isEmpty {
            self.root = .undecodable("input", reason: "empty", range: nil)
        } else {
            self.root = mode == .tree ? TreeView.view(bytes) : SemanticView.view(bytes)
        }
    }

    // MARK: - Text

    /// The view as indented text lines.
    public var text: String {
        var lines: [String] = []
        self.appendText(self.root, depth: 0, to: &lines)
        return lines.joined(separator: "\n") + "\n"
    }

    private func appendText(_ node: InspectionNode, depth: Int, to lines: inout [String]) {
        let indent = String(repeating: "  ", count: depth)
        let line = indent + node.label + (node.value.map { ": \($0)" } ?? "")
        switch self.mode {
        case .semantic:
            lines.append(line)
        case .forensic:
            let location = node.range.map { Self.pad($0.lowerBound, 6) + " " + Self.pad($0.count, 5) } ?? String(repeating: " ", count: 12)
            lines.append(location + "  " + line)
            if node.children.isEmpty, let bytes = self.bytes(of: node) {
                let prefix = String(repeating: " ", count: 14) + indent + "  | "
                var start = 0
                repeat {
                    lines.append(prefix + hex(bytes[start..<min(start + 32, bytes.count)]))
                    start += 32
                } while start < bytes.count
            }
        case .tree:
            var location = String(repeating: " ", count: 20)
            if let range = node.range {
                let header = node.headerLength ?? 0
                let length = node.indefiniteLength ? "inf" : String(range.count - header)
                location = Self.pad(range.lowerBound, 6) + " hl=" + String(header) + " l=" + Self.pad(length, 5)
                location += String(repeating: " ", count: max(0, 20 - location.count))
            }
            lines.append(location + "  " + line)
        }
        for child in node.children {
            self.appendText(child, depth: depth + 1, to: &lines)
        }
    }

    private static func pad(_ value: some CustomStringConvertible, _ width: Int) -> String {
        let text = value.description
        return String(repeating: " ", count: max(0, width - text.count)) + text
    }

    /// The raw bytes a node stands for.
    private func bytes(of node: InspectionNode) -> [UInt8]? {
        if let detached = node.detachedBytes { return detached }
        guard let range = node.range, range.lowerBound >= 0, range.upperBound <= self.input.count, !range.isEmpty else {
            return nil
        }
        return Array(self.input[range])
    }

    // MARK: - JSON

    /// The view as JSON: `{"mode", "size", "root"}`; each node is `{"label", "value"?, "children"?}`
    /// plus `offset`, `length` and (for leaves) `hex` in the forensic view, and `offset`,
    /// `headerLength` and `length` (`null` when indefinite) in the tree view.
    public var json: JSONValue { self.json(includingText: false) }

    /// ``json``, with the ``text`` rendering as a `text` member when asked (the HTTP API sends both).
    public func json(includingText: Bool) -> JSONValue {
        var members: [(name: String, value: JSONValue)] = [
            ("mode", .string(JSONString(self.mode.rawValue))),
            ("size", .number(Double(self.input.count))),
            ("root", self.json(self.root)),
        ]
        if includingText { members.append(("text", .string(JSONString(self.text)))) }
        return .object(JSONObject(constantMembers: members))
    }

    /// A lower bound of the size in bytes of `json(includingText:).canonicalBytes`, from the
    /// nodes alone, without building the JSON or the text: each node's label and value appear in
    /// the JSON (escaping only lengthens them) with at least their member names and punctuation,
    /// its offsets in the tree view, and once more in the text line. A caller that must refuse
    /// answers over a size refuses when this is over it, before paying for the rendering.
    public func minimumAnswerSize(includingText: Bool) -> Int {
        // `{"mode":"…","root":…,"size":N}`, and `,"text":""` when asked.
        var total = 27 + self.mode.rawValue.utf8.count + String(self.input.count).utf8.count + (includingText ? 10 : 0)
        var stack: [(node: InspectionNode, depth: Int)] = [(self.root, 0)]
        while let (node, depth) = stack.popLast() {
            let label = node.label.utf8.count
            let value = node.value.map { $0.utf8.count }
            // `{"label":"…"}`, `,"value":"…"`, `,"children":[…]` with a comma between children.
            total += 12 + label + (value.map { 11 + $0 } ?? 0) + (node.children.isEmpty ? 0 : 13 + node.children.count)
            if self.mode == .tree, let range = node.range {
                // `,"offset":N,"headerLength":N,"length":N|null`.
                total += 36 + String(range.lowerBound).utf8.count + String(node.headerLength ?? 0).utf8.count + (node.indefiniteLength ? 4 : 1)
            }
            if self.mode == .forensic {
                // `,"offset":N,"length":N`, and a leaf's `,"hex":"…"` (two digits a byte), which the
                // text shows again (at least two digits a byte).
                if let range = node.range { total += 20 + String(range.lowerBound).utf8.count + String(range.count).utf8.count }
                if node.children.isEmpty, let count = self.bytes(of: node)?.count {
                    total += 9 + 2 * count + (includingText ? 2 * count : 0)
                }
            }
            if includingText {
                // The line: indentation, label, `: value`, its newline (escaped: two bytes), and
                // in the tree view the 20-column location and two spaces.
                total += 2 * depth + label + (value.map { 2 + $0 } ?? 0) + 2 + (self.mode == .tree ? 22 : 0)
            }
            for child in node.children { stack.append((child, depth + 1)) }
        }
        return total
    }

    /// ``json`` serialized (RFC 8785: sorted keys, no whitespace).
    public var jsonText: String { String(decoding: self.json.canonicalBytes, as: UTF8.self) }

    private func json(_ node: InspectionNode) -> JSONValue {
        var members: [(name: String, value: JSONValue)] = [("label", .string(JSONString(node.label)))]
        if let value = node.value { members.append(("value", .string(JSONString(value)))) }
        switch self.mode {
        case .semantic:
            break
        case .forensic:
            if let range = node.range {
                members.append(("offset", .number(Double(range.lowerBound))))
                members.append(("length", .number(Double(range.count))))
            }
            if node.children.isEmpty, let bytes = self.bytes(of: node) {
                members.append(("hex", .string(JSONString(hex(bytes)))))
            }
        case .tree:
            if let range = node.range {
                let header = node.headerLength ?? 0
                members.append(("offset", .number(Double(range.lowerBound))))
                members.append(("headerLength", .number(Double(header))))
                members.append(("length", node.indefiniteLength ? .null : .number(Double(range.count - header))))
            }
        }
        if !node.children.isEmpty {
            members.append(("children", .array(node.children.map { self.json($0) })))
        }
        return .object(JSONObject(constantMembers: members))
    }
}
