//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CBOR
import Crypto
import Foundation
import Testing
import WebAuthn

/// The parsers of untrusted bytes: every proper prefix throws (never traps), every bit flip throws
/// or parses, and the response shape is enforced member by member.
struct ParserTests {
    static let authenticator: SoftwareAuthenticator = {
        var authenticator = SoftwareAuthenticator()
        authenticator.format = .packedSelf
        return authenticator
    }()

    static var registrationAuthData: [UInt8] { Self.authenticator.authenticatorData(attested: true) }
    static var attestationObject: [UInt8] {
        Self.authenticator.attestationObject(clientDataHash: Array(repeating: 1, count: 32))
    }
    static var clientData: [UInt8] { Self.authenticator.clientDataJSON(type: "webauthn.create") }

    @Test("authenticator data: every proper prefix throws")
    func authenticatorDataDripFeed() throws {
        let bytes = Self.registrationAuthData
        _ = try WebAuthnAuthenticatorData(bytes: bytes)
        for count in 0..<bytes.count {
            #expect(throws: WebAuthnError.self) { _ = try WebAuthnAuthenticatorData(bytes: Array(bytes.prefix(count))) }
        }
    }

    @Test("authenticator data: a trailing byte the flags do not announce is refused")
    func authenticatorDataTrailing() {
        #expect(throws: WebAuthnError(code: .malformedAuthenticatorData, reason: "")) {
            _ = try WebAuthnAuthenticatorData(bytes: Self.registrationAuthData + [0xA0])
        }
    }

    @Test("authenticator data: with the ED flag an extension map is read; without a map it is refused")
    func authenticatorDataExtensions() throws {
        var bytes = Self.registrationAuthData
        bytes[32] |= 0x80
        let parsed = try WebAuthnAuthenticatorData(bytes: bytes + [0xA1, 0x63] + Array("ext".utf8) + [0xF5])
        #expect(parsed.extensions?.mapEntries?.count == 1)
        #expect(throws: WebAuthnError(code: .malformedAuthenticatorData, reason: "")) {
            _ = try WebAuthnAuthenticatorData(bytes: bytes + [0x01])
        }
    }

    @Test("authenticator data: every single bit flip throws a WebAuthnError or parses")
    func authenticatorDataBitFlips() {
        let bytes = Self.registrationAuthData
        var refused = 0
        for index in bytes.indices {
            for bit in 0..<8 {
                var flipped = bytes
                flipped[index] ^= 1 << bit
                do { _ = try WebAuthnAuthenticatorData(bytes: flipped) } catch { refused += 1 }
            }
        }
        // Flips in the hash, the counter, the aaguid and the id parse; flips in lengths and the key do not.
        #expect(refused > 0 && refused < bytes.count * 8)
    }

    @Test("attestation object: every proper prefix throws, and bit flips never trap")
    func attestationObject() throws {
        let bytes = Self.attestationObject
        _ = try WebAuthnAttestationObject(bytes: bytes)
        for count in 0..<bytes.count {
            #expect(throws: WebAuthnError.self) { _ = try WebAuthnAttestationObject(bytes: Array(bytes.prefix(count))) }
        }
        for index in bytes.indices {
            var flipped = bytes
            flipped[index] ^= 0x20
            _ = try? WebAuthnAttestationObject(bytes: flipped)
        }
    }

    @Test("attestation object: an extra key is refused")
    func attestationObjectExtraKey() throws {
        // Map header 0xA3 -> 0xA4, plus one more text key "x": 0.
        var bytes = Self.attestationObject
        bytes[0] = 0xA4
        #expect(throws: WebAuthnError(code: .malformedAttestation, reason: "")) {
            _ = try WebAuthnAttestationObject(bytes: bytes + [0x61, 0x78, 0x00])
        }
    }

    @Test("clientDataJSON: every proper prefix throws; bad UTF-8 is refused")
    func clientData() throws {
        let bytes = Self.clientData
        _ = try CollectedClientData(bytes: bytes)
        for count in 0..<bytes.count {
            #expect(throws: WebAuthnError(code: .malformedClientData, reason: "")) {
                _ = try CollectedClientData(bytes: Array(bytes.prefix(count)))
            }
        }
        var invalid = bytes
        invalid[invalid.count - 3] = 0xFF
        #expect(throws: WebAuthnError(code: .malformedClientData, reason: "")) { _ = try CollectedClientData(bytes: invalid) }
    }

    @Test("clientDataJSON: members of the wrong type and oversize input are refused")
    func clientDataMembers() {
        for text in [#"{"type":1,"challenge":"AA","origin":"o"}"#, #"{"type":"t","origin":"o"}"#, #"["webauthn.get"]"#] {
            #expect(throws: WebAuthnError(code: .malformedClientData, reason: "")) {
                _ = try CollectedClientData(bytes: Array(text.utf8))
            }
        }
        #expect(throws: WebAuthnError(code: .responseTooLarge, reason: "")) {
            _ = try CollectedClientData(bytes: Array(repeating: 0x20, count: WebAuthnLimits.maximumClientDataSize + 1))
        }
    }

    @Test("COSE keys: ES256 round-trips; a prefix, an extra label or a wrong curve is refused")
    func coseKey() throws {
        let bytes = Self.authenticator.cosePublicKey
        #expect(try CredentialPublicKey(cborEncoded: bytes).algorithm == .es256)
        for count in 0..<bytes.count {
            #expect(throws: WebAuthnError(code: .invalidPublicKey, reason: "")) {
                _ = try CredentialPublicKey(cborEncoded: Array(bytes.prefix(count)))
            }
        }
        var extra = bytes
        extra[0] = 0xA6
        #expect(throws: WebAuthnError(code: .invalidPublicKey, reason: "")) {
            _ = try CredentialPublicKey(cborEncoded: extra + [0x04, 0x00])
        }
        // -1 (crv) = 1 (P-256) is encoded 20 01; make it 2 (P-384).
        let curve = try #require((0..<(bytes.count - 1)).first { bytes[$0] == 0x20 && bytes[$0 + 1] == 0x01 })
        var otherCurve = bytes
        otherCurve[curve + 1] = 0x02
        #expect(throws: WebAuthnError(code: .invalidPublicKey, reason: "")) { _ = try CredentialPublicKey(cborEncoded: otherCurve) }
    }

    @Test("base64: url and standard alphabets, padded or not; mixed alphabets, bad padding and non-zero tail bits refused")
    func base64() {
        #expect(WebAuthnBase64.decode("-_8") == [0xFB, 0xFF])
        #expect(WebAuthnBase64.decode("+/8=") == [0xFB, 0xFF])
        #expect(WebAuthnBase64.decode("+/8") == [0xFB, 0xFF])
        #expect(WebAuthnBase64.decode("") == [])
        #expect(WebAuthnBase64.decode("-/8") == nil)
        #expect(WebAuthnBase64.decode("+/8==") == nil)
        #expect(WebAuthnBase64.decode("A") == nil)
        #expect(WebAuthnBase64.decode("+/9") == nil)
        #expect(WebAuthnBase64.decode("AA AA") == nil)
        for length in 0..<40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            #expect(WebAuthnBase64.decode(WebAuthnBase64.encode(bytes)) == bytes)
        }
    }

    @Test(
        "base64, one test per rule of the one-pass decoder",
        arguments: [
            ("-_8=", [0xFB, 0xFF] as [UInt8]?),  // padding is accepted with the url alphabet too
            ("AA==", [0x00]),
            ("AAA=", [0x00, 0x00]),
            ("AAAA=", nil),  // padding after a complete quantum
            ("A===", nil),  // a remainder of one symbol, padded
            ("AA=", nil),  // padding that does not complete the quantum
            ("AA=A", nil),  // '=' before the end
            ("=AA", nil),
            ("AB==", nil),  // non-zero unused bits, padded
            ("AAB", nil),  // non-zero unused bits, two of them
            ("-A+A", nil),  // mixed alphabets, the url symbol first
            ("AA\u{E9}", nil),  // a character outside both alphabets
            ("AA\n", nil),
            ("AAA.", nil),
        ]
    )
    func base64Rules(text: String, expected: [UInt8]?) {
        #expect(WebAuthnBase64.decode(text) == expected)
        // The same through the UTF-8 entry point, on a slice that does not start at zero.
        let slice = Array(("x" + text).utf8).dropFirst()
        #expect(WebAuthnBase64.decode(utf8: slice) == expected)
    }

    /// The decoder before it became one pass (three allocations), kept as the reference.
    static func referenceBase64(_ text: String) -> [UInt8]? {
        var symbols = Array(text.utf8)
        var padding = 0
        while symbols.last == UInt8(ascii: "=") {
            symbols.removeLast()
            padding += 1
        }
        let remainder = symbols.count % 4
        guard remainder != 1, padding == 0 || (remainder != 0 && padding == 4 - remainder) else { return nil }
        var url = false
        var standard = false
        var values: [UInt8] = []
        for symbol in symbols {
            switch symbol {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): values.append(symbol - UInt8(ascii: "A"))
            case UInt8(ascii: "a")...UInt8(ascii: "z"): values.append(symbol - UInt8(ascii: "a") + 26)
            case UInt8(ascii: "0")...UInt8(ascii: "9"): values.append(symbol - UInt8(ascii: "0") + 52)
            case UInt8(ascii: "-"), UInt8(ascii: "_"):
                url = true
                values.append(symbol == UInt8(ascii: "-") ? 62 : 63)
            case UInt8(ascii: "+"), UInt8(ascii: "/"):
                standard = true
                values.append(symbol == UInt8(ascii: "+") ? 62 : 63)
            default: return nil
            }
        }
        guard !(url && standard) else { return nil }
        var bytes: [UInt8] = []
        var accumulator: UInt32 = 0
        var bits = 0
        for value in values {
            accumulator = (accumulator << 6) | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                bytes.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
                accumulator &= (1 << UInt32(bits)) - 1
            }
        }
        guard accumulator == 0 else { return nil }
        return bytes
    }

    @Test("base64: the one-pass decoder accepts and refuses exactly what the reference does, on every text of up to 5 symbols")
    func base64AgreesWithReference() {
        let symbols = ["A", "B", "Q", "g", "/", "+", "-", "_", "=", " "]
        var texts = [""]
        var accepted = 0
        var total = 0
        for _ in 0..<5 {
            texts = texts.flatMap { text in symbols.map { text + $0 } }
            for text in texts {
                let decoded = WebAuthnBase64.decode(text)
                let reference = Self.referenceBase64(text)
                if decoded != reference {
                    Issue.record("\(text): \(String(describing: decoded)) against \(String(describing: reference))")
                }
                if decoded != nil { accepted += 1 }
                total += 1
            }
        }
        #expect(total == 111_110 && accepted > 1000 && accepted < total / 2)
    }

    @Test("the response's members: duplicates at any level, bad values never read and too deep a nesting are refused")
    func responseStrictness() throws {
        let valid = String(decoding: Self.authenticator.authenticationJSON(), as: UTF8.self)
        _ = try AuthenticationResponse(json: Array(valid.utf8))
        let mutations = [
            // A duplicate member at the top, in response, and in a member the verifier never reads.
            valid.replacingOccurrences(of: #""type":"public-key""#, with: #""type":"public-key","type":"public-key""#),
            valid.replacingOccurrences(of: #""type":"public-key""#, with: #""type":"public-key","\u0074ype":"public-key""#),
            valid.replacingOccurrences(of: #""response":{"#, with: #""response":{"signature":"AA","#),
            valid.replacingOccurrences(of: #""clientExtensionResults":{}"#, with: #""clientExtensionResults":{"a":1,"a":1}"#),
            // Values the verifier never reads are still checked.
            valid.replacingOccurrences(of: #""clientExtensionResults":{}"#, with: #""clientExtensionResults":{},"x":"\ud800""#),
            valid.replacingOccurrences(of: #""clientExtensionResults":{}"#, with: #""clientExtensionResults":{},"x":1e999"#),
            valid.replacingOccurrences(of: #""clientExtensionResults":{}"#, with: #""clientExtensionResults":{"a":[[[[[[[[1]]]]]]]]}"#),
            valid.replacingOccurrences(of: #""response":{"#, with: #""response":{"x":[1,],"#),
            // A binary member that is not a string.
            valid.replacingOccurrences(of: #""signature":""#, with: #""signature":1,"s":""#),
        ]
        for mutation in mutations {
            #expect(mutation != valid)
            #expect(throws: WebAuthnError(code: .malformedResponse, reason: "")) { _ = try AuthenticationResponse(json: Array(mutation.utf8)) }
        }
        // Unknown members are ignored; escaped names and escaped base64 are read unescaped, as before.
        let signature = try #require(AuthenticationTests.member("signature", in: valid))
        let first = try #require(signature.unicodeScalars.first)
        let escapedFirst = "\\u00" + String(first.value, radix: 16)
        let escaped = valid.replacingOccurrences(
            of: #""signature":"\#(signature)""#,
            with: #""\u0073ignature":"\#(escapedFirst)\#(signature.dropFirst())""#
        )
        .replacingOccurrences(
            of: #""clientExtensionResults":{}"#,
            with: #""clientExtensionResults":{"x":{"y":[null,true,-0.5]}},"publicKeyAlgorithm":-7"#
        )
        #expect(escaped.contains(#""\u0073ignature":"\u00"#))
        let parsed = try AuthenticationResponse(json: Array(escaped.utf8))
        #expect(parsed.signature == WebAuthnBase64.decode(signature))
    }

    @Test("the response shape: type, id = rawId, response object, binary members")
    func responseShape() throws {
        let valid = String(decoding: Self.authenticator.registrationJSON(), as: UTF8.self)
        _ = try RegistrationResponse(json: Array(valid.utf8))
        let id = try #require(AuthenticationTests.member("id", in: valid))
        let mutations = [
            valid.replacingOccurrences(of: #""type":"public-key""#, with: #""type":"password""#),
            valid.replacingOccurrences(of: #""rawId":"\#(id)""#, with: #""rawId":"AAAA""#),
            valid.replacingOccurrences(of: #""clientDataJSON":""#, with: #""clientDataJSON":"!"#),
            valid.replacingOccurrences(of: #""transports":["internal","hybrid"]"#, with: #""transports":[1]"#),
            valid.replacingOccurrences(of: #""clientExtensionResults":{}"#, with: #""clientExtensionResults":[]"#),
            valid.replacingOccurrences(of: #""authenticatorAttachment":"platform""#, with: #""authenticatorAttachment":true"#),
            valid.replacingOccurrences(of: #""attestationObject""#, with: #""attestationObjekt""#),
            "[" + valid + "]",
            valid + " x",
        ]
        for mutation in mutations {
            #expect(mutation != valid)
            #expect(throws: WebAuthnError(code: .malformedResponse, reason: "")) { _ = try RegistrationResponse(json: Array(mutation.utf8)) }
        }
        #expect(throws: WebAuthnError(code: .responseTooLarge, reason: "")) {
            _ = try RegistrationResponse(json: Array(repeating: 0x20, count: WebAuthnLimits.maximumResponseSize + 1))
        }
    }

    @Test("the response JSON: every proper prefix throws")
    func responseDripFeed() {
        let bytes = Self.authenticator.authenticationJSON()
        for count in 0..<bytes.count {
            #expect(throws: WebAuthnError.self) { _ = try AuthenticationResponse(json: Array(bytes.prefix(count))) }
        }
    }
}
