//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing

/// `formattest canonicalize` and `formattest hash`.
struct FormattestJSONTests {
    @Test("canonicalize writes the canonical bytes with no added newline")
    func canonicalize() async throws {
        let result = try await Formattest.run(["canonicalize"], stdin: Data(#"{ "b": 1.50, "a": "\u00e9", "c": [1e21] }"#.utf8))
        #expect(result.status == 0)
        #expect(result.stdout == #"{"a":"é","b":1.5,"c":[1e+21]}"#)
    }

    @Test("canonicalize reproduces every accept vector from a file")
    func vectors() async throws {
        let directory = RealSample.fixturesDirectory.appendingPathComponent("jcs/vectors")
        for name in ["cyberphone-weird", "edge-sort-utf16-vs-codepoint", "form-typical"] {
            let result = try await Formattest.run(["canonicalize", directory.appendingPathComponent("\(name).input.json").path])
            #expect(result.status == 0)
            #expect(Data(result.stdout.utf8) == (try Data(contentsOf: directory.appendingPathComponent("\(name).expected.json"))), "\(name)")
        }
    }

    @Test("hash prints SHA-256 of the canonical form, hex or base64url, and a newline")
    func hash() async throws {
        let form = RealSample.fixturesDirectory.appendingPathComponent("jcs/vectors/form-typical.input.json").path
        let hex = try await Formattest.run(["hash", form])
        #expect(hex.status == 0)
        #expect(hex.stdout == "232a6e69513bfff271defecc87f37e667c768b04910f621a4d35bff97da2427f\n")
        let base64url = try await Formattest.run(["hash", form, "--encoding", "base64url"])
        #expect(base64url.stdout == "IypuaVE7__Jx3v7Mh_N-Znx2iwSRD2IaTTW_-X2iQn8\n")
    }

    @Test("invalid JSON exits 1 with a one-line reason on stderr", arguments: [#"{"a":1,"a":2}"#, #"["\ud800"]"#, "[NaN]", "{"])
    func invalid(json: String) async throws {
        for command in ["canonicalize", "hash"] {
            let result = try await Formattest.run([command, "-"], stdin: Data(json.utf8))
            #expect(result.status == 1)
            #expect(result.stdout.isEmpty)
            #expect(result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
        }
    }
}

/// The key pool shared by two processes.
struct FormattestPoolTests {
    @Test("two extension processes taking from one pool directory never get the same key")
    func twoProcesses() async throws {
        let files = try TemporaryFiles()
        let container = files.directory.path
        let fill = try await Formattest.run(["pool", "fill", "--container", container, "--count", "40"])
        #expect(fill.status == 0, "\(fill.stderr)")
        #expect(fill.stdout == "40\n")

        // Start both before reading either, so that they run at the same time.
        let first = try Formattest.start(["pool", "take", "--container", container, "--all", "--mark-used"])
        let second = try Formattest.start(["pool", "take", "--container", container, "--all", "--mark-used"])
        let a = await first.finish()
        let b = await second.finish()
        #expect(a.status == 0 && b.status == 0)
        let keysA = Set(a.stdout.split(separator: "\n"))
        let keysB = Set(b.stdout.split(separator: "\n"))
        #expect(keysA.isDisjoint(with: keysB), "both processes took \(keysA.intersection(keysB))")
        #expect(keysA.count + keysB.count == 40)
        // Key ids are printed base64url without padding (32 bytes: 43 characters).
        let alphabet = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        #expect(keysA.union(keysB).allSatisfy { $0.count == 43 && $0.allSatisfy(alphabet.contains) })
        let status = try await Formattest.run(["pool", "status", "--container", container])
        #expect(status.stdout.contains(#""available":0"#))
        #expect(status.stdout.contains(#""inUse":0"#))
    }
}
