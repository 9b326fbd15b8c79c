//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import Foundation
import Testing

/// The strict parser beyond the shared vectors.
struct ParserTests {
    static func canonical(_ text: String) throws -> String {
        String(decoding: try CanonicalJSON.canonicalize(Array(text.utf8)), as: UTF8.self)
    }

    @Test(
        "grammar violations are rejected as syntax errors",
        arguments: [
            "", " ", "{", "[1,]", "{\"a\":1,}", "[01]", "[1.]", "[.5]", "[1e]", "[+1]", "[-]", "{'a':1}", "[tru]",
            "[\"a\" \"b\"]", "{\"a\" 1}", "{1:2}", "\u{FEFF}{}", "[\"\\x\"]", "[\"\\u12\"]", "[\"a\tb\"]", "[1] [2]",
            "[0x10]", "[Infinity]", "[-Infinity]", "[NaN]", "nul", "[\"\\u00G0\"]",
        ]
    )
    func syntax(text: String) throws {
        let error = try #require(throws: CanonicalJSONError.self) { try Self.canonical(text) }
        #expect(error.code == .syntax, "\(error)")
    }

    @Test("canonically equivalent names are different names, kept in code-unit order")
    func noNormalization() throws {
        #expect(try Self.canonical("{\"e\\u0301\":2,\"\\u00e9\":1}") == "{\"e\u{301}\":2,\"\u{e9}\":1}")
        // Swift's String == would call these one key; JCS keeps both.
        #expect("e\u{301}" == "\u{e9}")
    }

    @Test("a duplicate is found after unescaping, even deep inside arrays")
    func duplicates() throws {
        for text in ["{\"a\":1,\"\\u0061\":1}", "[[{\"x\":{\"k\":1,\"k\":2}}]]", "{\"\\ud83d\\ude00\":1,\"😀\":2}"] {
            let error = try #require(throws: CanonicalJSONError.self) { try Self.canonical(text) }
            #expect(error.code == .duplicateName)
        }
    }

    @Test("depth and size limits")
    func limits() throws {
        let deep = String(repeating: "[", count: 65) + String(repeating: "]", count: 65)
        #expect((try #require(throws: CanonicalJSONError.self) { try Self.canonical(deep) }).code == .tooDeep)
        let ok = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
        #expect(try Self.canonical(ok) == ok)
        let small = CanonicalJSON.Limits(maximumSize: 4, maximumDepth: 64)
        #expect(throws: CanonicalJSONError(code: .tooLarge, reason: "", offset: 0)) {
            try CanonicalJSON.canonicalize(Array("[1,2]".utf8), limits: small)
        }
    }

    @Test("errors carry the byte offset of the problem")
    func offsets() throws {
        let error = try #require(throws: CanonicalJSONError.self) { try Self.canonical("{\"a\":[1,2,}") }
        #expect(error.offset == 10)
    }

    @Test("a long run of plain ASCII in a string (copied at once) ends at a quote, an escape, a multi-byte scalar or a control character")
    func asciiRuns() throws {
        let run = String(repeating: "QUJD+/=-_", count: 700)  // 6,300 bytes, base64-like
        let text = #"{"a":""# + run + #"\"\n"# + run + "é" + run + #"","b":""# + run + #""}"#
        let parsed = try CanonicalJSON.parse(Array(text.utf8))
        #expect(parsed["a"]?.stringValue == run + "\"\n" + run + "é" + run)
        #expect(parsed["b"]?.stringValue == run)
        #expect(try Self.canonical(text) == text)
        // One change: a raw control character inside the run, refused at its own offset.
        let broken = #"{"a":""# + run + "\u{01}" + run + #""}"#
        let error = try #require(throws: CanonicalJSONError.self) { try Self.canonical(broken) }
        #expect(error.code == .syntax)
        #expect(error.offset == 6 + run.utf8.count)
        // And an ill-formed byte after a run (0xFF never starts UTF-8), at its offset.
        var bytes = Array(#"{"a":""#.utf8) + Array(run.utf8)
        bytes.append(0xFF)
        bytes += Array(#""}"#.utf8)
        let invalid = try #require(throws: CanonicalJSONError.self) { try CanonicalJSON.parse(bytes) }
        #expect(invalid.code == .invalidUTF8)
        #expect(invalid.offset == 6 + run.utf8.count)
    }

    @Test("Encodable values canonicalize through the same parser")
    func encodable() throws {
        struct Transfer: Encodable {
            var to: String
            var amount: Double
            var memo: String
        }
        let bytes = try CanonicalJSON.canonicalize(encoding: Transfer(to: "alice", amount: 1234.50, memo: "rent / June"))
        #expect(String(decoding: bytes, as: UTF8.self) == #"{"amount":1234.5,"memo":"rent / June","to":"alice"}"#)
    }

    @Test("parsed values expose members by exact name")
    func access() throws {
        let value = try CanonicalJSON.parse(Array(#"{"timestamp":"2026-11-22T00:00:00Z","n":1}"#.utf8))
        #expect(value["timestamp"]?.stringValue == "2026-11-22T00:00:00Z")
        #expect(value["n"] == .number(1))
        #expect(value["missing"] == nil)
    }

    @Test("seeded random byte strings never trap the parser")
    func randomInputs() throws {
        var state: UInt64 = 0x1234
        func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        let alphabet = Array(#"{}[]:,"\u0123456789abcdefeE+-.tnl "#.utf8) + [0xC3, 0xA9, 0xED, 0xF0, 0x9F]
        var accepted = 0
        for _ in 0..<20_000 {
            let length = Int(next() % 24)
            let bytes = (0..<length).map { _ in alphabet[Int(next() % UInt64(alphabet.count))] }
            if let output = try? CanonicalJSON.canonicalize(bytes) {
                accepted += 1
                #expect(try CanonicalJSON.canonicalize(output) == output)
            }
        }
        #expect(accepted > 0)
    }
}
