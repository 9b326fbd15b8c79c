//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import FormAttestTestSupport
import Foundation
import Testing

/// ECMAScript number serialization against independent references.
struct NumberTests {
    /// Checks every `hexbits,expected` line; returns how many lines were checked.
    static func check(file: URL) throws -> Int {
        let text = String(decoding: try Data(contentsOf: file), as: UTF8.self)
        var checked = 0
        var failures: [String] = []
        for line in text.split(separator: "\n") {
            guard let comma = line.firstIndex(of: ","), let bits = UInt64(line[..<comma], radix: 16) else { continue }
            let expected = line[line.index(after: comma)...]
            let value = Double(bitPattern: bits)
            let output = String(decoding: JSONValue.number(value).canonicalBytes, as: UTF8.self)
            if output != expected, failures.count < 10 {
                failures.append("\(line[..<comma]): got \(output), want \(expected)")
            }
            // Round trip: parsing our output gives the same double back (-0 prints as 0).
            if case .number(let reparsed) = try CanonicalJSON.parse(Array(output.utf8)), reparsed != value {
                failures.append("\(output) does not round-trip")
            }
            checked += 1
        }
        #expect(failures.isEmpty, "\(failures)")
        return checked
    }

    @Test("exact numbers: every canonical number within ±2^53 is exact; the same with one more tiny digit is not (first 20,000 lines)")
    func exactness() throws {
        let text = String(decoding: try Data(contentsOf: RealSample.fixturesDirectory.appendingPathComponent("jcs/numbers-100k.txt")), as: UTF8.self)
        let exact = CanonicalJSON.Limits(exactNumbers: true)
        var failures: [String] = []
        var checked = 0
        for line in text.split(separator: "\n").prefix(20_000) {
            guard let comma = line.firstIndex(of: ","), let bits = UInt64(line[..<comma], radix: 16) else { continue }
            let canonical = String(line[line.index(after: comma)...])
            let value = Double(bitPattern: bits)
            let withinRange = value.magnitude <= 9_007_199_254_740_992
            func accepted(_ text: String) -> Bool { (try? CanonicalJSON.parse(Array(text.utf8), limits: exact)) != nil }
            if accepted(canonical) != withinRange { failures.append("\(canonical): accepted \(!withinRange)") }
            // A digit beyond the seventeenth significant one: the text's value is no double's shortest form.
            guard value != 0 else { continue }
            let parts = canonical.split(separator: "e", maxSplits: 1)
            let mantissa = parts[0].contains(".") ? String(parts[0]) : String(parts[0]) + "."
            let perturbed = mantissa + "00000000000000000000001" + (parts.count > 1 ? "e" + parts[1] : "")
            if accepted(perturbed) { failures.append("\(perturbed) was accepted") }
            checked += 1
        }
        #expect(checked > 19_000)
        #expect(failures.isEmpty, "\(failures.prefix(10))")
    }

    @Test("exact numbers: decimal spellings of one value are all exact; errors name the number")
    func exactSpellings() throws {
        let exact = CanonicalJSON.Limits(exactNumbers: true)
        for text in [
            "1234.5", "1234.50", "1.2345e3", "12345e-1", "0.12345E4", "-0", "0.0", "0e10", "100", "1E2", "9007199254740992", "-9007199254740992",
        ] {
            #expect((try? CanonicalJSON.parse(Array(text.utf8), limits: exact)) != nil, "\(text)")
        }
        for text in ["9007199254740993", "9007199254740994", "1e16", "0.1000000000000000055511151231257827", "1e-400", "2.4703282292062328e-324"] {
            #expect(throws: CanonicalJSONError.self, "\(text)") { _ = try CanonicalJSON.parse(Array(text.utf8), limits: exact) }
            do {
                _ = try CanonicalJSON.parse(Array(#"{"amount":\#(text)}"#.utf8), limits: exact)
            } catch {
                #expect(error.code == .inexactNumber && error.reason.contains(text.prefix(16)), "\(error)")
            }
            // Without the option, RFC 8785 rounds as it should.
            _ = try CanonicalJSON.parse(Array(text.utf8))
        }
    }

    @Test("every line of numbers-100k.txt")
    func hundredThousand() throws {
        #expect(try Self.check(file: RealSample.fixturesDirectory.appendingPathComponent("jcs/numbers-100k.txt")) == 100_000)
    }

    /// Generates fresh numbers with tools/gen_numbers.py (an independent ES6 Number::toString on
    /// Python's repr digits) and checks them all. FORMATTEST_NUMBERS and FORMATTEST_NUMBERS_SEED
    /// make a longer or different run.
    @Test("more generated numbers (tools/gen_numbers.py, another seed)")
    func generated() throws {
        let environment = ProcessInfo.processInfo.environment
        let count = Int(environment["FORMATTEST_NUMBERS"] ?? "") ?? 200_000
        let seed = environment["FORMATTEST_NUMBERS_SEED"] ?? "20261122"
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("numbers-\(UUID().uuidString).txt")
        defer { try? FileManager.default.removeItem(at: output) }
        let script = repositoryDirectory.appendingPathComponent("tools/gen_numbers.py")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script.path, "-n", String(count), "--seed", seed, "-o", output.path]
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        #expect(try Self.check(file: output) == count)
    }

    @Test(
        "layout thresholds of ECMAScript's algorithm",
        arguments: [
            (1e21, "1e+21"), (1e20, "100000000000000000000"), (1e-7, "1e-7"), (1e-6, "0.000001"),
            (-0.0, "0"), (123.456, "123.456"), (-Double.leastNonzeroMagnitude, "-5e-324"), (1.7976931348623157e308, "1.7976931348623157e+308"),
            (0.1 + 0.2, "0.30000000000000004"), (1234.5, "1234.5"), (Double(sign: .plus, exponent: 53, significand: 1), "9007199254740992"),
            (1.5e300, "1.5e+300"), (2.5e-7, "2.5e-7"), (100, "100"),
        ]
    )
    func thresholds(value: Double, expected: String) {
        #expect(String(decoding: JSONValue.number(value).canonicalBytes, as: UTF8.self) == expected)
    }
}
