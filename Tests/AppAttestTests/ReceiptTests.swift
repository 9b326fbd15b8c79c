//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import Crypto
import FormAttestTestSupport
import Foundation
import SwiftASN1
import Testing
import X509

/// Receipts: every real one parses and verifies against Apple Root CA - G3; each check bites.
struct ReceiptTests {
    /// The sample's receipt and credential certificate, from its attestation object.
    static func parts(of sample: RealSample) throws -> (receipt: [UInt8], leaf: [UInt8], clientDataHash: [UInt8]) {
        let object = try AttestationObject(cborEncoded: try #require(sample.attestation))
        return (object.statement.receipt, object.statement.leafCertificate, try #require(sample.clientDataHash))
    }

    static func expectation(for sample: RealSample) throws -> ReceiptExpectation {
        let parts = try Self.parts(of: sample)
        return ReceiptExpectation(
            appID: sample.appID,
            attestedKey: .certificate(parts.leaf),
            clientHash: parts.clientDataHash,
            type: .attest
        )
    }

    static func verifier(_ sample: RealSample, receiptAnchors: [Certificate] = [AppleRootCAG3.certificate]) throws
        -> AppAttestVerifier
    {
        try AppAttestVerifier(
            policy: AppAttestPolicy(
                appIDs: [sample.appID],
                environments: [.development, .production],
                receiptTrustAnchors: receiptAnchors
            )
        )
    }

    /// A sample whose receipt signer is valid 2020-05-19 to 2021-06-18.
    static func veehaitch() throws -> RealSample { try RealSample.named("veehaitch_ios_14_2") }

    static func expectReceiptError(
        _ code: AppAttestError.Code,
        sourceLocation: SourceLocation = #_sourceLocation,
        _ body: () async throws -> Void
    ) async {
        do {
            try await body()
            Issue.record("expected \(code), but the receipt verified", sourceLocation: sourceLocation)
        } catch let error as AppAttestError {
            #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("expected \(code), got \(error)", sourceLocation: sourceLocation)
        }
    }

    @Test("the embedded Apple Root CA - G3 is pinned, and every real receipt carries the same certificate")
    func embeddedG3IsPinned() throws {
        var serializer = DER.Serializer()
        try serializer.serialize(AppleRootCAG3.certificate)
        #expect(hexString(SHA256.hash(data: serializer.serializedBytes)) == "63343abfb89a6a03ebb57e9b3f5fa7be7c4f5c756f3017b3a8c488c3653e9179")
        for sample in try RealSample.withAttestation() {
            let receipt = try AppAttestReceipt(berEncoded: Self.parts(of: sample).receipt)
            #expect(try receipt.certificates.contains(AppleRootCAG3.certificate), "\(sample)")
        }
    }

    @Test(
        "every real receipt parses, verifies at the sample's time and belongs to its attestation",
        arguments: try RealSample.withAttestation())
    func realReceiptVerifies(sample: RealSample) async throws {
        let parts = try Self.parts(of: sample)
        let verified = try await Self.verifier(sample).verifyReceipt(
            parts.receipt,
            expecting: Self.expectation(for: sample),
            at: try #require(sample.validAt)
        )
        let payload = verified.payload
        #expect(payload.appID == sample.appID)
        #expect(payload.attestedCertificateDER == parts.leaf)
        #expect(payload.clientHash == parts.clientDataHash)
        #expect(payload.type == .attest)
        #expect(payload.riskMetric == nil)
        // Field 7 (undocumented by Apple) names the environment: "sandbox" or "production".
        #expect(payload.environment == (sample.environment == .development ? "sandbox" : "production"))
        #expect(!payload.token.isEmpty)
        // Apple: a receipt expires 90 days after creation; it is created while the leaf is valid
        // (in every recording here, one day and about a second after the leaf's notBefore).
        #expect(abs(payload.expirationTime.timeIntervalSince(payload.creationTime) - 90 * 86_400) < 1)
        let leaf = try Certificate(derEncoded: parts.leaf)
        #expect(payload.creationTime > leaf.notValidBefore && payload.creationTime < leaf.notValidAfter)
        #expect(verified.receipt.signingCertificate.subject.description.contains("Application Attestation Fraud Receipt Signing"))
    }

    @Test("receipt times are read exactly, with and without a fraction")
    func times() throws {
        let payload = try AppAttestReceipt(berEncoded: Self.parts(of: Self.veehaitch()).receipt).payload
        // "2020-11-21T22:13:02.796Z" and "2021-02-19T22:13:02.796Z"
        #expect(abs(payload.creationTime.timeIntervalSince1970 - 1_605_996_782.796) < 0.0005)
        #expect(abs(payload.expirationTime.timeIntervalSince1970 - 1_613_772_782.796) < 0.0005)
        let simulated = try SimulatedScenario().authority.receiptAuthority
        for date in [Date(timeIntervalSince1970: 951_782_400), Date(timeIntervalSince1970: 1_795_341_600.25)] {  // 2000-02-29, 2026-11-22
            let receipt = try simulated.receipt(
                .init(appID: "A.b", attestedCertificate: [0x30, 0x00], clientHash: [1], environment: .production, creationTime: date)
            )
            #expect(abs(try AppAttestReceipt(berEncoded: receipt).payload.creationTime.timeIntervalSince(date)) < 0.0005)
        }
    }

    @Test("a time with a long fraction, or none of the RFC 3339 shape, is malformed (parsed before any signature check)")
    func hostileTimes() throws {
        /// A payload with every required field; `time` as the creation time.
        func payload(creationTime time: String) -> [UInt8] {
            func tlv(_ tag: UInt8, _ content: [UInt8]) -> [UInt8] {
                content.count < 128 ? [tag, UInt8(content.count)] + content : [tag, 0x81, UInt8(content.count)] + content
            }
            func field(_ type: UInt8, _ value: [UInt8]) -> [UInt8] {
                tlv(0x30, tlv(0x02, [type]) + tlv(0x02, [1]) + tlv(0x04, value))
            }
            let fields =
                field(2, Array("A.b".utf8)) + field(3, [0x30, 0x00]) + field(4, [1]) + field(5, Array("t".utf8))
                + field(6, Array("ATTEST".utf8)) + field(12, Array(time.utf8)) + field(21, Array("2021-02-19T22:13:02Z".utf8))
            return tlv(0x31, fields)
        }
        _ = try ReceiptPayload(derEncoded: payload(creationTime: "2020-11-21T22:13:02.796Z"))
        _ = try ReceiptPayload(derEncoded: payload(creationTime: "2020-11-21T22:13:02.123456789Z"))
        for hostile in [
            "2020-11-21T22:13:02.99999999999999999999999999999Z",  // would overflow an integer
            "2020-11-21T22:13:02.Z", "2020-11-21T22:13:02+01:00", "2020-13-21T22:13:02Z", "20201121T221302Z", "",
        ] {
            #expect(throws: AppAttestError(code: .receiptMalformed, reason: ""), "\(hostile)") {
                _ = try ReceiptPayload(derEncoded: payload(creationTime: hostile))
            }
        }
    }

    @Test("verifyAttestation reports the receipt as verified on every real sample", arguments: try RealSample.withAttestation())
    func attestationReportsReceipt(sample: RealSample) async throws {
        let result = try await RealSampleTests.verify(sample)
        let verified = try #require(result.receiptCheck.verified, "\(String(describing: result.receiptCheck.error))")
        #expect(verified.payload.appID == sample.appID)
    }

    // MARK: - One change each

    @Test("altered content: one byte of the signed app id changed")
    func alteredContent() async throws {
        let sample = try Self.veehaitch()
        var receipt = try Self.parts(of: sample).receipt
        let appID = Array(sample.appID.utf8)
        let offset = try #require(receipt.firstRange(of: appID)?.lowerBound)
        receipt[offset] ^= 0x01
        await Self.expectReceiptError(.receiptSignatureInvalid) {
            _ = try await Self.verifier(sample).verifyReceipt(receipt, expecting: Self.expectation(for: sample), at: sample.validAt!)
        }
    }

    @Test("altered signature: the signature's last byte changed")
    func alteredSignature() async throws {
        let sample = try Self.veehaitch()
        let original = try Self.parts(of: sample).receipt
        let parsed = try AppAttestReceipt(berEncoded: original)
        let offset = try #require(original.firstRange(of: parsed.signer.signature)?.upperBound) - 1
        var receipt = original
        receipt[offset] ^= 0x01
        await Self.expectReceiptError(.receiptSignatureInvalid) {
            _ = try await Self.verifier(sample).verifyReceipt(receipt, expecting: Self.expectation(for: sample), at: sample.validAt!)
        }
    }

    @Test("wrong root: the App Attest root instead of Apple Root CA - G3")
    func wrongRoot() async throws {
        let sample = try Self.veehaitch()
        await Self.expectReceiptError(.receiptChainInvalid) {
            _ = try await Self.verifier(sample, receiptAnchors: [AppleAppAttestationRoot.certificate])
                .verifyReceipt(Self.parts(of: sample).receipt, expecting: Self.expectation(for: sample), at: sample.validAt!)
        }
    }

    @Test("expired at the pinned time: one second after the signer's notAfter")
    func expired() async throws {
        let sample = try Self.veehaitch()
        let receipt = try Self.parts(of: sample).receipt
        let notAfter = try AppAttestReceipt(berEncoded: receipt).signingCertificate.notValidAfter
        await Self.expectReceiptError(.receiptCertificateExpired) {
            _ = try await Self.verifier(sample).verifyReceipt(
                receipt, expecting: Self.expectation(for: sample), at: notAfter.addingTimeInterval(1))
        }
        // The last valid second still verifies.
        _ = try await Self.verifier(sample).verifyReceipt(receipt, expecting: Self.expectation(for: sample), at: notAfter)
    }

    @Test("not yet valid: one second before the signer's notBefore")
    func notYetValid() async throws {
        let sample = try Self.veehaitch()
        let receipt = try Self.parts(of: sample).receipt
        let notBefore = try AppAttestReceipt(berEncoded: receipt).signingCertificate.notValidBefore
        await Self.expectReceiptError(.receiptCertificateNotYetValid) {
            _ = try await Self.verifier(sample).verifyReceipt(
                receipt, expecting: Self.expectation(for: sample), at: notBefore.addingTimeInterval(-1))
        }
    }

    @Test("the receipt belongs to its attestation: app id, certificate, client hash and type each checked")
    func binding() async throws {
        let sample = try Self.veehaitch()
        let receipt = try Self.parts(of: sample).receipt
        let verifier = try Self.verifier(sample)
        let time = try #require(sample.validAt)

        var expectation = try Self.expectation(for: sample)
        expectation.appID = "ABCDE12345.com.example.other"
        await Self.expectReceiptError(.receiptAppIDMismatch) {
            _ = try await verifier.verifyReceipt(receipt, expecting: expectation, at: time)
        }

        expectation = try Self.expectation(for: sample)
        let otherLeaf = try Self.parts(of: RealSample.named("veehaitch_ios_14_3")).leaf
        expectation.attestedKey = .certificate(otherLeaf)
        await Self.expectReceiptError(.receiptCertificateMismatch) {
            _ = try await verifier.verifyReceipt(receipt, expecting: expectation, at: time)
        }
        // By stored key: this sample's key matches, another's does not.
        expectation = try Self.expectation(for: sample)
        let ownKey = try P256.Signing.PublicKey(Certificate(derEncoded: Self.parts(of: sample).leaf).publicKey)
        expectation.attestedKey = .publicKey(Array(try #require(ownKey).x963Representation))
        _ = try await verifier.verifyReceipt(receipt, expecting: expectation, at: time)
        let otherKey = try P256.Signing.PublicKey(Certificate(derEncoded: otherLeaf).publicKey)
        expectation.attestedKey = .publicKey(Array(try #require(otherKey).x963Representation))
        await Self.expectReceiptError(.receiptCertificateMismatch) {
            _ = try await verifier.verifyReceipt(receipt, expecting: expectation, at: time)
        }

        expectation = try Self.expectation(for: sample)
        expectation.clientHash = Array(SHA256.hash(data: Array("another challenge".utf8)))
        await Self.expectReceiptError(.receiptClientHashMismatch) {
            _ = try await verifier.verifyReceipt(receipt, expecting: expectation, at: time)
        }

        expectation = try Self.expectation(for: sample)
        expectation.type = .receipt
        await Self.expectReceiptError(.receiptTypeUnexpected) {
            _ = try await verifier.verifyReceipt(receipt, expecting: expectation, at: time)
        }
    }

    @Test("a receipt from another attestation is reported, and rejected when the policy requires receipts")
    func policyRequiresValidReceipt() async throws {
        let sample = try Self.veehaitch()
        // Swap in the receipt of another recording: the attestation itself no longer commits to it.
        let other = try Self.parts(of: RealSample.named("veehaitch_ios_14_3")).receipt
        let original = try #require(sample.attestation)
        let own = try Self.parts(of: sample).receipt
        try #require(own.count == other.count)  // both 3705 bytes, so the CBOR length stays right
        let range = try #require(original.firstRange(of: own))
        var swapped = original
        swapped.replaceSubrange(range, with: other)

        let lenient = try RealSampleTests.verifier(for: sample)
        let result = try await lenient.verifyAttestation(
            swapped, keyID: sample.keyID!, clientDataHash: sample.clientDataHash!, at: sample.validAt!)
        #expect(result.receiptCheck.error?.code == .receiptCertificateMismatch)

        let strict = try AppAttestVerifier(
            policy: AppAttestPolicy(appIDs: [sample.appID], environments: [.development], requireValidReceipt: true))
        await Self.expectReceiptError(.receiptCertificateMismatch) {
            _ = try await strict.verifyAttestation(
                swapped, keyID: sample.keyID!, clientDataHash: sample.clientDataHash!, at: sample.validAt!)
        }
        // The untouched attestation passes the strict policy.
        _ = try await strict.verifyAttestation(
            original, keyID: sample.keyID!, clientDataHash: sample.clientDataHash!, at: sample.validAt!)
    }

    @Test("a simulated receipt is BER with indefinite lengths, verifies with the simulator's root, and not with G3")
    func simulatedReceipt() async throws {
        let scenario = try SimulatedScenario()
        let result = try await scenario.verify(verifier: scenario.verifier())
        let verified = try #require(result.receiptCheck.verified, "\(String(describing: result.receiptCheck.error))")
        #expect(Array(result.receipt.prefix(2)) == [0x30, 0x80])
        #expect(verified.payload.environment == "sandbox" || verified.payload.environment == "production")

        let appleOnly = try AppAttestVerifier(
            policy: AppAttestPolicy(
                appIDs: [SimulatedScenario.appID],
                environments: [.development, .production],
                trustAnchors: [scenario.authority.rootCertificate]
            )
        )
        let rejected = try await scenario.verify(verifier: appleOnly)
        #expect(rejected.receiptCheck.error?.code == .receiptChainInvalid)
    }

    // MARK: - Malformed input

    @Test("every truncation of a real receipt is rejected with a receipt error, never a crash")
    func truncations() throws {
        let receipt = try Self.parts(of: Self.veehaitch()).receipt
        for length in 0..<receipt.count {
            #expect(throws: AppAttestError.self) { _ = try AppAttestReceipt(berEncoded: receipt[..<length]) }
        }
    }

    @Test("garbage, a non-SignedData and an oversized receipt each get their own error")
    func malformed() throws {
        #expect(throws: AppAttestError(code: .receiptMalformed, reason: "")) {
            _ = try AppAttestReceipt(berEncoded: [0x30, 0x03, 0x02, 0x01, 0x01])
        }
        #expect(throws: AppAttestError(code: .receiptMalformed, reason: "")) {
            _ = try AppAttestReceipt(berEncoded: Array("FORMATTEST-SIMULATED-RECEIPT".utf8))
        }
        #expect(throws: AppAttestError(code: .receiptTooLarge, reason: "")) {
            _ = try AppAttestReceipt(berEncoded: [UInt8](repeating: 0x30, count: AppAttestLimits.maximumReceiptSize + 1))
        }
    }

    @Test("bit flips across a real receipt never crash; every flip in what is verified is rejected")
    func bitFlips() async throws {
        let sample = try Self.veehaitch()
        let receipt = try Self.parts(of: sample).receipt
        let original = try AppAttestReceipt(berEncoded: receipt)
        // What verification relies on: the payload (two BER chunks), the signer's certificate and
        // the signature. The receipt's copies of the intermediate and the root are not relied on
        // once the signer's path is verified (and cached), and the version numbers are ignored.
        var relied: [Range<Int>] = []
        for piece in [
            Array(original.content.prefix(1000)), Array(original.content.dropFirst(1000)),
            original.certificatesDER[original.signer.certificateIndex], original.signer.signature,
        ] {
            relied.append(try #require(receipt.firstRange(of: piece)))
        }
        let verifier = try Self.verifier(sample)
        let expectation = try Self.expectation(for: sample)
        var flipsInRelied = 0
        // Every 7th byte, one bit: 530 variants across headers, certificates, payload and signature.
        for offset in stride(from: 0, to: receipt.count, by: 7) {
            var flipped = receipt
            flipped[offset] ^= UInt8(1 << (offset % 8))
            let isRelied = relied.contains { $0.contains(offset) }
            if isRelied { flipsInRelied += 1 }
            do {
                let verified = try await verifier.verifyReceipt(flipped, expecting: expectation, at: sample.validAt!)
                #expect(!isRelied, "a flip at \(offset), in what is verified, was accepted")
                #expect(verified.receipt.content == original.content, "offset \(offset)")
                #expect(verified.receipt.signingCertificate == original.signingCertificate, "offset \(offset)")
            } catch {
                // Refused with the verifier's error (its only error type): what a flip should get.
            }
        }
        #expect(flipsInRelied > 200)
    }
}
