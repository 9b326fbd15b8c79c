//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import Foundation
import FormAttestTestSupport
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
