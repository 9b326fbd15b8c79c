//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestInspector
import AppAttestSimulator
import CanonicalJSON
import FormAttestTestSupport
import Foundation
import Testing

/// The inspector: exact output on real recordings (golden files), losslessness of the tree view,
/// agreement with OpenSSL's ASN.1 parser, and no crash on malformed input.
struct InspectorTests {
    /// Four real attestations (iOS 14 development, 2024 production, Apple's own 2024 sample, Apple's
    /// iOS 27 sample of 2026 with its signals and access control), one real assertion, and one
    /// simulated iOS 27 assertion with the documentation spelling and a CDHash (no real one is public).
    static let goldenSamples = [
        "veehaitch_ios_14_2", "uebelack_production", "apple_docs_sample_2024_via_oliverbinns", "apple_docs_sample_2026_via_webauthn4j",
    ]
    static let simulatedAssertion = "simulated_ios27_cdhash.assertion"
    static let goldenDirectory = RealSample.fixturesDirectory.appendingPathComponent("inspector")

    struct Case: Sendable, CustomStringConvertible {
        let name: String
        let bytes: [UInt8]
        let mode: InspectionMode
        var description: String { "\(self.name).\(self.mode.rawValue)" }
    }

    static func cases() throws -> [Case] {
        var cases: [Case] = []
        for name in Self.goldenSamples {
            let sample = try RealSample.named(name)
            for mode in InspectionMode.allCases {
                cases.append(Case(name: name, bytes: try #require(sample.attestation), mode: mode))
            }
        }
        let assertion = try #require(try RealSample.named("veehaitch_ios_14_2").assertions.first).assertion
        let simulated = try #require(
            Data(
                base64Encoded: try String(contentsOf: Self.goldenDirectory.appendingPathComponent("\(Self.simulatedAssertion).b64"), encoding: .utf8)
                    .trimmingCharacters(in: .whitespacesAndNewlines))
        )
        for mode in InspectionMode.allCases {
            cases.append(Case(name: "veehaitch_ios_14_2.assertion", bytes: assertion, mode: mode))
            cases.append(Case(name: Self.simulatedAssertion, bytes: Array(simulated), mode: mode))
        }
        return cases
    }

    /// Compares with the golden file, or writes it when FORMATTEST_UPDATE_GOLDEN=1.
    static func expectGolden(_ actual: String, file: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let url = Self.goldenDirectory.appendingPathComponent(file)
        if ProcessInfo.processInfo.environment["FORMATTEST_UPDATE_GOLDEN"] == "1" {
            try actual.write(to: url, atomically: true, encoding: .utf8)
            return
        }
        let expected = try String(contentsOf: url, encoding: .utf8)
        if actual != expected {
            let actualLines = actual.split(separator: "\n", omittingEmptySubsequences: false)
            let expectedLines = expected.split(separator: "\n", omittingEmptySubsequences: false)
            let first = Array(zip(actualLines, expectedLines)).firstIndex { $0 != $1 } ?? min(actualLines.count, expectedLines.count)
            Issue.record(
                "\(file) differs from line \(first + 1): got \(actualLines.dropFirst(first).first ?? "<end>") expected \(expectedLines.dropFirst(first).first ?? "<end>")",
                sourceLocation: sourceLocation
            )
        }
    }

    @Test("exact output on real recordings: text and JSON of every view", arguments: try cases())
    func golden(_ testCase: Case) throws {
        let inspection = Inspection(testCase.bytes, mode: testCase.mode)
        try Self.expectGolden(inspection.text, file: "\(testCase.description).txt")
        try Self.expectGolden(inspection.jsonText + "\n", file: "\(testCase.description).json")
    }

    @Test("the semantic view names what a person looks for, on every real attestation", arguments: try RealSample.withAttestation())
    func semanticContent(sample: RealSample) throws {
        let text = Inspection(try #require(sample.attestation), mode: .semantic).text
        for expected in [
            "fmt: apple-appattest", "rpIdHash: ", "flags: 0x40 (AT attested credential data)", "signCount: 0",
            "aaguid: ", "\(sample.environment?.rawValue ?? "?"))", "credentialId: ", "kty (1): 2 (EC2)", "alg (3): -7 (ES256)",
            "crv (-1): 1 (P-256)", "App Attest nonce (1.2.840.113635.100.8.2): nonce ", "[1204] app id: \"\(sample.appID)\"",
            "[1400] OS version: ", "field 2 app id: \"\(sample.appID)\"", "field 6 receipt type: \"ATTEST\"",
            "field 12 creation time: ", "field 21 expiration time: ", "CN=Apple Root CA - G3", "signerInfo",
        ] {
            #expect(text.contains(expected), "\(sample): missing \(expected)")
        }
        // The keyId is spelled as everywhere else: base64url, no padding (docs/formats.md, Encodings).
        if let keyID = sample.keyID {
            #expect(text.contains("credentialId: \(Formattest.base64url(keyID))\n"), "\(sample)")
        }
        // No verdicts ("validity" is the X.509 field's name, not a judgement).
        #expect(text.firstMatch(of: /(?i)\b(valid|invalid|verified|trusted|score|passed|failed)\b|✓|✔|✗/) == nil, "\(sample): the inspector judged")
    }

    @Test("the tree view is lossless: every container's children tile its content exactly", arguments: try RealSample.withAttestation())
    func treeIsLossless(sample: RealSample) throws {
        let bytes = try #require(sample.attestation)
        let json = Inspection(bytes, mode: .tree).json
        let root = try #require(json["root"])
        var leaves = 0
        func check(_ node: JSONValue, path: String) throws {
            let offset = Int(try #require(node["offset"]?.numberValue))
            let header = Int(try #require(node["headerLength"]?.numberValue))
            let length = node["length"].flatMap(\.numberValue).map(Int.init)
            let label = node["label"]?.stringValue ?? "?"
            guard case .array(let children)? = node["children"] else {
                leaves += 1
                #expect(node["value"] != nil || length == 0, "\(path)/\(label) has neither value nor children")
                return
            }
            // The content starts after the header (and a BIT STRING's unused-bits byte).
            var position = offset + header + (label == "BIT STRING" ? 1 : 0)
            for child in children {
                let childOffset = Int(try #require(child["offset"]?.numberValue))
                #expect(childOffset == position, "\(path)/\(label): gap or overlap at \(position)")
                try check(child, path: "\(path)/\(label)")
                let childLength = child["length"].flatMap(\.numberValue).map(Int.init)
                let childHeader = Int(try #require(child["headerLength"]?.numberValue))
                if let childLength {
                    position = childOffset + childHeader + childLength
                } else {
                    position = try Self.end(of: child)
                }
            }
            if let length {
                #expect(position == offset + header + length, "\(path)/\(label): children end at \(position)")
            }
        }
        try check(root, path: "")
        #expect(Int(try #require(root["length"]?.numberValue)) + 1 == bytes.count)
        #expect(leaves > 200)
    }

    /// The end of an indefinite-length item: the end of its last child (the end-of-contents marker).
    static func end(of node: JSONValue) throws -> Int {
        guard case .array(let children)? = node["children"], let last = children.last else {
            throw InspectorTestError("indefinite item without children")
        }
        let offset = Int(try #require(last["offset"]?.numberValue))
        let header = Int(try #require(last["headerLength"]?.numberValue))
        if let length = last["length"].flatMap(\.numberValue).map(Int.init) { return offset + header + length }
        return try self.end(of: last)
    }

    @Test("the tree view of a receipt agrees item by item with openssl asn1parse")
    func receiptTreeMatchesOpenSSL() throws {
        let object = try AttestationObject(cborEncoded: try #require(RealSample.named("veehaitch_ios_14_2").attestation))
        let receipt = object.statement.receipt
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("receipt-\(UUID().uuidString).der")
        try Data(receipt).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["openssl", "asn1parse", "-inform", "DER", "-in", file.path]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        try #require(process.terminationStatus == 0)
        // "   54:d=6  hl=4 l=1000 prim: OCTET STRING ..." -> (offset, depth, header, length or -1 for inf)
        let expected: [[Int]] = output.split(separator: "\n").compactMap { line in
            let fields = line.split(whereSeparator: { $0 == " " || $0 == ":" || $0 == "=" }).map(String.init)
            guard fields.count >= 7, let offset = Int(fields[0]), let depth = Int(fields[2]), let header = Int(fields[4]) else { return nil }
            return [offset, depth, header, fields[6] == "inf" ? -1 : Int(fields[6]) ?? -2]
        }
        var actual: [[Int]] = []
        func walk(_ node: JSONValue, depth: Int) {
            let offset = Int(node["offset"]?.numberValue ?? -1)
            let header = Int(node["headerLength"]?.numberValue ?? -1)
            let length = node["length"].flatMap(\.numberValue).map(Int.init) ?? -1
            actual.append([offset, depth, header, length])
            // OpenSSL does not descend into OCTET STRINGs; the inspector shows what they encapsulate.
            guard node["value"]?.stringValue?.hasSuffix("encapsulates:") != true, case .array(let children)? = node["children"] else { return }
            for child in children { walk(child, depth: depth + 1) }
        }
        walk(try #require(Inspection(receipt, mode: .tree).json["root"]), depth: 0)
        #expect(expected.count == 266)
        #expect(actual == expected)
    }

    @Test("minimumAnswerSize never exceeds the answer's real size, in any mode or text", arguments: try RealSample.withAttestation())
    func answerSizeBound(sample: RealSample) throws {
        let bytes = try #require(sample.attestation)
        let amplifier = [UInt8(0x99), 0x0F, 0xFA] + [UInt8](repeating: 0, count: 4090)
        for input in [bytes, Array(bytes.prefix(bytes.count / 2)), amplifier, [0xa0], [0x30, 0x80]] {
            for mode in [InspectionMode.semantic, .forensic, .tree] {
                let inspection = Inspection(input, mode: mode)
                for text in [false, true] {
                    let real = inspection.json(includingText: text).canonicalBytes.count
                    let least = inspection.minimumAnswerSize(includingText: text)
                    #expect(least <= real, "\(sample) \(mode) text \(text): bound \(least) over the real \(real)")
                    // Close enough to refuse early: within a factor of 3 of the real size.
                    #expect(least * 3 >= real, "\(sample) \(mode) text \(text): bound \(least), real \(real)")
                }
            }
        }
        // The amplifier of the hostile pass (4,093 bytes of CBOR) is over the service's 256 KiB by its bound alone.
        #expect(Inspection(amplifier, mode: .tree).minimumAnswerSize(includingText: true) > 256 * 1024)
    }

    @Test("no crash and a view in every mode for truncations, bit flips and random bytes")
    func malformedInput() throws {
        var generator = SplitMix64(seed: 0xF0_12_A3)
        let sample = try #require(RealSample.named("veehaitch_ios_14_2").attestation)
        var inputs: [[UInt8]] = [
            [], [0x00], [0xa1], [0x30, 0x80], [0x30, 0x84, 0xff, 0xff, 0xff, 0xff], [UInt8](repeating: 0x30, count: 200).map { $0 },
        ]
        for length in stride(from: 0, to: sample.count, by: 97) { inputs.append(Array(sample[..<length])) }
        for _ in 0..<150 {
            var flipped = sample
            let offset = Int.random(in: 0..<flipped.count, using: &generator)
            flipped[offset] ^= UInt8(1 << Int.random(in: 0..<8, using: &generator))
            inputs.append(flipped)
        }
        for _ in 0..<100 {
            inputs.append((0..<Int.random(in: 1..<600, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) })
        }
        inputs.append([UInt8](repeating: 0, count: Inspection.maximumInputSize + 1))
        for input in inputs {
            for mode in InspectionMode.allCases {
                let inspection = Inspection(input, mode: mode)
                #expect(!inspection.text.isEmpty)
                #expect(!inspection.jsonText.isEmpty)
            }
        }
    }

    @Test("iOS 27: the unflagged extension map is shown, in attestations and assertions")
    func iOS27Extensions() throws {
        let device = SimulatedDevice(authority: try SimulatedAttestationAuthority(), appID: "ABCDE12345.com.example.app")
        var options = SimulatedDevice.AttestationOptions()
        options.authenticatorDataSuffix = SimulatedDevice.iOS27ExtensionMap()
        options.osVersion = "27.0"
        let hash = [UInt8](repeating: 7, count: 32)
        let attestation = try device.attest(device.key(0), clientDataHash: hash, at: Date(timeIntervalSince1970: 1_795_341_600), options: options)
        let text = Inspection(attestation, mode: .semantic).text
        #expect(text.contains("    extensions (ED flag not set, as iOS 27 writes them): 2 entries\n"))
        #expect(text.contains("      apple_bundle_version_01: \"1\"\n"))
        #expect(text.contains("      apple_validation_category_01: h'01000000' = validation category 1 (os-executable)\n"))
        #expect(text.contains("[1400] OS version: \"27.0\""))
        // The forensic view places the map right after the COSE key, at the end of authData.
        let forensic = Inspection(attestation, mode: .forensic).text
        #expect(forensic.contains("    extensions (ED flag not set, as iOS 27 writes them): 2 entries"))

        var assertionOptions = SimulatedDevice.AssertionOptions()
        assertionOptions.authenticatorDataSuffix = SimulatedDevice.iOS27ExtensionMap()
        let assertion = try device.assert(device.key(0), clientDataHash: hash, counter: 3, options: assertionOptions)
        let assertionText = Inspection(assertion, mode: .semantic).text
        #expect(assertionText.contains("    signCount: 3\n    extensions (ED flag not set, as iOS 27 writes them): 2 entries\n"))
    }

    @Test("iOS 27 and macOS 27: every signal is shown with its meaning, from either spelling; the access control decoded")
    func signalsShown() throws {
        var device = SimulatedDevice(authority: try SimulatedAttestationAuthority(), appID: "ABCDE12345.com.example.app")
        var signals = SimulatedSignals(validationCategory: .developerID, bundleVersion: "5.2", cdHash: [UInt8](repeating: 0xAB, count: 32))
        signals.spelling = .documentation
        device.profile = .macOS27(signals)
        let hash = [UInt8](repeating: 7, count: 32)
        let attestation = try device.attest(device.key(0), clientDataHash: hash, at: Date(timeIntervalSince1970: 1_795_341_600))
        let text = Inspection(attestation, mode: .semantic).text
        #expect(text.contains("      bundleVersion: \"5.2\"\n"))
        #expect(text.contains("      validationCategory: h'06000000' = validation category 6 (developer-id)\n"))
        #expect(text.contains("      apple_cd_hash_hash_01: h'\(String(repeating: "ab", count: 32))' = CodeDirectory hash, 32 bytes\n"))
        #expect(text.contains("      apple_cd_hash_type_01: h'02' = CodeDirectory hash type 2 (SHA-256)\n"))
        #expect(text.contains("App Attest access control (1.2.840.113635.100.8.6): 75 bytes, base64url MEmjRwRF"))
        #expect(text.contains("\"osgn\" (sign): [1] TRUE"))
        #expect(text.contains("\"oa\" (attest): [1] TRUE"))
        #expect(text.contains("\"okd\": [1] TRUE"))
        // An unknown category is shown as its number; a category of another length says so.
        var odd = SimulatedSignals(validationCategory: ValidationCategory(rawValue: 11))
        odd.extraEntries = [("validationCategory", .bytes([1, 2, 3]))]
        var assertionOptions = SimulatedDevice.AssertionOptions()
        assertionOptions.authenticatorDataSuffix = odd.extensionMap
        let assertion = try device.assert(device.key(0), clientDataHash: hash, counter: 1, options: assertionOptions)
        let assertionText = Inspection(assertion, mode: .semantic).text
        #expect(assertionText.contains("apple_validation_category_01: h'0b000000' = validation category 11\n"))
        #expect(assertionText.contains("validationCategory: h'010203' (a validation category is 4 bytes, little-endian)\n"))
    }

    @Test("a certificate on its own is shown as one (the receipt's signer, from its DER)")
    func certificateAlone() throws {
        let object = try AttestationObject(cborEncoded: try #require(RealSample.named("veehaitch_ios_14_2").attestation))
        let text = Inspection(object.statement.leafCertificate, mode: .semantic).text
        #expect(text.hasPrefix("certificate: ST=California,O=Apple Inc.,OU=AAA Certification,CN=da8d2cc9"))
        #expect(text.contains("[1400] OS version: \"14.2\""))
    }

    @Test("undecodable parts are shown where they are, and the rest is still decoded")
    func partialDecoding() throws {
        let sample = try RealSample.named("veehaitch_ios_14_2")
        var bytes = try #require(sample.attestation)
        // Break the receipt's first byte (0x30 -> 0x31, a SET): the certificates and authData still show.
        let receipt = try AttestationObject(cborEncoded: bytes).statement.receipt
        let offset = try #require(bytes.firstRange(of: receipt)?.lowerBound)
        bytes[offset + 2] = 0xff  // an impossible length inside the receipt's ContentInfo
        let text = Inspection(bytes, mode: .semantic).text
        #expect(text.contains("receipt: undecodable: not BER at offset"))
        #expect(text.contains("x5c[0] credential certificate"))
        #expect(text.contains("signCount: 0"))
    }
}

struct InspectorTestError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension JSONValue {
    subscript(key: String) -> JSONValue? {
        guard case .object(let object) = self else { return nil }
        return object.members.first { $0.name.string == key }?.value
    }

    var numberValue: Double? {
        guard case .number(let number) = self else { return nil }
        return number
    }
}
