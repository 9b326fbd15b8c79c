//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import Testing

/// `JSONObjectMembers` reads an object without building its values; it must refuse exactly what
/// `CanonicalJSON.parse` refuses (with the same code) and find the same members.
struct ObjectMembersTests {
    static let limits = CanonicalJSON.Limits(maximumSize: 4096, maximumDepth: 4)

    /// What a reading concluded: the members (names, string values) or the error's code.
    enum Verdict: Equatable {
        case members([String: String?])
        case refused(CanonicalJSONError.Code)

        var refusal: CanonicalJSONError.Code? {
            if case .refused(let code) = self { return code }
            return nil
        }
    }

    /// `parse`'s verdict on `bytes` as an object.
    static func parsed(_ bytes: [UInt8]) -> Verdict {
        do {
            guard case .object(let object) = try CanonicalJSON.parse(bytes, limits: Self.limits) else { return .refused(.syntax) }
            var members: [String: String?] = [:]
            for member in object.members { members[member.name.string] = member.value.stringValue }
            return .members(members)
        } catch {
            return .refused(error.code)
        }
    }

    /// The same verdict through `JSONObjectMembers`.
    static func scanned(_ bytes: [UInt8]) -> Verdict {
        do {
            let object = try JSONObjectMembers(parsing: bytes, limits: Self.limits)
            var members: [String: String?] = [:]
            for member in object.members {
                members[String(decoding: member.name, as: UTF8.self)] =
                    member.value.kind == .string ? String(decoding: object.string(member.value), as: UTF8.self) : nil
            }
            return .members(members)
        } catch {
            return .refused(error.code)
        }
    }

    static let sample = Array(
        #"{"id":"AAE","type":"public-key","n":-1.5e3,"t":true,"f":false,"z":null,"e":"\u00e9\n\ud83d\ude00","a":[1,"x",{"k":[]}],"response":{"clientDataJSON":"eyJ9","u":"é😀"}}"#
            .utf8
    )

    @Test("the same verdict and members as parse: a sample, its every prefix and every single bit flip")
    func agreesWithParse() {
        #expect(throws: Never.self) { try JSONObjectMembers(parsing: Self.sample, limits: Self.limits) }
        var inputs = (0...Self.sample.count).map { Array(Self.sample.prefix($0)) }
        for index in Self.sample.indices {
            for bit in 0..<8 {
                var flipped = Self.sample
                flipped[index] ^= 1 << bit
                inputs.append(flipped)
            }
        }
        var refused = 0
        for input in inputs {
            let expected = Self.parsed(input)
            #expect(Self.scanned(input) == expected, "\(String(decoding: input, as: UTF8.self))")
            if expected.refusal != nil { refused += 1 }
        }
        #expect(refused > 0 && refused < inputs.count)
    }

    @Test(
        "each rule of the strict parser, inside a value that is never read",
        arguments: [
            (#"{"a":{"k":1,"k":2}}"#, CanonicalJSONError.Code.duplicateName),
            (#"{"a":[{"k":1,"\u006b":2}]}"#, .duplicateName),
            (#"{"a":1,"\u0061":2}"#, .duplicateName),
            (#"{"a":"\ud800"}"#, .loneSurrogate),
            (#"{"a":"\udc00x"}"#, .loneSurrogate),
            ("{\"a\":\"\u{1}\"}", .syntax),
            (#"{"a":"\x"}"#, .syntax),
            (#"{"a":1e999}"#, .numberOutOfRange),
            (#"{"a":01}"#, .syntax),
            (#"{"a":[[[[1]]]]}"#, .tooDeep),
            (#"{"a":tru}"#, .syntax),
            (#"{"a":1,}"#, .syntax),
            (#"{"a":[1,]}"#, .syntax),
            (#"{"a":1} x"#, .syntax),
            (#"["a"]"#, .syntax),
        ]
    )
    func rules(text: String, code: CanonicalJSONError.Code) {
        #expect(Self.parsed(Array(text.utf8)).refusal == code)
        #expect(Self.scanned(Array(text.utf8)).refusal == code)
    }

    @Test("an object of more than 16 members (names sorted to find a duplicate): distinct names read, one duplicate refused")
    func manyMembers() {
        func object(_ names: [String]) -> String { "{" + names.map { #""\#($0)":1"# }.joined(separator: ",") + "}" }
        let names = (0..<40).map { "m\($0)" }
        let distinct = object(names)
        #expect(Self.scanned(Array(distinct.utf8)) == Self.parsed(Array(distinct.utf8)))
        #expect(Self.scanned(Array(distinct.utf8)).refusal == nil)
        // The same object with its last name made a copy of the first: exactly one change.
        let duplicated = object(names.dropLast() + ["m0"])
        #expect(duplicated != distinct)
        #expect(Self.scanned(Array(duplicated.utf8)).refusal == .duplicateName)
        #expect(Self.parsed(Array(duplicated.utf8)).refusal == .duplicateName)
    }

    @Test("bytes that are not UTF-8 inside a value that is never read, and a text over the size limit")
    func utf8AndSize() {
        for bytes in [
            [0x7B, 0x22, 0x61, 0x22, 0x3A, 0x22, 0xC0, 0xAF, 0x22, 0x7D], [0x7B, 0x22, 0x61, 0x22, 0x3A, 0x22, 0xED, 0xA0, 0x80, 0x22, 0x7D],
        ] as [[UInt8]] {
            #expect(Self.scanned(bytes).refusal == .invalidUTF8)
            #expect(Self.parsed(bytes).refusal == .invalidUTF8)
        }
        let large = Array("{\"a\":\"\(String(repeating: "x", count: 4096))\"}".utf8)
        #expect(Self.scanned(large).refusal == .tooLarge)
    }

    @Test("members are found by their unescaped names; escaped strings are unescaped, plain ones are the input's bytes")
    func reading() throws {
        let object = try JSONObjectMembers(parsing: Array(#"{"\u0074ype":"a\/b","x":"plain","o":{"k":"v"},"l":["p",1]}"#.utf8), limits: Self.limits)
        let type = try #require(object["type"])
        #expect(type.escaped)
        #expect(Array(object.string(type)) == Array("a/b".utf8))
        let plain = try #require(object["x"])
        #expect(!plain.escaped && object.string(plain).startIndex > 0)
        #expect(object["\\u0074ype"] == nil)
        let nested = object.object(try #require(object["o"]))
        #expect(nested.members.count == 1 && nested["k"].map { Array(nested.string($0)) } == Array("v".utf8))
        #expect(object.elements(try #require(object["l"])).map(\.kind) == [.string, .number])
    }
}
