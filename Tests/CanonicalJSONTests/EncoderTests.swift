//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import Foundation
import Testing

/// ``JSONValueEncoder``: an `Encodable` value straight into a `JSONValue`.
struct EncoderTests {
    struct Inner: Encodable {
        var flag = true
        var nothing: String? = nil
        var explicitNull: String? = nil

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(self.flag, forKey: .flag)
            try container.encodeIfPresent(self.nothing, forKey: .nothing)
            try container.encode(self.explicitNull, forKey: .explicitNull)
        }

        enum CodingKeys: String, CodingKey { case flag, nothing, explicitNull }
    }

    struct Sample: Encodable {
        var text = "é\u{1F600}/\"\n"
        var count: UInt32 = 4_294_967_295
        var small: Int8 = -3
        var largest: Int64 = 9_007_199_254_740_992
        var fraction = 0.1
        var list: [Int] = [3, 1, 2]
        var inner = Inner()
        var embedded = JSONValue.object(JSONObject(constantMembers: [("z", .number(1)), ("a", .array([.null, .bool(false)]))]))
        var empty: [String] = []
    }

    @Test("the value is the one JSONEncoder's text canonicalizes to, members sorted, optionals omitted or null as encoded")
    func matchesFoundationCanonicalized() throws {
        let direct = try JSONValueEncoder().encode(Sample()).canonicalBytes
        #expect(direct == (try CanonicalJSON.canonicalize(encoding: Sample())))
        let text = String(decoding: direct, as: UTF8.self)
        #expect(
            text.hasPrefix(
                #"{"count":4294967295,"embedded":{"a":[null,false],"z":1},"empty":[],"fraction":0.1,"inner":{"explicitNull":null,"flag":true}"#),
            "\(text)")
    }

    @Test("an integer beyond 2^53 is refused (a double would round it); 2^53 itself is exact")
    func inexactIntegers() throws {
        struct Big: Encodable { var value: Int64 }
        #expect(throws: EncodingError.self) { try JSONValueEncoder().encode(Big(value: 9_007_199_254_740_993)) }
        #expect(throws: EncodingError.self) { try JSONValueEncoder().encode(Big(value: -9_007_199_254_740_993)) }
        #expect(
            try JSONValueEncoder().encode(Big(value: 9_007_199_254_740_992))
                == .object(JSONObject(constantMembers: [("value", .number(9_007_199_254_740_992))])))
    }

    @Test("a non-finite double is refused")
    func nonFinite() throws {
        struct Number: Encodable { var value: Double }
        #expect(throws: EncodingError.self) { try JSONValueEncoder().encode(Number(value: .infinity)) }
        #expect(throws: EncodingError.self) { try JSONValueEncoder().encode(Number(value: .nan)) }
        #expect(try JSONValueEncoder().encode(Number(value: 1.5))["value"] == .number(1.5))
    }

    @Test("two members with one name are refused, never merged")
    func duplicateNames() throws {
        struct Twice: Encodable {
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: AnyKey.self)
                try container.encode(1, forKey: AnyKey(stringValue: "a"))
                try container.encode(2, forKey: AnyKey(stringValue: "a"))
            }
        }
        struct Once: Encodable {
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: AnyKey.self)
                try container.encode(1, forKey: AnyKey(stringValue: "a"))
                try container.encode(2, forKey: AnyKey(stringValue: "b"))
            }
        }
        #expect(throws: EncodingError.self) { try JSONValueEncoder().encode(Twice()) }
        #expect(try JSONValueEncoder().encode(Once())["b"] == .number(2))
    }

    struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    struct Stamped: Encodable {
        var at: Date
        var list: [Date]
    }

    @Test("numericDate writes a Date as whole seconds since 1970 (the fraction truncated), nested too; the default leaves Date to itself")
    func numericDate() throws {
        // A time derived from now, with a fraction: what is written must not depend on the day.
        let seconds = (Date().timeIntervalSince1970).rounded(.down)
        let value = Stamped(at: Date(timeIntervalSince1970: seconds + 0.75), list: [Date(timeIntervalSince1970: seconds - 1.5)])
        let numeric = try JSONValueEncoder(dateEncoding: .numericDate).encode(value)
        #expect(String(decoding: numeric.canonicalBytes, as: UTF8.self) == #"{"at":\#(Int(seconds)),"list":[\#(Int(seconds) - 2)]}"#)
        let deferred = try JSONValueEncoder().encode(value)
        #expect(deferred["at"] == .number(seconds + 0.75 - Date.timeIntervalBetween1970AndReferenceDate))
    }
}
