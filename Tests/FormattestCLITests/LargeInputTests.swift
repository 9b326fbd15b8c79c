//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
import FormAttestTestSupport
import Foundation
import Testing

/// Inputs beyond the old 1 MiB cap: `canonicalize` and `hash` of a 2.5 MB document (`--max-bytes`
/// bounds it), and `wrap --batch` streamed line by line (each line bounded by `--max-line-bytes`).
struct LargeInputTests {
    /// A deterministic JSON document of about 2.5 MB, written the way a JSON library writes it
    /// (pretty, members in no canonical order), with escapes, non-ASCII text and numbers.
    static func largeDocument() throws -> Data {
        var random = SplitMix64(seed: 2_500_000)
        var records: [[String: Any]] = []
        var size = 0
        var index = 0
        while size < 2_500_000 {
            let record: [String: Any] = [
                "zeta": "record \(index) \u{00e9}\u{4e2d}\u{1f600} \"quoted\" \\ tab\t",
                "id": index,
                "amount": Double(random.next() % 1_000_000) / 100,
                "alpha": ["nested": ["flag": index % 2 == 0, "none": NSNull()], "list": [1, 2.5, -3, 1e21]],
                "Beta": String(repeating: "x", count: Int(random.next() % 64)),
            ]
            records.append(record)
            size += 200
            index += 1
        }
        let data = try JSONSerialization.data(withJSONObject: ["records": records, "count": records.count], options: [.prettyPrinted])
        return data
    }

    @Test("canonicalize and hash take a 2.5 MB document by default; the canonical form is a fixed point; --max-bytes bounds the input")
    func largeDocument() async throws {
        let files = try TemporaryFiles()
        let document = try Self.largeDocument()
        #expect(document.count > 2_500_000)
        let path = try files.write(document, named: "large.json")

        let canonical = try await Formattest.run(["canonicalize", path])
        #expect(canonical.status == 0, "\(canonical.stderr)")
        let canonicalBytes = Data(canonical.stdout.utf8)
        #expect(canonicalBytes != document)
        #expect(canonicalBytes.count > 2_000_000)
        // The same value as the input (read by another JSON parser).
        let input = try #require(try JSONSerialization.jsonObject(with: document) as? NSDictionary)
        let output = try #require(try JSONSerialization.jsonObject(with: canonicalBytes) as? NSDictionary)
        #expect(input == output)
        // RFC 8785's form of its own output is itself.
        let canonicalPath = try files.write(canonicalBytes, named: "canonical.json")
        let again = try await Formattest.run(["canonicalize", canonicalPath])
        #expect(again.status == 0)
        #expect(Data(again.stdout.utf8) == canonicalBytes)

        let hash = try await Formattest.run(["hash", path])
        #expect(hash.status == 0, "\(hash.stderr)")
        #expect(hash.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == hexString(SHA256.hash(data: canonicalBytes)))

        let bounded = try await Formattest.run(["canonicalize", "--max-bytes", "1000000", path])
        #expect(bounded.status == 2)
        #expect(bounded.stderr.contains("\(path) is larger than 1000000 bytes"), "\(bounded.stderr)")
        #expect(bounded.stdout.isEmpty)
        let raised = try await Formattest.run(["canonicalize", "--max-bytes", "\(document.count)", path])
        #expect(raised.status == 0)
        #expect(Data(raised.stdout.utf8) == canonicalBytes)

        // Depth stays bounded whatever the size limit.
        let deep = try files.write(String(repeating: "[", count: 100) + String(repeating: "]", count: 100), named: "deep.json")
        let tooDeep = try await Formattest.run(["canonicalize", "--max-bytes", "100000000", deep])
        #expect(tooDeep.status == 1)
        #expect(tooDeep.stderr.hasPrefix("invalid JSON:"), "\(tooDeep.stderr)")
    }

    @Test("wrap --batch streams 160 attestation lines (over 1 MiB) from stdin and wraps them all")
    func largeBatch() async throws {
        let files = try TemporaryFiles()
        let samples = try RealSample.withAttestation()
        var lines: [String] = []
        for index in 0..<160 {
            let line = try WrapTests.line(samples[index % samples.count], name: "item-\(index)")
            lines.append(line.replacingOccurrences(of: #"["fido2","jws"]"#, with: #"["fido2"]"#))
        }
        let input = Data((lines.joined(separator: "\n") + "\n").utf8)
        #expect(input.count > 1 << 20)
        let out = files.directory.appendingPathComponent("out").path
        let result = try await Formattest.run(["wrap", "--batch", "-", "--out-dir", out], stdin: input)
        #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
        let summary = try result.jsonObject()
        #expect(summary["total"] as? Int == 160)
        #expect(summary["wrapped"] as? Int == 160)
        #expect(try FileManager.default.contentsOfDirectory(atPath: out).filter { !$0.hasPrefix(".") }.count == 160)
    }

    @Test("wrap --batch: an over-long or bad line fails by its number; the other lines are wrapped; exit 1")
    func badLines() async throws {
        let files = try TemporaryFiles()
        let samples = try RealSample.withAttestation()
        func line(_ index: Int) throws -> String {
            try WrapTests.line(samples[index], name: "ok-\(index)").replacingOccurrences(of: #"["fido2","jws"]"#, with: #"["fido2"]"#)
        }
        let longest = try (0..<3).map { try line($0).utf8.count }.max() ?? 0
        let limit = longest + 10
        let tooLong = #"{"name":"long","pad":""# + String(repeating: "a", count: max(limit * 3, 200_000)) + #""}"#
        let batch = try files.write(
            [try line(0), tooLong, "{not json", "", try line(1), try line(2)].joined(separator: "\n"),
            named: "mixed.jsonl"
        )
        let out = files.directory.appendingPathComponent("out").path
        let result = try await Formattest.run(["wrap", "--batch", batch, "--out-dir", out, "--max-line-bytes", "\(limit)"])
        #expect(result.status == 1, "\(result.stdout) \(result.stderr)")
        let summary = try result.jsonObject()
        #expect(summary["total"] as? Int == 5)
        #expect(summary["wrapped"] as? Int == 3)
        #expect(summary["failed"] as? Int == 2)
        let failures = try #require(summary["failures"] as? [[String: Any]])
        #expect(failures.map { $0["item"] as? String } == ["line 2", "line 3"])
        #expect(failures.map { $0["code"] as? String } == ["line_too_long", "invalid_request"])
        #expect((failures[0]["message"] as? String ?? "").contains("longer than \(limit) bytes (--max-line-bytes)"))
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: out).filter { !$0.hasPrefix(".") }.sorted() == [
                "ok-0.json", "ok-1.json", "ok-2.json",
            ])
    }
}
