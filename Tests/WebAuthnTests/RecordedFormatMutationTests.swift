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
/// (same length, so the CBOR stays well formed and only that field changes), or, where the check
/// needs bytes added to the AIK certificate, with the enclosing DER and CBOR lengths re-encoded.
/// The checks added with their reasons assert the reason too: several share a code.
struct RecordedFormatMutationTests {
    /// A recorded registration with `from` replaced by `to` (hex, same length) in its attestation object.
    static func mutated(_ file: String, _ from: String, _ to: String) throws -> (PasskeyRecording, [UInt8]) {
        let pattern = try #require(Self.bytes(hex: from))
        let replacement = try #require(Self.bytes(hex: to))
        #expect(pattern.count == replacement.count)
        return try Self.mutated(file, [(from, to)])
    }

    /// A recorded registration with each `from` replaced by its `to` (hex) in its attestation object,
    /// in order; each `from` occurs exactly once. A change of length comes with the changes of the
    /// DER and CBOR lengths that enclose it (re-encoding, not a second change).
    static func mutated(_ file: String, _ changes: [(from: String, to: String)]) throws -> (PasskeyRecording, [UInt8]) {
        let recorded = try #require(PasskeyRecording.registrations.first { $0.file == file && $0.expect.verified })
        let json = String(decoding: try recorded.response, as: UTF8.self)
        // The member's string value, whatever the whitespace around its colon.
        let key = try #require(json.range(of: #""attestationObject""#))
        let open = try #require(json[key.upperBound...].firstIndex(of: "\""))
        let value = json[json.index(after: open)...]
        let text = String(value[..<(try #require(value.firstIndex(of: "\"")))])
        var changed = try #require(WebAuthnBase64.decode(text))
        for (from, to) in changes {
            let pattern = try #require(Self.bytes(hex: from.replacingOccurrences(of: " ", with: "")))
            let replacement = try #require(Self.bytes(hex: to.replacingOccurrences(of: " ", with: "")))
            #expect(pattern != replacement)
            let starts = (0...(changed.count - pattern.count)).filter { changed[$0..<($0 + pattern.count)].elementsEqual(pattern) }
            #expect(starts.count == 1, "\(from) occurs \(starts.count) times")
            let start = try #require(starts.first)
            changed.replaceSubrange(start..<(start + pattern.count), with: replacement)
        }
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

    /// The registration with `changes` is refused with `code`, and with the check's own reason
    /// (`reason`, or `reason` followed by ": " and the parser's detail).
    static func expectRefusal(
        _ code: WebAuthnError.Code,
        _ reason: String,
        _ file: String,
        _ changes: [(from: String, to: String)],
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let (recorded, json) = try Self.mutated(file, changes)
        let verifier = try WebAuthnVerifier(policy: recorded.policy())
        let challenge = try #require(WebAuthnBase64.decode(recorded.challenge))
        let time = try recorded.time
        let error = await #expect(throws: WebAuthnError.self, sourceLocation: sourceLocation) {
            _ = try await verifier.verifyRegistration(json: json, challenge: challenge, at: time)
        }
        #expect(error?.code == code, sourceLocation: sourceLocation)
        #expect(
            error?.reason == reason || error?.reason.hasPrefix(reason + ": ") == true, "\(String(describing: error))", sourceLocation: sourceLocation)
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

    // The AIK certificate of tpmECC: its lengths (CBOR byte string, certificate, tbsCertificate,
    // extensions [3], Extensions) as recorded, with `delta` bytes more inside the extensions.
    static func aikExtensionLengths(_ delta: Int) -> [(from: String, to: String)] {
        func hex(_ value: Int, _ digits: Int) -> String { String(format: "%0\(digits)x", value) }
        return [
            ("59 023a 3082 0236 3082 01dc", "59 \(hex(0x23A + delta, 4)) 3082 \(hex(0x236 + delta, 4)) 3082 \(hex(0x1DC + delta, 4))"),
            ("a381 d3 3081 d0", "a381 \(hex(0xD3 + delta, 2)) 3081 \(hex(0xD0 + delta, 2))"),
        ]
    }

    @Test("tpm: the AIK certificate is version 3 (v3 -> v2)")
    func tpmAIKVersion() async throws {
        try await Self.expectRefusal(
            .attestationCertificateInvalid, "the tpm AIK certificate is not version 3", Self.tpmECC,
            [("a003 020102 0210 311fc42d", "a003 020101 0210 311fc42d")])
    }

    @Test("tpm: the AIK certificate's subject is empty (an empty subject -> CN=AIK)")
    func tpmAIKSubject() async throws {
        // 30 00 -> 30 0e { SET { SEQUENCE { commonName, UTF8String "AIK" } } }: 14 bytes more.
        try await Self.expectRefusal(
            .attestationCertificateInvalid, "the tpm AIK certificate's subject is not empty", Self.tpmECC,
            [
                ("59 023a 3082 0236 3082 01dc", "59 0248 3082 0244 3082 01ea"),
                ("5a 3000 3059", "5a 300e 310c 300a 0603550403 0c03 41494b 3059"),
            ])
    }

    @Test("tpm: the AIK certificate's basic constraints say CA false (CA false -> CA true)")
    func tpmAIKBasicConstraints() async throws {
        // BasicConstraints {} -> { cA TRUE }: 3 bytes more.
        try await Self.expectRefusal(
            .attestationCertificateInvalid, "the tpm AIK certificate's basic constraints do not say CA false", Self.tpmECC,
            Self.aikExtensionLengths(3) + [("300c 0603551d13 0101ff 0402 3000", "300f 0603551d13 0101ff 0405 3003 0101ff")])
    }

    @Test("tpm: the AIK certificate's AAGUID extension is authData's aaguid (one added with the first byte changed)")
    func tpmAIKAAGUID() async throws {
        // authData's aaguid is 4b92a377fc5f6107c4c85c190adbfd99; the added extension (35 bytes,
        // after the extended key usage) says 4c92a377....
        try await Self.expectRefusal(
            .aaguidMismatch, "the certificate's AAGUID extension differs from authData's aaguid", Self.tpmECC,
            Self.aikExtensionLengths(35) + [
                (
                    "0603551d25 0409 300706056781050803",
                    "0603551d25 0409 300706056781050803 3021 060b2b0601040182e51c010104 0412 0410 4c92a377fc5f6107c4c85c190adbfd99"
                )
            ])
    }

    @Test(
        "tpm: pubArea and certInfo checks, each refused with its own reason",
        arguments: [
            // pubArea's nameAlg SHA-256 (0x000b) -> SM3_256 (0x0012).
            (
                "0023 000b 00040000", "0023 0012 00040000", WebAuthnError.Code.publicKeyMismatch,
                "tpm pubArea's nameAlg 0x12 is not SHA-1, SHA-256, SHA-384 or SHA-512", Self.tpmECC
            ),
            // pubArea's ECC curve P-256 (0x0003) -> P-384 (0x0004).
            (
                "0010 0010 0003 0010 0020", "0010 0010 0004 0010 0020", .publicKeyMismatch, "tpm pubArea's ECC curve 0x4 is not NIST P-256",
                Self.tpmECC
            ),
            // pubArea's y one byte shorter: its last byte is left over.
            ("0020 d8735115", "001f d8735115", .malformedAttestation, "tpm pubArea has trailing bytes", Self.tpmECC),
            // certInfo's attested.qualifiedName one byte shorter: its last byte is left over.
            ("0022 000b 7fe884da", "0021 000b 7fe884da", .malformedAttestation, "tpm certInfo has trailing bytes", Self.tpmRSA),
        ]
    )
    func tpmStructures(from: String, to: String, code: WebAuthnError.Code, reason: String, file: String) async throws {
        try await Self.expectRefusal(code, reason, file, [(from, to)])
    }

    @Test(
        "android-key: the key description extension, each refused with its own reason",
        arguments: [
            // The extension's id 1.3.6.1.4.1.11129.2.1.17 -> .18: no key description.
            (
                "060a 2b06010401d679020111 0481d2", "060a 2b06010401d679020112 0481d2", WebAuthnError.Code.attestationCertificateInvalid,
                "the android-key certificate has no key description extension"
            ),
            // KeyDescription's SEQUENCE tag -> SET.
            ("0481d2 3081cf 020102", "0481d2 3181cf 020102", .attestationCertificateInvalid, "the android-key key description is malformed"),
        ]
    )
    func androidKeyDescription(from: String, to: String, code: WebAuthnError.Code, reason: String) async throws {
        try await Self.expectRefusal(code, reason, Self.android, [(from, to)])
    }
}
