//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// Writes RFC 8785 canonical JSON: no whitespace, members already in canonical order, strings
/// escaped as §3.2.2.2 says, numbers as ECMAScript prints them (§3.2.2.3).
struct CanonicalWriter {
    private(set) var bytes: [UInt8] = []

    init(reservingCapacity capacity: Int = 256) {
        self.bytes.reserveCapacity(capacity)
    }

    mutating func write(_ value: JSONValue) {
        switch value {
        case .null:
            self.bytes.append(contentsOf: [0x6E, 0x75, 0x6C, 0x6C])  // null
        case .bool(true):
            self.bytes.append(contentsOf: [0x74, 0x72, 0x75, 0x65])  // true
        case .bool(false):
            self.bytes.append(contentsOf: [0x66, 0x61, 0x6C, 0x73, 0x65])  // false
        case .number(let number):
            ECMAScriptNumber.append(number, to: &self.bytes)
        case .string(let string):
            self.writeString(string.utf8)
        case .array(let elements):
            self.bytes.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { self.bytes.append(UInt8(ascii: ",")) }
                self.write(element)
            }
            self.bytes.append(UInt8(ascii: "]"))
        case .object(let object):
            self.bytes.append(UInt8(ascii: "{"))
            for (index, member) in object.members.enumerated() {
                if index > 0 { self.bytes.append(UInt8(ascii: ",")) }
                self.writeString(member.name.utf8)
                self.bytes.append(UInt8(ascii: ":"))
                self.write(member.value)
            }
            self.bytes.append(UInt8(ascii: "}"))
        }
    }

    /// RFC 8785 §3.2.2.2: escape `"`, `\` and C0 controls (with the short forms \b \t \n \f \r and
    /// lowercase `\u00xx` otherwise); everything else, `/` and non-ASCII included, is copied raw.
    private mutating func writeString(_ utf8: [UInt8]) {
        self.bytes.append(UInt8(ascii: "\""))
        // Runs that need no escape (all but controls, quote and backslash) are copied whole.
        var run = 0
        for index in utf8.indices {
            let byte = utf8[index]
            guard byte < 0x20 || byte == 0x22 || byte == 0x5C else { continue }
            self.bytes.append(contentsOf: utf8[run..<index])
            self.writeEscaped(byte)
            run = index + 1
        }
        self.bytes.append(contentsOf: utf8[run...])
        self.bytes.append(UInt8(ascii: "\""))
    }

    /// The escape of one byte that needs it: the short forms, `\u00xx` for the other controls.
    private mutating func writeEscaped(_ byte: UInt8) {
        switch byte {
        case 0x22: self.bytes.append(contentsOf: [0x5C, 0x22])
        case 0x5C: self.bytes.append(contentsOf: [0x5C, 0x5C])
        case 0x08: self.bytes.append(contentsOf: [0x5C, UInt8(ascii: "b")])
        case 0x09: self.bytes.append(contentsOf: [0x5C, UInt8(ascii: "t")])
        case 0x0A: self.bytes.append(contentsOf: [0x5C, UInt8(ascii: "n")])
        case 0x0C: self.bytes.append(contentsOf: [0x5C, UInt8(ascii: "f")])
        case 0x0D: self.bytes.append(contentsOf: [0x5C, UInt8(ascii: "r")])
        default:
            let hex = Array("0123456789abcdef".utf8)
            self.bytes.append(contentsOf: [0x5C, UInt8(ascii: "u"), 0x30, 0x30, hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
        }
    }
}
