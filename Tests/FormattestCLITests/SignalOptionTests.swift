//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import Crypto
import FormAttestTestSupport
import Foundation
import Testing

/// The iOS 27 signal policy on the command line: `verify attestation|assertion` with
/// --validation-category, --minimum-bundle-version, --allowed-cdhash(es-file), --require-cdhash,
/// --require-extensions and --macos-access-control; the same on `serve`, from flags and from
/// FORMATTEST_* variables.
struct SignalOptionTests {
    static let sample = "apple_docs_sample_2026_via_webauthn4j"
    static let cdHash = Array(SHA256.hash(data: Array("build 4.2".utf8)))
    static let hexCDHash = hexString(cdHash)

    static func error(_ result: Formattest.Result) throws -> String? {
        (try result.jsonObject()["error"] as? [String: Any])?["code"] as? String
    }

    // MARK: - Apple's 2026 sample

    @Test("Apple's 2026 sample: --json shows its category, bundle version and access control; a policy that excludes its category refuses it")
    func appleSample() async throws {
        let sample = try RealSample.named(Self.sample)
        let files = try TemporaryFiles()
        let base = try Formattest.verifyArguments(sample, attestationPath: try files.write(Data(try #require(sample.attestation)), named: "att.cbor"))
        let verified = try await Formattest.run(base)
        #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
        let json = try verified.jsonObject()
        let extensions = try #require(json["extensions"] as? [String: Any])
        let category = try #require(extensions["validationCategory"] as? [String: Any])
        #expect(category["value"] as? Int == 1)
        #expect(category["name"] as? String == "os-executable")
        #expect(extensions["bundleVersion"] as? String == "1")
        #expect(extensions["cdHash"] == nil)
        // base64url, as the HTTP API writes it (docs/formats.md, Encodings).
        #expect(json["macosAccessControl"] as? String == Formattest.base64url(SimulatedDevice.sampleAccessControl))

        for accepting in [
            ["--validation-category", "os-executable"], ["--validation-category", "app-store,1"], ["--minimum-bundle-version", "1.0"],
        ] {
            let result = try await Formattest.run(base + accepting)
            #expect(result.status == 0, "\(accepting): \(result.stdout)")
        }
        let refused = try await Formattest.run(base + ["--validation-category", "app-store,testflight"])
        #expect(refused.status == 1)
        #expect(try Self.error(refused) == "validation_category_not_allowed")
        let old = try await Formattest.run(base + ["--minimum-bundle-version", "2"])
        #expect(try Self.error(old) == "bundle_version_too_old")
        let acl = try await Formattest.run(base + ["--macos-access-control", Data(SimulatedDevice.sampleAccessControl).base64EncodedString()])
        #expect(acl.status == 0)
        let otherACL = try await Formattest.run(
            base + ["--macos-access-control", Data(SimulatedDevice.sampleAccessControl.dropLast()).base64EncodedString()])
        #expect(try Self.error(otherACL) == "access_control_mismatch")
        // Text output names them too.
        let text = try await Formattest.run(base.filter { $0 != "--json" })
        #expect(text.stdout.contains("extensions: bundleVersion=1 validationCategory=1 (os-executable)\n"), "\(text.stdout)")
        #expect(text.stdout.contains("macosAccessControl: MEmjRwRF"))
    }

    // MARK: - Every policy, on simulated attestations and assertions

    /// Where the signals travel.
    enum Shape: String, CaseIterable, CustomStringConvertible, Sendable {
        case attestationApple, attestationDocumentation
        case assertionATApple, assertionATDocumentation, assertionNoATApple, assertionNoATDocumentation

        var description: String { self.rawValue }
        var spelling: SimulatedSignals.Spelling { self.rawValue.hasSuffix("Apple") ? .apple : .documentation }
        var isAttestation: Bool { self.rawValue.hasPrefix("attestation") }
        var flags: UInt8 { self.rawValue.hasPrefix("assertionNoAT") ? 0x00 : 0x40 }
    }

    struct Case: Sendable, CustomStringConvertible {
        let description: String
        /// The options; `FILE` is replaced by a CDHash file `{"4.2": [cdHash]}`.
        let options: [String]
        let accepted: SimulatedSignals
        let refused: SimulatedSignals?
        let code: String
    }

    static let cases: [Case] = [
        Case(
            description: "--validation-category",
            options: ["--validation-category", "app-store,2"],
            accepted: SimulatedSignals(validationCategory: .testFlight),
            refused: SimulatedSignals(validationCategory: .enterprise),
            code: "validation_category_not_allowed"
        ),
        Case(
            description: "--minimum-bundle-version",
            options: ["--minimum-bundle-version", "4.2"],
            accepted: SimulatedSignals(bundleVersion: "4.10"),
            refused: SimulatedSignals(bundleVersion: "4.1.9"),
            code: "bundle_version_too_old"
        ),
        Case(
            description: "--allowed-cdhash",
            options: ["--allowed-cdhash", "00" + String(hexCDHash.dropFirst(2)), "--allowed-cdhash", hexCDHash],
            accepted: SimulatedSignals(cdHash: cdHash),
            refused: SimulatedSignals(cdHash: Array(SHA256.hash(data: Array("build 4.1".utf8)))),
            code: "cdhash_not_allowed"
        ),
        Case(
            description: "--allowed-cdhashes-file",
            options: ["--allowed-cdhashes-file", "FILE"],
            accepted: SimulatedSignals(bundleVersion: "4.2", cdHash: cdHash),
            refused: SimulatedSignals(bundleVersion: "4.3", cdHash: cdHash),
            code: "cdhash_not_allowed"
        ),
        Case(
            description: "--require-cdhash",
            options: ["--require-cdhash"],
            accepted: SimulatedSignals(cdHash: cdHash),
            refused: SimulatedSignals(),
            code: "cdhash_not_allowed"
        ),
        Case(
            description: "--require-extensions",
            options: ["--require-extensions"],
            accepted: SimulatedSignals(),
            refused: SimulatedSignals(validationCategory: nil),
            code: "extensions_required"
        ),
        Case(
            description: "--require-extensions, no map",
            options: ["--require-extensions"],
            accepted: SimulatedSignals(),
            refused: nil,
            code: "extensions_required"
        ),
    ]

    /// A simulated device and the files `verify` reads.
    struct Simulated {
        let authority: SimulatedAttestationAuthority
        let device: SimulatedDevice
        let key: SimulatedKey
        let files: TemporaryFiles
        let clientDataHash = Array(SHA256.hash(data: Array(#"{"amount":"1.00"}"#.utf8)))
        /// A fixed time inside the simulated CA's validity; the attestation is issued at it.
        static let at = Date(timeIntervalSince1970: 1_749_988_800)

        init() throws {
            self.authority = try SimulatedAttestationAuthority()
            self.device = SimulatedDevice(authority: self.authority, appID: "ABCDE12345.com.formattest.bank")
            self.key = self.device.key(0)
            self.files = try TemporaryFiles()
        }

        /// `verify attestation|assertion` arguments for one shape carrying `signals` (`nil`: no map).
        func arguments(_ signals: SimulatedSignals?, shape: Shape, name: String) throws -> [String] {
            var signals = signals
            signals?.spelling = shape.spelling
            let map = signals?.extensionMap ?? []
            let hashHex = hexString(self.clientDataHash)
            if shape.isAttestation {
                var options = SimulatedDevice.AttestationOptions()
                options.authenticatorDataSuffix = map
                let attestation = try self.device.attest(self.key, clientDataHash: self.clientDataHash, at: Self.at, options: options)
                return [
                    "verify", "attestation", "--attestation", try self.files.write(Data(attestation), named: "\(name).cbor"),
                    "--key-id", Data(self.key.keyID).base64EncodedString(), "--app-id", self.device.appID,
                    "--client-data-hash", hashHex, "--at", "2025-06-15T12:00:00Z",
                    "--root", try self.files.write(try self.authority.rootPEM, named: "root.pem"), "--json",
                ]
            }
            var options = SimulatedDevice.AssertionOptions()
            options.flags = shape.flags
            options.authenticatorDataSuffix = map
            let assertion = try self.device.assert(self.key, clientDataHash: self.clientDataHash, counter: 1, options: options)
            return [
                "verify", "assertion", "--assertion", try self.files.write(Data(assertion).base64EncodedString(), named: "\(name).b64"),
                "--public-key", try self.files.write(self.key.publicKey.pemRepresentation, named: "key.pem"),
                "--app-id", self.device.appID, "--client-data-hash", hashHex, "--json",
            ]
        }
    }

    @Test("each policy option: accepted as configured, refused (exit 1, its code) with one signal changed", arguments: cases, Shape.allCases)
    func policy(_ policyCase: Case, shape: Shape) async throws {
        let simulated = try Simulated()
        let file = try simulated.files.write(#"{"4.2": ["\#(Self.hexCDHash)"], "5": []}"#, named: "cdhashes.json")
        let options = policyCase.options.map { $0 == "FILE" ? file : $0 }

        let accepted = try await Formattest.run(try simulated.arguments(policyCase.accepted, shape: shape, name: "accepted") + options)
        #expect(accepted.status == 0, "\(accepted.stdout) \(accepted.stderr)")
        #expect((try accepted.jsonObject()["extensions"] as? [String: Any]) != nil)

        let refused = try await Formattest.run(try simulated.arguments(policyCase.refused, shape: shape, name: "refused") + options)
        #expect(refused.status == 1, "\(refused.stdout) \(refused.stderr)")
        #expect(try Self.error(refused) == policyCase.code)
    }

    @Test("--json shows every signal of a simulated assertion: category, bundle version, CDHash and its type")
    func jsonShape() async throws {
        let simulated = try Simulated()
        let signals = SimulatedSignals(validationCategory: ValidationCategory(rawValue: 12), bundleVersion: "4.2", cdHash: Self.cdHash)
        let result = try await Formattest.run(try simulated.arguments(signals, shape: .assertionNoATDocumentation, name: "a"))
        #expect(result.status == 0, "\(result.stderr)")
        let extensions = try #require(try result.jsonObject()["extensions"] as? [String: Any])
        let category = try #require(extensions["validationCategory"] as? [String: Any])
        #expect(category["value"] as? Int == 12)
        #expect(category["name"] is NSNull, "an unnamed category has a null name")
        #expect(extensions["bundleVersion"] as? String == "4.2")
        #expect(extensions["cdHash"] as? String == Self.hexCDHash)
        #expect(extensions["cdHashType"] as? Int == 2)
        #expect(result.stdout.contains(#""name":null"#))
    }

    @Test(
        "bad policy values are usage errors (exit 2) that name the option",
        arguments: [
            (["--validation-category", "appstore"], "--validation-category"),
            (["--validation-category", "app-store,"], "--validation-category"),
            (["--validation-category", "4294967296"], "--validation-category"),
            (["--minimum-bundle-version", "1.0b3"], "--minimum-bundle-version"),
            (["--minimum-bundle-version", ""], "--minimum-bundle-version"),
            (["--allowed-cdhash", "zz"], "--allowed-cdhash"),
            (["--allowed-cdhash", String(repeating: "ab", count: 31)], "--allowed-cdhash"),
            (["--allowed-cdhashes-file", "/nonexistent/cdhashes.json"], "--allowed-cdhashes-file"),
            (["--allowed-cdhashes-file", "BAD:[1]"], "--allowed-cdhashes-file"),
            (["--allowed-cdhashes-file", "BAD:{\"1.2\": [\"00\"]}"], "--allowed-cdhashes-file"),
            (["--allowed-cdhashes-file", "BAD:{\"1.2\": \"\(String(repeating: "ab", count: 32))\"}"], "--allowed-cdhashes-file"),
            (["--allowed-cdhashes-file", "BAD:{\"1.x\": []}"], "--allowed-cdhashes-file"),
            (["--allowed-cdhashes-file", "BAD:{\"1.2\": [], \"1.2.0\": []}"], "--allowed-cdhashes-file"),
            (["--allowed-cdhashes-file", "BAD:{\"1.2\": [], \"1.2\": []}"], "--allowed-cdhashes-file"),
            (["--macos-access-control", "%%%"], "--macos-access-control"),
        ])
    func usageErrors(option: [String], named: String) async throws {
        let sample = try RealSample.named(Self.sample)
        let files = try TemporaryFiles()
        var option = option
        if option[1].hasPrefix("BAD:") { option[1] = try files.write(String(option[1].dropFirst(4)), named: "bad.json") }
        let base = try Formattest.verifyArguments(sample, attestationPath: try files.write(Data(try #require(sample.attestation)), named: "att.cbor"))
        for arguments in [
            base + option, ["verify", "assertion", "--assertion", "-", "--public-key", "k.pem", "--app-id", "A.b", "--challenge", "x"] + option,
        ] {
            let result = try await Formattest.run(arguments, stdin: Data("AAAA".utf8))
            #expect(result.status == 2, "\(option): \(result.status) \(result.stdout) \(result.stderr)")
            #expect(result.stderr.contains(named), "\(result.stderr)")
        }
    }

    @Test(
        "--help of verify attestation, verify assertion and serve names every signal option",
        arguments: [
            ["verify", "attestation", "--help"], ["verify", "assertion", "--help"], ["serve", "--help"],
        ])
    func help(arguments: [String]) async throws {
        let result = try await Formattest.run(arguments)
        #expect(result.status == 0)
        for option in [
            "--validation-category", "--minimum-bundle-version", "--allowed-cdhash", "--allowed-cdhashes-file", "--require-cdhash",
            "--require-extensions", "--macos-access-control",
        ] {
            #expect(result.stdout.contains(option), "\(arguments): \(option)")
        }
        if arguments.first == "serve" {
            #expect(result.stdout.contains("FORMATTEST_VALIDATION_CATEGORIES"))
        }
    }

    // MARK: - serve

    @Test(
        "serve: bad signal settings from flags or FORMATTEST_* variables stop it (exit 2, named) before it listens",
        arguments: [
            ([], ["FORMATTEST_VALIDATION_CATEGORIES": "store"], "FORMATTEST_VALIDATION_CATEGORIES"),
            ([], ["FORMATTEST_MINIMUM_BUNDLE_VERSION": "1.0b3"], "FORMATTEST_MINIMUM_BUNDLE_VERSION"),
            ([], ["FORMATTEST_ALLOWED_CDHASHES": "\(String(repeating: "ab", count: 32)),zz"], "FORMATTEST_ALLOWED_CDHASHES"),
            ([], ["FORMATTEST_ALLOWED_CDHASHES_FILE": "/nonexistent/cdhashes.json"], "FORMATTEST_ALLOWED_CDHASHES_FILE"),
            ([], ["FORMATTEST_REQUIRE_CDHASH": "yes"], "FORMATTEST_REQUIRE_CDHASH"),
            ([], ["FORMATTEST_REQUIRE_EXTENSIONS": "1"], "FORMATTEST_REQUIRE_EXTENSIONS"),
            ([], ["FORMATTEST_MACOS_ACCESS_CONTROL": ""], "FORMATTEST_MACOS_ACCESS_CONTROL"),
            (["--validation-category", "ios"], [:], "--validation-category"),
            (["--allowed-cdhash", "00"], [:], "--allowed-cdhash"),
        ] as [([String], [String: String], String)])
    func serveSettings(arguments: [String], environment: [String: String], named: String) async throws {
        let files = try TemporaryFiles()
        let result = try await Formattest.run(
            ["serve", "--store", "memory", "--port", "18998", "--data-dir", files.directory.path] + arguments,
            environment: environment.merging(["FORMATTEST_UNUSED": "1"]) { $1 }
        )
        #expect(result.status == 2, "\(arguments) \(environment): \(result.status) \(result.stderr)")
        #expect(result.stderr.contains(named), "\(result.stderr)")
    }

    @Test("serve applies the policy from its flags and its FORMATTEST_* variables to attestations and assertions")
    func serveAppliesPolicy() async throws {
        let files = try TemporaryFiles()
        // A port the kernel just gave out (a random one in 20,000-40,000 is inside Linux's
        // ephemeral range, and failed to bind once in a loaded full run).
        let port = Formattest.freePort()
        let server = try Formattest.start(
            [
                "serve", "--dev-simulator", "--port", String(port), "--store", "memory", "--data-dir", files.directory.path,
                "--log-level", "warning", "--minimum-bundle-version", "2.0",
            ],
            environment: ["FORMATTEST_VALIDATION_CATEGORIES": "app-store", "FORMATTEST_REQUIRE_EXTENSIONS": "true"]
        )
        defer { _ = server.terminate(within: 10) }
        try #require(await Formattest.waitForListener(port: port, process: server.process), "the service did not start listening")
        let check = try await PythonCheck(venv: ".venv-interop", overrideVariable: "FORMATTEST_INTEROP_PYTHON").run(
            "e2e/interop/serve_signal_policy.py", ["http://127.0.0.1:\(port)"]
        )
        #expect(check.status == 0, "\(check.output)")
        #expect(check.output.contains(" passed, 0 failed"), "\(check.output)")
    }
}
