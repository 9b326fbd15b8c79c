//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import ArgumentParser
import FormAttestServer
import FormattestCommands
import Foundation
import Testing

/// The option groups `serve` shares with other commands (signing, the packed format's authority,
/// the signal policy, evidence, the store) are built from `serve`'s resolved settings directly,
/// through the same checks the other commands' flags go through, and a refusal names where the
/// value came from.
struct ServeOptionGroupsTests {
    /// A directory of its own, removed by `body`'s end.
    static func withDirectory<Result>(_ body: (URL) throws -> Result) throws -> Result {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("formattest-groups-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        return try body(directory)
    }

    /// Writes `text` to `name` in `directory`; returns its path.
    static func write(_ text: String, _ name: String, in directory: URL) throws -> String {
        let file = directory.appendingPathComponent(name)
        try Data(text.utf8).write(to: file)
        return file.path
    }

    static let cdHash = String(repeating: "ab", count: 32)

    @Test("each group built from serve's settings holds the values set, from the command line, the environment and the configuration file")
    func valuesFromEverySource() throws {
        try Self.withDirectory { directory in
            let evidence = directory.appendingPathComponent("evidence")
            try FileManager.default.createDirectory(at: evidence, withIntermediateDirectories: false)
            let config = try Self.write(
                #"{"issuer": "bank", "rp-id": "bank.example", "mongodb-database": "db1", "validation-category": ["app-store", "testflight"], "require-cdhash": true}"#,
                "formattest.json", in: directory)
            let settings = try ServeSettings.resolve(
                flags: [
                    "audience": ["app"], "signing-key": ["/keys/signing.pem"], "allowed-cdhash": [Self.cdHash],
                    "mongodb-collection-prefix": ["p_"], "evidence-dir": [evidence.path], "evidence-in-answer": ["true"],
                ],
                environment: [
                    "FORMATTEST_CONFIG": config, "FORMATTEST_DATA_DIR": "/srv/formattest", "FORMATTEST_ATTESTATION_CA": "/srv/ca",
                    "FORMATTEST_STORE": "memory", "FORMATTEST_MINIMUM_BUNDLE_VERSION": "1.2.3",
                ]
            )

            let signing = SigningSource(settings)
            #expect(signing.dataDirectory == "/srv/formattest")
            #expect(signing.signingKeyPath == "/keys/signing.pem")
            #expect(signing.issuer == "bank")
            #expect(signing.audience == "app")

            let packed = try PackedSource(settings)
            #expect(packed.directory == "/srv/ca")
            #expect(packed.relyingPartyID == "bank.example")

            let signals = try SignalPolicy(settings)
            #expect(signals.validationCategories == [.appStore, .testFlight])
            #expect(signals.minimumBundleVersion == BundleVersion("1.2.3"))
            #expect(signals.allowedCDHashes == AppAttestPolicy.CDHashAllowList([[UInt8](repeating: 0xAB, count: 32)]))
            #expect(signals.requireCDHash && !signals.requireExtensions)
            var policy = AppAttestPolicy(appIDs: [], environments: [])
            signals.apply(to: &policy)
            #expect(policy.minimumBundleVersion == BundleVersion("1.2.3") && policy.requireCDHash)

            let store = try StoreSource(settings)
            #expect(store.location == "memory")
            #expect(store.mongoDatabase == "db1")
            #expect(store.mongoCollectionPrefix == "p_")

            let configuration = try #require(try EvidenceConfiguration(settings))
            #expect(configuration.archiveDirectory == evidence.path)
            #expect(configuration.inAnswer)
            #expect(configuration.log == nil)
        }
    }

    @Test("with none of their settings the groups hold serve's defaults: the data directory's key and SQLite file, no packed format, no evidence")
    func defaults() throws {
        let settings = try ServeSettings.resolve(flags: ["data-dir": ["/srv/formattest/./data"]], environment: [:])
        let signing = SigningSource(settings)
        #expect(signing.signingKeyPath == nil && signing.issuer == "formattest" && signing.audience == "formattest")
        let packed = try PackedSource(settings)
        #expect(packed.directory == nil && packed.relyingPartyID == nil)
        let store = try StoreSource(settings)
        #expect(store.location == "sqlite:/srv/formattest/data/formattest.sqlite")
        #expect(store.mongoDatabase == nil && store.mongoCollectionPrefix == "formattest_")
        #expect(try EvidenceConfiguration(settings) == nil)
        let signals = try SignalPolicy(settings)
        #expect(signals.validationCategories == nil && signals.minimumBundleVersion == nil && signals.requiredAccessControl == nil)
    }

    @Test("attestation-ca and rp-id go together: one check refuses either alone for wrap's flags and for serve's settings, naming serve's source")
    func packedPairRule() throws {
        // wrap (and any command that embeds the group): ArgumentParser runs its validate().
        for arguments in [["--attestation-ca", "/srv/ca"], ["--rp-id", "bank.example"]] {
            let error = #expect(throws: (any Error).self) { try PackedOptions.parse(arguments) }
            #expect(PackedOptions.message(for: try #require(error)) == "--attestation-ca and --rp-id go together.", "\(arguments)")
        }
        #expect(throws: Never.self) { try PackedOptions.parse(["--attestation-ca", "/srv/ca", "--rp-id", "bank.example"]) }

        // serve: the same check on the resolved settings, whatever their source.
        try Self.withDirectory { directory in
            let config = try Self.write(#"{"rp-id": "bank.example"}"#, "formattest.json", in: directory)
            let cases: [([String: [String]], [String: String], String)] = [
                ([:], ["FORMATTEST_ATTESTATION_CA": "/srv/ca"], "--attestation-ca (environment) and --rp-id go together."),
                (["rp-id": ["bank.example"]], [:], "--attestation-ca and --rp-id (command line) go together."),
                (["config": [config]], [:], "--attestation-ca and --rp-id (config file \(config)) go together."),
            ]
            for (flags, environment, message) in cases {
                let settings = try ServeSettings.resolve(flags: flags, environment: environment)
                let error = #expect(throws: UsageError.self) { try PackedSource(settings) }
                #expect(error?.description == message)
            }
            let both = try ServeSettings.resolve(flags: ["config": [config]], environment: ["FORMATTEST_ATTESTATION_CA": "/srv/ca"])
            #expect(try PackedSource(both).relyingPartyID == "bank.example")
        }
    }

    @Test("a value from the environment or the configuration file that a group's check refuses stops serve, naming the setting and its source")
    func refusedWithSource() throws {
        try Self.withDirectory { directory in
            let missing = directory.appendingPathComponent("missing").path
            let fromEnvironment = try ServeSettings.resolve(flags: [:], environment: ["FORMATTEST_EVIDENCE_DIR": missing])
            let notDirectory = #expect(throws: UsageError.self) { try EvidenceConfiguration(fromEnvironment) }
            #expect(notDirectory?.description == "--evidence-dir (environment) \(missing) is not an existing directory")

            let config = try Self.write(#"{"evidence-log": "\#(directory.path)"}"#, "formattest.json", in: directory)
            let fromFile = try ServeSettings.resolve(flags: ["config": [config]], environment: [:])
            let noKey = #expect(throws: UsageError.self) { try EvidenceConfiguration(fromFile) }
            #expect(
                noKey?.description.hasPrefix("--evidence-log (config file \(config)) needs --evidence-log-key") == true,
                "\(String(describing: noKey))")
            let keyAlone = try ServeSettings.resolve(flags: [:], environment: ["FORMATTEST_EVIDENCE_LOG_KEY": config])
            let noLog = #expect(throws: UsageError.self) { try EvidenceConfiguration(keyAlone) }
            #expect(noLog?.description == "--evidence-log-key (environment) needs --evidence-log")

            // The CDHash file passed the table's check when the settings were read, and changed
            // before the group read it: the group's own check refuses it, naming its source.
            let cdHashes = try Self.write(#"{"1.2.3": ["\#(Self.cdHash)"]}"#, "cdhashes.json", in: directory)
            let signals = try ServeSettings.resolve(flags: [:], environment: ["FORMATTEST_ALLOWED_CDHASHES_FILE": cdHashes])
            #expect(try SignalPolicy(signals).allowedCDHashes.byBundleVersion.count == 1)
            _ = try Self.write(#"{"1.2.3": "#, "cdhashes.json", in: directory)
            let changed = #expect(throws: UsageError.self) { try SignalPolicy(signals) }
            #expect(
                changed?.description.hasPrefix("--allowed-cdhashes-file (environment) \(cdHashes): not JSON") == true,
                "\(String(describing: changed))")
        }
    }

    @Test("a store location is checked by one function: the store flag of the other commands and serve's setting, from any source")
    func storeLocation() throws {
        let location = "mongodb://u:PW@SECRET@127.0.0.1/db"
        let problem = "the MongoDB URI holds more than one @: percent-encode an @ in its user name or password as %40."
        let options = try StoreOptions.parse(["--store", location])
        let flagError = #expect(throws: UsageError.self) { try options.source }
        #expect(flagError?.description == "--store: \(problem)")
        let settingError = #expect(throws: UsageError.self) {
            try ServeSettings.resolve(flags: [:], environment: ["FORMATTEST_STORE": location])
        }
        #expect(settingError?.description == "FORMATTEST_STORE (environment): \(problem)")
        #expect(settingError?.description.contains("SECRET") == false)
    }
}
