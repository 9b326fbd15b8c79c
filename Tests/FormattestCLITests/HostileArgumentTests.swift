//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing

/// Settings and arguments are untrusted text too: each bad value stops the command with exit 2
/// and a message naming the setting, before anything listens or is read.
struct HostileArgumentTests {
    @Test(
        "serve refuses non-finite, negative and absurd durations and bad values (exit 2, named)",
        arguments: [
            (["--form-max-age", "nan"], "--form-max-age"), (["--form-max-age", "inf"], "--form-max-age"),
            (["--form-max-age", "-5"], "--form-max-age"), (["--form-max-age", "1e300"], "--form-max-age"),
            (["--form-max-skew", "nan"], "--form-max-skew"), (["--challenge-lifetime", "nan"], "--challenge-lifetime"),
            (["--challenge-lifetime", "0"], "--challenge-lifetime"), (["--max-key-age", "nan"], "--max-key-age"),
            (["--idle-timeout", "nan"], "--idle-timeout"), (["--body-timeout", "-1"], "--body-timeout"),
            (["--log-level", "loud"], "--log-level"), (["--environment", "Production"], "environment"),
            (["--port", "0"], "--port"), (["--app-id", ""], "--app-id"),
            (["--counter-rule", "Tolerant"], "--counter-rule"), (["--counter-rule", "lenient"], "--counter-rule"),
            (["--min-free-space", "-1"], "--min-free-space"), (["--min-free-space", "1e9"], "--min-free-space"),
            (["--rate-limit-assertions-per-user", "0"], "--rate-limit-assertions-per-user"),
        ])
    func serveSettings(arguments: [String], named: String) async throws {
        let result = try await Formattest.run(["serve", "--store", "memory", "--insecure-no-caller-auth", "--port", "18999"] + arguments)
        #expect(result.status == 2, "\(arguments): \(result.status) \(result.stderr)")
        #expect(result.stderr.contains(named), "\(result.stderr)")
    }

    @Test(
        "--at takes strict RFC 3339 UTC only; a 40-digit fraction is a usage error, not a crash",
        arguments: [
            "2026-01-01T00:00:00.0000000000000000000000000000000000000001Z", "2024-02-07T22:08:56+01:00", "2024-02-07T21:08:56+01:00Z",
            "2024-02-07 21:08:56Z", "\u{FF12}024-02-07T21:08:56Z",
        ])
    func strictAt(at: String) async throws {
        let sample = try RealSample.named("veehaitch_ios_14_2")
        let files = try TemporaryFiles()
        let result = try await Formattest.run([
            "verify", "attestation", "--attestation", try files.write(Data(try #require(sample.attestation)).base64EncodedString(), named: "a.b64"),
            "--key-id", Data(try #require(sample.keyID)).base64EncodedString(), "--app-id", sample.appID, "--challenge", "wurzelpfropf", "--at", at,
        ])
        #expect(result.status == 2, "\(result.status) \(result.stderr)")
        #expect(result.stderr.contains("RFC 3339"), "\(result.stderr)")
    }

    @Test("an input file far over the limit is refused after reading the limit, not the file")
    func boundedRead() async throws {
        let files = try TemporaryFiles()
        let path = files.directory.appendingPathComponent("huge.json").path
        #expect(FileManager.default.createFile(atPath: path, contents: nil))
        let handle = try #require(FileHandle(forWritingAtPath: path))
        try handle.truncate(atOffset: 300 << 20)  // 300 MB, sparse
        try handle.close()
        for command in [["canonicalize", path], ["inspect", path]] {
            let result = try await Formattest.run(command)
            #expect(result.status == 2, "\(command): \(result.status) \(result.stderr)")
            #expect(result.stderr.contains("larger than"), "\(result.stderr)")
        }
    }
}
