//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import ArgumentParser
import FormAttestClient
import FormAttestFlows
import FormAttestServer
import Foundation
import Hummingbird
import Logging

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the HTTP service (and the demo page).",
        discussion: """
            With no options: 127.0.0.1:8080, the SQLite store in ./formattest-data, Apple's App \
            Attestation root alone, and a signing key generated in ./formattest-data. These \
            settings may also come from environment variables (a flag wins): FORMATTEST_HOST, \
            FORMATTEST_PORT, FORMATTEST_MONGODB_URI, FORMATTEST_APP_IDS (comma-separated), \
            FORMATTEST_ENVIRONMENT, and the iOS 27 signal policy: FORMATTEST_VALIDATION_CATEGORIES, \
            FORMATTEST_MINIMUM_BUNDLE_VERSION, FORMATTEST_ALLOWED_CDHASHES (comma-separated), \
            FORMATTEST_ALLOWED_CDHASHES_FILE, FORMATTEST_REQUIRE_CDHASH and \
            FORMATTEST_REQUIRE_EXTENSIONS (true or false), FORMATTEST_MACOS_ACCESS_CONTROL. Every \
            setting is checked the same way from either source; a value that is not valid stops the \
            service (exit 2) before it listens.
            """
    )

    @Option(help: "Address to listen on (default 127.0.0.1; FORMATTEST_HOST).")
    var host: String?

    @Option(help: "Port to listen on, 1-65535 (default 8080; FORMATTEST_PORT).")
    var port: Int?

    @OptionGroup var storeOptions: StoreOptions

    @Option(name: .customLong("app-id"), help: "An accepted TEAMID.bundleID (repeatable; default ABCDE12345.com.formattest.demo; FORMATTEST_APP_IDS).")
    var appIDs: [String] = []

    @Option(help: "Accepted environment: development, production or any (default any; FORMATTEST_ENVIRONMENT).")
    var environment: EnvironmentChoice?

    @Option(name: .customLong("root"), help: "A PEM trust anchor (repeatable; default: Apple's App Attestation root alone).")
    var roots: [String] = []

    @Option(name: .customLong("form-max-age"), help: "Seconds a form's timestamp may lie in the past.")
    var formMaxAge: Double = 300

    @Option(name: .customLong("form-max-skew"), help: "Seconds a form's timestamp may lie in the future.")
    var formMaxSkew: Double = 30

    @Option(name: .customLong("challenge-lifetime"), help: "Seconds a form challenge lives.")
    var challengeLifetime: Double = 120

    @Flag(name: .customLong("require-challenge"), help: "Every form must answer a server challenge.")
    var requireChallenge = false

    @Option(name: .customLong("idle-timeout"), help: "Seconds before a connection that sends nothing is closed.")
    var idleTimeout: Double = 60

    @Option(name: .customLong("body-timeout"), help: "Seconds a request body may take to arrive (408 after).")
    var bodyTimeout: Double = 10

    @Flag(name: .customLong("require-valid-receipt"), help: "Reject attestations whose receipt does not verify (Apple Root CA - G3).")
    var requireValidReceipt = false

    @OptionGroup var signalPolicy: SignalPolicyOptions

    @Flag(name: .customLong("rotate-challenges"), help: "Return a fresh challenge with every answer.")
    var rotateChallenges = false

    @Option(name: .customLong("max-key-age"), help: "Keys older than this many seconds must re-attest.")
    var maxKeyAge: Double?

    @OptionGroup var signing: SigningOptions

    @OptionGroup var caller: CallerOptions

    @OptionGroup var packed: PackedOptions

    @OptionGroup var evidence: EvidenceOptions

    @Flag(name: .customLong("dev-simulator"), help: "DEVELOPMENT ONLY: trust the simulator's CA and serve /api/dev/simulate.")
    var devSimulator = false

    @Option(name: .customLong("demo-dir"), help: "Directory of the demo page's files.")
    var demoDirectory = "demo"

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error, critical.")
    var logLevel = "info"

    mutating func validate() throws {
        // Flags first, then the environment, then the defaults; both sources are untrusted text
        // and go through the same checks.
        let variables = ProcessInfo.processInfo.environment
        if self.host == nil { self.host = try Setting.text(variables, "FORMATTEST_HOST") ?? "127.0.0.1" }
        if self.port == nil { self.port = try Setting.port(variables, "FORMATTEST_PORT") ?? 8080 }
        if self.appIDs.isEmpty {
            self.appIDs = try Setting.text(variables, "FORMATTEST_APP_IDS").map { $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init) }
                ?? ["ABCDE12345.com.formattest.demo"]
        }
        if self.environment == nil {
            self.environment = try Setting.choice(variables, "FORMATTEST_ENVIRONMENT", EnvironmentChoice.self) ?? .any
        }
        try self.signalPolicy.merge(environment: variables)
        try self.signalPolicy.check()
        if self.devSimulator && self.environment == .production {
            throw ValidationError("--dev-simulator is refused with --environment production: the simulator is not Apple.")
        }
        guard !self.appIDs.isEmpty else { throw ValidationError("Give at least one --app-id.") }
        for appID in self.appIDs {
            try Setting.checkText(appID, "--app-id")
        }
        try Setting.checkText(self.host ?? "", "--host")
        guard let port = self.port, (1...65535).contains(port) else { throw ValidationError("--port must be 1-65535.") }
        try Setting.checkSeconds(self.idleTimeout, "--idle-timeout", 0.001...86_400)
        try Setting.checkSeconds(self.bodyTimeout, "--body-timeout", 0.001...86_400)
        try Setting.checkSeconds(self.formMaxAge, "--form-max-age", 1...604_800)
        try Setting.checkSeconds(self.formMaxSkew, "--form-max-skew", 0...3600)
        try Setting.checkSeconds(self.challengeLifetime, "--challenge-lifetime", 1...86_400)
        if let maxKeyAge = self.maxKeyAge { try Setting.checkSeconds(maxKeyAge, "--max-key-age", 60...315_360_000) }
        try self.caller.validate(devSimulator: self.devSimulator)
        guard Logger.Level(rawValue: self.logLevel) != nil else {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical.")
        }
    }

    func run() async throws {
        let level = Logger.Level(rawValue: self.logLevel) ?? .info  // checked in validate()
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "formattest")

        var anchors = try self.roots.isEmpty ? [AppleAppAttestationRoot.certificate] : self.roots.map(InputFile.readCertificate)
        var receiptAnchors = [AppleRootCAG3.certificate]
        var simulator: SimulatedDevice?
        if self.devSimulator {
            let authority = try SimulatedAttestationAuthority()
            anchors.append(authority.rootCertificate)
            receiptAnchors.append(authority.receiptAuthority.rootCertificate)
            simulator = SimulatedDevice(authority: authority, appID: self.appIDs[0], environment: .development, seed: UInt64.random(in: 1...UInt64.max))
            let banner = String(repeating: "!", count: 78)
            logger.warning("\(banner)")
            logger.warning("DEV SIMULATOR MODE: the simulator's CA is TRUSTED and /api/dev/simulate is served.")
            logger.warning("Anyone can mint attestations this server accepts. NEVER run this in production.")
            logger.warning("\(banner)")
        }

        let evidence = try self.evidence.configuration(environment: ProcessInfo.processInfo.environment)
        if evidence != nil, !self.requireValidReceipt {
            logger.notice("evidence records are on: attestations whose receipt does not verify are refused (as with --require-valid-receipt)")
        }
        var policy = AppAttestPolicy(
            appIDs: self.appIDs,
            environments: (self.environment ?? .any).environments,
            trustAnchors: anchors,
            receiptTrustAnchors: receiptAnchors,
            // Evidence records carry the key's whole attestation, its receipt included.
            requireValidReceipt: self.requireValidReceipt || evidence != nil
        )
        try self.signalPolicy.apply(to: &policy)
        var configuration = ServerConfiguration(policy: policy)
        configuration.host = self.host ?? "127.0.0.1"
        configuration.idleTimeout = .milliseconds(Int64(self.idleTimeout * 1000))
        configuration.bodyTimeout = .milliseconds(Int64(self.bodyTimeout * 1000))
        configuration.port = self.port ?? 8080
        configuration.flows = FlowConfiguration(
            formPolicy: FormPolicy(maximumAge: self.formMaxAge, maximumFutureSkew: self.formMaxSkew),
            formChallengeLifetime: self.challengeLifetime,
            requireServerChallenge: self.requireChallenge,
            rotateChallenges: self.rotateChallenges,
            maximumKeyAge: self.maxKeyAge
        )
        configuration.flows.maximumKeysPerUser = self.caller.maxKeysPerUser
        configuration.rateLimits = self.caller.rateLimits
        configuration.callerAuthentication = try await self.caller.authentication(logger: logger)
        configuration.adminSecrets = try self.caller.adminSecrets()
        configuration.packedAttestation = try self.packed.packed()
        configuration.evidence = evidence
        configuration.issuer = self.signing.issuer
        configuration.audience = self.signing.audience
        configuration.devSimulator = self.devSimulator
        configuration.demoDirectory = FileManager.default.fileExists(atPath: self.demoDirectory) ? self.demoDirectory : nil

        let store = try await self.storeOptions.open()
        logger.info("store", metadata: ["location": "\(StoreOptions.redacted(self.storeOptions.location))"])
        let application = try await FormAttestApplication.make(
            configuration: configuration,
            store: store,
            signingKeys: try self.signing.keys(),
            simulator: simulator,
            logger: logger
        )
        try await application.runService()
    }
}
