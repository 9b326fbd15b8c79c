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
