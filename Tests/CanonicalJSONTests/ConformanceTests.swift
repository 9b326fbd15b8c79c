//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import Crypto
import FormAttestTestSupport
import Foundation
import Testing

/// RFC 8785 conformance on the shared vectors (Tests/Fixtures/jcs/PROVENANCE.md).
struct ConformanceTests {
    static let vectors = RealSample.fixturesDirectory.appendingPathComponent("jcs/vectors")

    static func names(withPrefix reject: Bool) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: Self.vectors.path)
            .filter { $0.hasSuffix(".input.json") && $0.hasPrefix("reject-") == reject }
            .map { String($0.dropLast(".input.json".count)) }
            .sorted()
    }

    static func read(_ name: String) throws -> [UInt8] {
        Array(try Data(contentsOf: Self.vectors.appendingPathComponent(name)))
    }

    @Test("the vector set is complete: 29 accept, 16 reject")
    func complete() throws {
        #expect(try Self.names(withPrefix: false).count == 29)
        #expect(try Self.names(withPrefix: true).count == 16)
    }

    @Test("every accept vector canonicalizes byte for byte", arguments: try ConformanceTests.names(withPrefix: false))
    func accept(name: String) throws {
        let output = try CanonicalJSON.canonicalize(Self.read("\(name).input.json"))
        let expected = try Self.read("\(name).expected.json")
        #expect(output == expected, "\(String(decoding: output, as: UTF8.self))")
        // Canonical output is a fixed point.
        #expect(try CanonicalJSON.canonicalize(output) == output)
    }

    @Test("the manifest's SHA-256 of each expected output matches ours")
    func manifestHashes() throws {
        let manifest = String(decoding: try Self.read("MANIFEST.tsv"), as: UTF8.self)
        var checked = 0
        for line in manifest.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
            guard fields.count > 4, fields[1] == "accept" else { continue }
            let output = try CanonicalJSON.canonicalize(Self.read("\(fields[0]).input.json"))
            #expect(hexString(SHA256.hash(data: output)) == String(fields[4]), "\(fields[0])")
            checked += 1
        }
        #expect(checked == 29)
    }

    static let rejectCodes: [String: CanonicalJSONError.Code] = [
        "reject-duplicate-key": .duplicateName,
        "reject-duplicate-key-escaped": .duplicateName,
        "reject-duplicate-key-nested": .duplicateName,
        "reject-high-surrogate-then-ascii": .loneSurrogate,
        "reject-lone-high-surrogate": .loneSurrogate,
        "reject-lone-low-surrogate": .loneSurrogate,
        "reject-lone-surrogate-in-key": .loneSurrogate,
        "reject-reversed-surrogate-pair": .loneSurrogate,
        "reject-infinity-literal": .syntax,
        "reject-nan-literal": .syntax,
        "reject-neg-infinity-literal": .syntax,
        "reject-number-overflow": .numberOutOfRange,
        "reject-number-overflow-negative": .numberOutOfRange,
        "reject-invalid-utf8": .invalidUTF8,
        "reject-overlong-utf8": .invalidUTF8,
        "reject-utf8-encoded-surrogate": .invalidUTF8,
    ]

    @Test("every reject vector is rejected with its specific code", arguments: try ConformanceTests.names(withPrefix: true))
    func reject(name: String) throws {
        let expected = try #require(Self.rejectCodes[name], "no expected code for \(name)")
        let error = try #require(throws: CanonicalJSONError.self) { try CanonicalJSON.canonicalize(Self.read("\(name).input.json")) }
        #expect(error.code == expected, "\(error)")
    }

    @Test("RFC 8785 Appendix B numbers")
    func appendixB() throws {
        let csv = String(decoding: try Self.read("rfc8785-appendixB-numbers.csv"), as: UTF8.self)
        var rows = 0
        for line in csv.split(separator: "\n") where !line.hasPrefix("#") && line.contains(",") {
            let fields = line.split(separator: ",", maxSplits: 1)
            guard let bits = UInt64(fields[0], radix: 16) else { continue }
            let value = Double(bitPattern: bits)
            if fields[1] == "REJECT" {
                #expect(!value.isFinite)
            } else {
                #expect(String(decoding: JSONValue.number(value).canonicalBytes, as: UTF8.self) == String(fields[1]))
            }
            rows += 1
        }
        #expect(rows >= 24)
    }
}
