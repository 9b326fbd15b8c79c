//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing
import WebAuthn

/// The tpm and android-key checks, each refused on a recorded registration that differs from the
/// recorded one in exactly one thing: a run of bytes of its attestation object replaced in place
/// (same length, so the CBOR stays well formed and only that field changes).
struct RecordedFormatMutationTests {
    /// A recorded registration with `from` replaced by `to` (hex, same length) in its attestation object.
    static func mutated(_ file: String, _ from: String, _ to: String) throws -> (PasskeyRecording, [UInt8]) {
        let recorded = try #require(PasskeyRecording.registrations.first { $0.file == file && $0.expect.verified })
        let json = String(decoding: try recorded.response, as: UTF8.self)
        // The member's string value, whatever the whitespace around its colon.
        let key = try #require(json.range(of: #""attestationObject""#))
        let open = try #require(json[key.upperBound...].firstIndex(of: "\""))
        let value = json[json.index(after: open)...]
        let text = String(value[..<(try #require(value.firstIndex(of: "\"")))])
        let object = try #require(WebAuthnBase64.decode(text))
        let pattern = try #require(Self.bytes(hex: from))
        let replacement = try #require(Self.bytes(hex: to))
        #expect(pattern.count == replacement.count && pattern != replacement)
        let starts = (0...(object.count - pattern.count)).filter { object[$0..<($0 + pattern.count)].elementsEqual(pattern) }
        #expect(starts.count == 1, "\(from) occurs \(starts.count) times")
        let start = try #require(starts.first)
        var changed = object
        changed.replaceSubrange(start..<(start + pattern.count), with: replacement)
        let changedJSON = json.replacingOccurrences(of: text, with: WebAuthnBase64.encode(changed))
        return (recorded, Array(changedJSON.utf8))
    }

    static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        return stride(from: 0, to: digits.count, by: 2).map { index in
            UInt8(String(decoding: digits[index..<(index + 2)], as: UTF8.self), radix: 16)
        }.reduce(into: [UInt8]?([])) { result, byte in
            if let byte { result?.append(byte) } else { result = nil }
        }
    }

    static func expectRefusal(_ code: WebAuthnError.Code, _ file: String, _ from: String, _ to: String) async throws {
        let (recorded, json) = try Self.mutated(file, from, to)
        let verifier = try WebAuthnVerifier(policy: recorded.policy())
        let challenge = try #require(WebAuthnBase64.decode(recorded.challenge))
        let time = try recorded.time
        await #expect(throws: WebAuthnError(code: code, reason: "")) {
            _ = try await verifier.verifyRegistration(json: json, challenge: challenge, at: time)
        }
    }

    static let tpmRSA = "registration-tpm-surface-pro-4.json"
    static let tpmECC = "registration-tpm-es256-spec.json"
    static let android = "registration-android-key-conformance.json"

    @Test(
        "tpm: each check refuses a one-field change of a recorded registration",
        arguments: [
            // ver "2.0" -> "2.1".
            ("637665726332 2e30", "637665726332 2e31", WebAuthnError.Code.malformedAttestation, Self.tpmRSA),
            // certInfo's magic (TPM_GENERATED_VALUE) and type (TPM_ST_ATTEST_CERTIFY).
            ("ff544347 8017 0000 0020", "ff544348 8017 0000 0020", .malformedAttestation, Self.tpmECC),
            ("ff544347 8017 0000 0020", "ff544347 8018 0000 0020", .malformedAttestation, Self.tpmECC),
            // extraData's first byte.
            ("0020 277d0e05", "0020 287d0e05", .nonceMismatch, Self.tpmECC),
            // attested.name's first hash byte: certInfo no longer names pubArea.
            ("0022 000b 9c42d8aa", "0022 000b 9d42d8aa", .publicKeyMismatch, Self.tpmECC),
            // pubArea's x: not the credential's key.
            ("0010 0020 41202698", "0010 0020 42202698", .publicKeyMismatch, Self.tpmECC),
            // sig's last byte.
            ("78985176 6376", "78985177 6376", .attestationSignatureInvalid, Self.tpmECC),
            // the AIK certificate's extended key usage 2.23.133.8.3 -> 2.23.133.8.4.
            ("0605 6781050803", "0605 6781050804", .attestationCertificateInvalid, Self.tpmECC),
            // its subject alternative name: tpmModel 2.23.133.2.2 -> 2.23.133.2.4.
            ("0605 678105020 20c15", "0605 678105020 40c15", .attestationCertificateInvalid, Self.tpmECC),
            // the statement's alg RS1 (-65535) -> RS256 (-257): extraData is SHA-1, not SHA-256.
            ("63616c67 39fffe", "63616c67 390100", .nonceMismatch, Self.tpmRSA),
        ]
    )
    func tpm(from: String, to: String, code: WebAuthnError.Code, file: String) async throws {
        try await Self.expectRefusal(code, file, from.replacingOccurrences(of: " ", with: ""), to.replacingOccurrences(of: " ", with: ""))
    }

    @Test(
        "android-key: each check refuses a one-field change of a recorded registration",
        arguments: [
            // attestationChallenge's first byte.
            ("0420 9f54497c", "0420 9e54497c", WebAuthnError.Code.nonceMismatch),
            // teeEnforced origin [702] 0 (KM_ORIGIN_GENERATED) -> 1.
            ("bf853e 03 020100", "bf853e 03 020101", .attestationCertificateInvalid),
            // teeEnforced purpose [1] {2} (KM_PURPOSE_SIGN) -> {3}.
            ("a105 3103 020102", "a105 3103 020103", .attestationCertificateInvalid),
            // [703] NULL renumbered [600]: allApplications present.
            ("bf853f 0205 00", "bf8458 0205 00", .attestationCertificateInvalid),
            // sig's first r byte.
            ("0221 00 87ab73b8", "0221 00 88ab73b8", .attestationSignatureInvalid),
        ]
    )
    func androidKey(from: String, to: String, code: WebAuthnError.Code) async throws {
        try await Self.expectRefusal(code, Self.android, from.replacingOccurrences(of: " ", with: ""), to.replacingOccurrences(of: " ", with: ""))
    }
}
