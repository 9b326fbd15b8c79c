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
            Attestation root alone, and a signing key generated in ./formattest-data. Every flag \
            also reads an environment variable (FORMATTEST_HOST, FORMATTEST_PORT, \
            FORMATTEST_MONGODB_URI, FORMATTEST_APP_IDS comma-separated, FORMATTEST_ENVIRONMENT).
            """
    )

    @Option(help: "Address to listen on.")
    var host = ProcessInfo.processInfo.environment["FORMATTEST_HOST"] ?? "127.0.0.1"

    @Option(help: "Port to listen on.")
    var port = Int(ProcessInfo.processInfo.environment["FORMATTEST_PORT"] ?? "") ?? 8080

    @OptionGroup var storeOptions: StoreOptions

    @Option(name: .customLong("app-id"), help: "An accepted TEAMID.bundleID (repeatable).")
    var appIDs: [String] = ProcessInfo.processInfo.environment["FORMATTEST_APP_IDS"]?.split(separator: ",").map(String.init)
        ?? ["ABCDE12345.com.formattest.demo"]

    @Option(help: "Accepted environment: development, production or any.")
    var environment = EnvironmentChoice(rawValue: ProcessInfo.processInfo.environment["FORMATTEST_ENVIRONMENT"] ?? "") ?? .any

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

    @Flag(name: .customLong("rotate-challenges"), help: "Return a fresh challenge with every answer.")
    var rotateChallenges = false

    @Option(name: .customLong("max-key-age"), help: "Keys older than this many seconds must re-attest.")
    var maxKeyAge: Double?

    @OptionGroup var signing: SigningOptions

    @Flag(name: .customLong("dev-simulator"), help: "DEVELOPMENT ONLY: trust the simulator's CA and serve /api/dev/simulate.")
    var devSimulator = false

    @Option(name: .customLong("demo-dir"), help: "Directory of the demo page's files.")
    var demoDirectory = "demo"

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error, critical.")
    var logLevel = "info"

    func validate() throws {
        if self.devSimulator && self.environment == .production {
            throw ValidationError("--dev-simulator is refused with --environment production: the simulator is not Apple.")
        }
        guard !self.appIDs.isEmpty else { throw ValidationError("Give at least one --app-id.") }
        guard (1...65535).contains(self.port) else { throw ValidationError("--port must be 1-65535.") }
        guard (0.001...86_400).contains(self.idleTimeout), (0.001...86_400).contains(self.bodyTimeout) else {
            throw ValidationError("--idle-timeout and --body-timeout must be between 0.001 and 86400 seconds.")
        }
    }

    func run() async throws {
        let level = Logger.Level(rawValue: self.logLevel) ?? .info
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

        var configuration = ServerConfiguration(
            policy: AppAttestPolicy(
                appIDs: self.appIDs,
                environments: self.environment.environments,
                trustAnchors: anchors,
                receiptTrustAnchors: receiptAnchors,
                requireValidReceipt: self.requireValidReceipt
            )
        )
        configuration.host = self.host
        configuration.idleTimeout = .milliseconds(Int64(self.idleTimeout * 1000))
        configuration.bodyTimeout = .milliseconds(Int64(self.bodyTimeout * 1000))
        configuration.port = self.port
        configuration.flows = FlowConfiguration(
            formPolicy: FormPolicy(maximumAge: self.formMaxAge, maximumFutureSkew: self.formMaxSkew),
            formChallengeLifetime: self.challengeLifetime,
            requireServerChallenge: self.requireChallenge,
            rotateChallenges: self.rotateChallenges,
            maximumKeyAge: self.maxKeyAge
        )
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
