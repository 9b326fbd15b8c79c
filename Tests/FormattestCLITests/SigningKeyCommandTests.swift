//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing

/// The JWS signing key on the command line: read-only commands never create one, `keys generate
/// --signing-key` writes where it is told, the JWKS holds the current and the previous key, keys
/// made by `openssl` are read (P-256 only), and every key problem is one line naming the file.
struct SigningKeyCommandTests {
    /// Runs `openssl` with `arguments`; the test fails when it does.
    static func openssl(_ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["openssl"] + arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = Pipe()
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "openssl \(arguments)")
        return String(decoding: data, as: UTF8.self)
    }

    static func jwksKeyIDs(_ result: Formattest.Result) throws -> [String] {
        try #require(try result.jsonObject()["keys"] as? [[String: Any]]).compactMap { $0["kid"] as? String }
    }

    @Test("keys show and keys jwks never create a key: no key is a one-line error naming the command that makes one")
    func readOnlyCommandsCreateNothing() async throws {
        let files = try TemporaryFiles()
        let data = files.directory.appendingPathComponent("data").path
        for command in [["keys", "show"], ["keys", "jwks"]] {
            let result = try await Formattest.run(command + ["--data-dir", data])
            #expect(result.status == 2, "\(command): \(result.stdout)")
            #expect(result.stdout.isEmpty)
            #expect(result.stderr.contains("no signing key in \(data)"), "\(result.stderr)")
            #expect(result.stderr.contains("formattest keys generate --data-dir \(data)"), "\(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
            #expect(!FileManager.default.fileExists(atPath: data))
        }
    }

    @Test("keys generate --signing-key X writes X (0600), never over an existing file unless --overwrite; the data directory is untouched")
    func generateToPath() async throws {
        let files = try TemporaryFiles()
        let data = files.directory.appendingPathComponent("data").path
        let path = files.directory.appendingPathComponent("signing.pem").path
        let made = try await Formattest.run(["keys", "generate", "--signing-key", path, "--data-dir", data])
        #expect(made.status == 0, "\(made.stderr)")
        let kid = made.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(kid.count == 43)
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        #expect(!FileManager.default.fileExists(atPath: data))
        let shown = try await Formattest.run(["keys", "show", "--signing-key", path])
        #expect(shown.stdout.hasPrefix("kid: \(kid)\n"), "\(shown.stdout)")

        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        let again = try await Formattest.run(["keys", "generate", "--signing-key", path])
        #expect(again.status == 2)
        #expect(again.stderr.contains("\(path) exists; it is not overwritten (add --overwrite to replace it)"), "\(again.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)

        let replaced = try await Formattest.run(["keys", "generate", "--signing-key", path, "--overwrite"])
        #expect(replaced.status == 0, "\(replaced.stderr)")
        #expect(replaced.stdout.trimmingCharacters(in: .whitespacesAndNewlines) != kid)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) != before)

        let misplaced = try await Formattest.run(["keys", "generate", "--overwrite", "--data-dir", data])
        #expect(misplaced.status == 2)
    }

    @Test("the JWKS holds the current and the previous key only, however many rotations")
    func jwksCurrentAndPrevious() async throws {
        let files = try TemporaryFiles()
        let data = files.directory.appendingPathComponent("data").path
        var kids: [String] = []
        for _ in 0..<3 {
            let generated = try await Formattest.run(["keys", "generate", "--data-dir", data])
            #expect(generated.status == 0, "\(generated.stderr)")
            kids.append(generated.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        #expect(Set(kids).count == 3)
        let jwks = try await Formattest.run(["keys", "jwks", "--data-dir", data])
        #expect(jwks.status == 0, "\(jwks.stderr)")
        #expect(try Self.jwksKeyIDs(jwks) == [kids[2], kids[1]])
    }

    @Test("keys made by openssl: SEC1 with and without EC PARAMETERS and PKCS#8 are read for P-256; other curves and types are refused by name")
    func opensslKeys() async throws {
        let files = try TemporaryFiles()
        func key(_ name: String, _ arguments: [String]) throws -> String {
            let path = files.directory.appendingPathComponent(name).path
            _ = try Self.openssl(arguments + ["-out", path])
            return path
        }
        let accepted = [
            try key("sec1-params.pem", ["ecparam", "-name", "prime256v1", "-genkey"]),
            try key("sec1.pem", ["ecparam", "-name", "prime256v1", "-genkey", "-noout"]),
            try key("pkcs8.pem", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]),
        ]
        let sec1 = try String(contentsOfFile: accepted[0], encoding: .utf8)
        #expect(sec1.contains("-----BEGIN EC PARAMETERS-----") && sec1.contains("-----BEGIN EC PRIVATE KEY-----"))
        for path in accepted {
            let shown = try await Formattest.run(["keys", "show", "--signing-key", path])
            #expect(shown.status == 0, "\(path): \(shown.stderr)")
            // The key read is the key openssl made: the same public key.
            let publicPEM = try Self.openssl(["pkey", "-in", path, "-pubout"])
            #expect(shown.stdout.contains(publicPEM.trimmingCharacters(in: .whitespacesAndNewlines)), "\(path): \(shown.stdout)")
            let jwks = try await Formattest.run(["keys", "jwks", "--signing-key", path])
            #expect(jwks.status == 0)
            #expect(try Self.jwksKeyIDs(jwks).count == 1)
        }
        let refused = [
            (try key("p384.pem", ["ecparam", "-name", "secp384r1", "-genkey"]), "is a P-384 key"),
            (try key("p384-pkcs8.pem", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"]), "is a P-384 key"),
            (try key("k1.pem", ["ecparam", "-name", "secp256k1", "-genkey", "-noout"]), "is a secp256k1 key"),
            (try key("ed25519.pem", ["genpkey", "-algorithm", "ed25519"]), "holds an Ed25519 key"),
        ]
        for (path, reason) in refused {
            let shown = try await Formattest.run(["keys", "show", "--signing-key", path])
            #expect(shown.status == 2, "\(path): \(shown.stdout)")
            #expect(shown.stderr.contains("\(path) \(reason); the signing key must be EC P-256"), "\(shown.stderr)")
            #expect(shown.stderr.split(separator: "\n").count == 1, "\(shown.stderr)")
        }
    }

    @Test("a missing or unusable key file is one line naming the path, no Foundation error")
    func missingKeyFile() async throws {
        let files = try TemporaryFiles()
        let missing = files.directory.appendingPathComponent("nope.pem").path
        let notPEM = try files.write("not a key", named: "text.pem")
        for (path, reason) in [(missing, "does not exist"), (notPEM, "holds no PRIVATE KEY or EC PRIVATE KEY block")] {
            let result = try await Formattest.run(["keys", "jwks", "--signing-key", path])
            #expect(result.status == 2)
            #expect(result.stderr.contains("\(path) \(reason)"), "\(result.stderr)")
            // Only a missing key is told how to create one (the other file is there, to be fixed).
            #expect(result.stderr.contains("formattest keys generate --signing-key \(path)") == (path == missing), "\(result.stderr)")
            #expect(!result.stderr.contains("Error Domain"), "\(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
        }
    }

    @Test("wrap --format jws without a key is refused and creates nothing; wrap --batch without jws never reads keys")
    func wrapNeverCreatesKeys() async throws {
        let files = try TemporaryFiles()
        let sample = try RealSample.named("uebelack_production")
        let workingDirectory = files.directory.appendingPathComponent("cwd")
        try FileManager.default.createDirectory(at: workingDirectory, withIntermediateDirectories: true)
        let attestation = try files.write(Data(try #require(sample.attestation)).base64EncodedString(), named: "a.b64")
        let single = try await Formattest.run(
            [
                "wrap", "--attestation", attestation, "--key-id", Data(try #require(sample.keyID)).base64EncodedString(),
                "--app-id", sample.appID, "--at", try #require(Formattest.rfc3339(sample.validAt)),
                "--challenge", try #require(sample.challenge), "--format", "jws",
            ],
            currentDirectory: workingDirectory
        )
        #expect(single.status == 2, "\(single.stdout)")
        #expect(single.stderr.contains("no signing key in "), "\(single.stderr)")
        #expect(single.stderr.contains("formattest keys generate --data-dir ./formattest-data"), "\(single.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: workingDirectory.path).isEmpty)

        // A batch without jws: fine with no key at all, and an unreadable --signing-key is never read.
        var line = try WrapTests.line(sample)
        line = line.replacingOccurrences(of: #"["fido2","jws"]"#, with: #"["fido2"]"#)
        #expect(line.contains(#""formats":["fido2"]"#))
        let batch = try files.write(line + "\n", named: "in.jsonl")
        let out = files.directory.appendingPathComponent("out").path
        let wrapped = try await Formattest.run(
            ["wrap", "--batch", batch, "--out-dir", out, "--signing-key", files.directory.appendingPathComponent("absent.pem").path],
            currentDirectory: workingDirectory
        )
        #expect(wrapped.status == 0, "\(wrapped.stdout) \(wrapped.stderr)")
        #expect(try wrapped.jsonObject()["wrapped"] as? Int == 1)
        #expect(try FileManager.default.contentsOfDirectory(atPath: workingDirectory.path).isEmpty)

        // The same batch asking for jws: that line fails for want of a key, by its number.
        let jwsBatch = try files.write("\n" + (try WrapTests.line(sample, name: "jws")) + "\n", named: "jws.jsonl")
        let jwsOut = files.directory.appendingPathComponent("jws-out").path
        let refused = try await Formattest.run(["wrap", "--batch", jwsBatch, "--out-dir", jwsOut], currentDirectory: workingDirectory)
        #expect(refused.status == 1)
        let failure = try #require((try refused.jsonObject()["failures"] as? [[String: Any]])?.first)
        #expect(failure["item"] as? String == "line 2")
        #expect(failure["code"] as? String == "no_signing_key")
        #expect(try FileManager.default.contentsOfDirectory(atPath: workingDirectory.path).isEmpty)
    }
}
