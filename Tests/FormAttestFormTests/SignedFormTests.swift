//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import Crypto
import FormAttestForm
import Foundation
import Testing

struct SignedFormTests {
    static let transfer = #"{ "to": "alice", "amount": 1234.50, "timestamp": "2026-11-22T10:00:00Z", "username": "bob" }"#

    @Test("clientDataHash is SHA-256 of the RFC 8785 bytes, whatever the input's spelling")
    func hash() throws {
        let form = try SignedForm(jsonBytes: Array(Self.transfer.utf8))
        let canonical = #"{"amount":1234.5,"timestamp":"2026-11-22T10:00:00Z","to":"alice","username":"bob"}"#
        #expect(form.canonicalBytes == Array(canonical.utf8))
        #expect(form.clientDataHash == Array(SHA256.hash(data: Array(canonical.utf8))))
        #expect(form.clientDataHash.count == 32)
        let reordered = try SignedForm(
            jsonBytes: Array(#"{"username":"bob","to":"alice","timestamp":"2026-11-22T10:00:00Z","amount":1.2345e3}"#.utf8))
        #expect(reordered.clientDataHash == form.clientDataHash)
        #expect(form.username == "bob")
        #expect(form.timestamp == Date(timeIntervalSince1970: 1_795_341_600))
    }

    @Test(
        "forms that cannot be signed are rejected with a specific code",
        arguments: [
            (#"{"timestamp":"2026-11-22T10:00:00Z","a":1,"a":2}"#, FormError.Code.invalidJSON),
            (#"["timestamp"]"#, .notAnObject),
            (#"{"to":"alice"}"#, .missingField),
            (#"{"timestamp":"2026-11-22T10:00:00+01:00"}"#, .invalidField),
            (#"{"timestamp":"yesterday"}"#, .invalidField),
            (#"{"timestamp":1795341600}"#, .invalidField),
            (#"{"timestamp":"2026-11-22T10:00:00Z","username":7}"#, .invalidField),
            (#"{"timestamp":"2026-11-22T10:00:00Z","nonce":"\ud800"}"#, .invalidJSON),
        ]
    )
    func rejected(json: String, code: FormError.Code) throws {
        let error = try #require(throws: FormError.self) { try SignedForm(jsonBytes: Array(json.utf8)) }
        #expect(error.code == code, "\(error)")
    }

    @Test("the builder stamps a UTC timestamp and a 16-byte nonce, and refuses reserved names")
    func builder() throws {
        let now = Date(timeIntervalSince1970: 1_795_341_600.123)
        let form = try SignedForm.make(fields: ["amount": .number(10), "to": .string(JSONString("alice"))], username: "bob", now: now)
        #expect(form.timestamp.timeIntervalSince1970 == 1_795_341_600.123)
        #expect(form.value["timestamp"]?.stringValue == "2026-11-22T10:00:00.123Z")
        #expect(Base64URL.decode(try #require(form.nonce))?.count == 16)
        #expect(form.username == "bob")
        let another = try SignedForm.make(fields: ["amount": .number(10)], now: now)
        #expect(another.nonce != form.nonce)
        #expect(throws: FormError(code: .invalidField, reason: "")) {
            try SignedForm.make(fields: ["timestamp": .null], now: now)
        }
    }
}

struct FormPolicyTests {
    static let stamped = Date(timeIntervalSince1970: 1_795_341_600)

    static func form(username: String? = "bob", extra: String = "") throws -> SignedForm {
        let user = username.map { #","username":"\#($0)""# } ?? ""
        return try SignedForm(jsonBytes: Array(#"{"timestamp":"2026-11-22T10:00:00Z"\#(user)\#(extra)}"#.utf8))
    }

    @Test(
        "the window: 300 s in the past and 30 s in the future, edges included",
        arguments: [
            (300.0, true), (300.5, false), (-30.0, true), (-30.5, false), (0.0, true),
        ])
    func window(offset: TimeInterval, accepted: Bool) throws {
        let now = Self.stamped.addingTimeInterval(offset)
        if accepted {
            #expect(throws: Never.self) { try FormPolicy().validate(Self.form(), now: now) }
        } else {
            #expect(throws: FormError(code: .timestampOutsideWindow, reason: "")) { try FormPolicy().validate(Self.form(), now: now) }
        }
    }

    @Test("username binding is exact: another user, a missing name or a canonically equivalent spelling is refused")
    func binding() throws {
        #expect(throws: Never.self) { try FormPolicy().validate(Self.form(), now: Self.stamped, username: "bob") }
        #expect(throws: FormError(code: .bindingMismatch, reason: "")) {
            try FormPolicy().validate(Self.form(), now: Self.stamped, username: "eve")
        }
        #expect(throws: FormError(code: .missingField, reason: "")) {
            try FormPolicy().validate(Self.form(username: nil), now: Self.stamped, username: "bob")
        }
        #expect(throws: FormError(code: .bindingMismatch, reason: "")) {
            try FormPolicy().validate(Self.form(username: "jos\u{e9}"), now: Self.stamped, username: "jose\u{301}")
        }
    }

    @Test("configured required fields")
    func requiredFields() throws {
        let policy = FormPolicy(requiredFields: ["nonce"])
        #expect(throws: FormError(code: .missingField, reason: "")) { try policy.validate(Self.form(), now: Self.stamped) }
        #expect(throws: Never.self) { try policy.validate(Self.form(extra: #","nonce":"n1""#), now: Self.stamped) }
    }
}

struct Base64URLTests {
    @Test(
        "encode is RFC 4648 §5 without padding: equal to Foundation's base64 with its alphabet changed, for every length 0-200 and random bytes; it decodes back"
    )
    func encodeMatchesFoundation() {
        var generator = SystemRandomNumberGenerator()
        for length in 0...200 {
            for _ in 0..<5 {
                let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
                let expected = Data(bytes).base64EncodedString()
                    .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
                #expect(Base64URL.encode(bytes) == expected, "\(bytes)")
                #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
            }
        }
        // Every 6-bit value lands on its own character (RFC 4648 §5's table).
        #expect(Base64URL.encode([0xFB, 0xFF, 0xBF]) == "-_-_")
        #expect(Base64URL.encode([0x00, 0x10, 0x83, 0x10, 0x51, 0x87]) == "ABCDEFGH")
    }

    @Test("decode takes base64url and standard base64, padded or not, as Foundation decodes them, for every length 0-200")
    func decodeMatchesFoundation() {
        var generator = SystemRandomNumberGenerator()
        for length in 0...200 {
            for _ in 0..<5 {
                let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
                let standard = Data(bytes).base64EncodedString()
                let url = standard.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                for spelling in [standard, url, standard.replacingOccurrences(of: "=", with: ""), url.replacingOccurrences(of: "=", with: "")] {
                    #expect(Base64URL.decode(spelling) == bytes, "\(spelling)")
                }
            }
        }
        #expect(Base64URL.decode("") == [])
        #expect(Base64URL.decode("-_-_") == [0xFB, 0xFF, 0xBF])
        #expect(Base64URL.decode("+/+/") == [0xFB, 0xFF, 0xBF])
    }

    @Test("decode refuses, one change each: a foreign character, padding inside, too much padding, a length of 4n+1, non-zero unused bits")
    func decodeRefuses() {
        #expect(Base64URL.decode("QUJD") == Array("ABC".utf8))
        #expect(Base64URL.decode("QU*D") == nil)  // not in either alphabet
        #expect(Base64URL.decode("QUJ D") == nil)  // whitespace
        #expect(Base64URL.decode("QQ==") == Array("A".utf8))
        #expect(Base64URL.decode("Q=Q=") == nil)  // padding inside
        #expect(Base64URL.decode("QQ===") == nil)  // more padding than the length needs
        #expect(Base64URL.decode("QUI==") == nil)  // two where one completes the group
        #expect(Base64URL.decode("QUJD=") == nil)  // padding after a whole group
        #expect(Base64URL.decode("QUJDR") == nil)  // 4n+1 characters: not whole bytes
        #expect(Base64URL.decode("=") == nil)
        #expect(Base64URL.decode("QR") == nil)  // "A" is "QQ": R's low bits are not zero
        #expect(Base64URL.decode("QUJ") == nil)  // "AB" is "QUI": J's low two bits are not zero
        #expect(Base64URL.decode("QUJDé") == nil)  // non-ASCII
    }
}

struct RandomUUIDTests {
    @Test("UUID.random() is a version 4, RFC 9562-variant UUID that Foundation parses back; 10,000 are distinct and every random bit varies")
    func versionVariantAndSpread() throws {
        var seen = Set<UUID>()
        var ones = [Int](repeating: 0, count: 128)
        for _ in 0..<10_000 {
            let uuid = UUID.random()
            seen.insert(uuid)
            #expect(UUID(uuidString: uuid.uuidString) == uuid)
            let bytes = withUnsafeBytes(of: uuid.uuid) { Array($0) }
            #expect(bytes[6] >> 4 == 4)
            #expect(bytes[8] >> 6 == 0b10)
            for bit in 0..<128 where bytes[bit / 8] >> (7 - bit % 8) & 1 == 1 { ones[bit] += 1 }
        }
        #expect(seen.count == 10_000)
        let fixed: Set<Int> = [48, 49, 50, 51, 64, 65]  // the version and variant bits
        for bit in 0..<128 where !fixed.contains(bit) {
            #expect((4_000...6_000).contains(ones[bit]), "bit \(bit) was set \(ones[bit]) times in 10,000")
        }
    }
}
