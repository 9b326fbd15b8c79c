//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
public import ArgumentParser
import Crypto
import FormAttestFlows
import FormAttestForm
public import FormAttestServer
import Foundation
import Hummingbird
import Logging
import Metrics
import OTel
import Prometheus
import ServiceLifecycle
import SwiftASN1
import Tracing
import TransparencyLog
public import X509

/// `formattest serve`: the service without a development device. `--dev-simulator` is refused
/// here (exit 2): the simulator is `formattest-dev serve`'s, so this binary never contains a CA
/// that mints attestations the service accepts.
struct Serve: AsyncParsableCommand {
    static let configuration = ServeOptions.configuration

    @OptionGroup var options: ServeOptions

    func run() async throws {
        try await self.options.run(developmentDevice: nil)
    }
}

/// `serve`'s settings (one flag each, beside its environment variable and the configuration
/// file) and the wiring of the service from them, shared by `formattest serve` and
/// `formattest-dev serve`.
public struct ServeOptions: ParsableArguments {
    /// The `serve` command's name, abstract and discussion.
    public static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the HTTP service (and the demo page).",
        discussion: """
            Every setting comes from its flag, its environment variable or the JSON configuration \
            file (--config or FORMATTEST_CONFIG), in that order of precedence, else its default; \
            docs/configuration.md lists them all. Every value is checked the same way whatever its \
            source; a value that is not valid stops the service (exit 2, naming the setting and \
            where it came from) before it listens. With no settings: 127.0.0.1:8080, the SQLite \
            store and a generated signing key in ./formattest-data, Apple's App Attestation root \
            alone.
            """
    )

    public init() {}

    @Option(name: .customLong("config"), help: ServeSettings.help("config")) var config: String?
    @Option(name: .customLong("host"), help: ServeSettings.help("host")) var host: String?
    @Option(name: .customLong("port"), help: ServeSettings.help("port")) var port: String?
    @Option(name: .customLong("admin-host"), help: ServeSettings.help("admin-host")) var adminHost: String?
    @Option(name: .customLong("admin-port"), help: ServeSettings.help("admin-port")) var adminPort: String?
    @Option(name: .customLong("store"), help: ServeSettings.help("store")) var store: String?
    @Option(name: .customLong("mongodb-database"), help: ServeSettings.help("mongodb-database")) var mongoDatabase: String?
    @Option(name: .customLong("mongodb-collection-prefix"), help: ServeSettings.help("mongodb-collection-prefix")) var mongoCollectionPrefix: String?
    @Option(name: .customLong("data-dir"), help: ServeSettings.help("data-dir")) var dataDirectory: String?
    @Option(name: .customLong("signing-key"), help: ServeSettings.help("signing-key")) var signingKey: String?
    @Option(name: .customLong("issuer"), help: ServeSettings.help("issuer")) var issuer: String?
    @Option(name: .customLong("audience"), help: ServeSettings.help("audience")) var audience: String?
    @Option(name: .customLong("app-id"), help: ServeSettings.help("app-id")) var appIDs: [String] = []
    @Option(name: .customLong("environment"), help: ServeSettings.help("environment")) var environment: String?
    @Option(name: .customLong("root"), help: ServeSettings.help("root")) var roots: [String] = []
    @Option(name: .customLong("form-max-age"), help: ServeSettings.help("form-max-age")) var formMaxAge: String?
    @Option(name: .customLong("form-max-skew"), help: ServeSettings.help("form-max-skew")) var formMaxSkew: String?
    @Option(name: .customLong("challenge-lifetime"), help: ServeSettings.help("challenge-lifetime")) var challengeLifetime: String?
    @Flag(name: .customLong("require-challenge"), help: ServeSettings.help("require-challenge")) var requireChallenge = false
    @Flag(name: .customLong("rotate-challenges"), help: ServeSettings.help("rotate-challenges")) var rotateChallenges = false
    @Option(name: .customLong("max-key-age"), help: ServeSettings.help("max-key-age")) var maxKeyAge: String?
    @Option(name: .customLong("counter-rule"), help: ServeSettings.help("counter-rule")) var counterRule: String?
    @Option(name: .customLong("idle-timeout"), help: ServeSettings.help("idle-timeout")) var idleTimeout: String?
    @Option(name: .customLong("body-timeout"), help: ServeSettings.help("body-timeout")) var bodyTimeout: String?
    @Option(name: .customLong("min-body-rate"), help: ServeSettings.help("min-body-rate")) var minBodyRate: String?
    @Option(name: .customLong("purge-interval"), help: ServeSettings.help("purge-interval")) var purgeInterval: String?
    @Option(name: .customLong("purge-step-target"), help: ServeSettings.help("purge-step-target")) var purgeStepTarget: String?
    @Option(name: .customLong("revoked-key-retention"), help: ServeSettings.help("revoked-key-retention")) var revokedKeyRetention: String?
    @Flag(name: .customLong("require-valid-receipt"), help: ServeSettings.help("require-valid-receipt")) var requireValidReceipt = false
    @Option(name: .customLong("validation-category"), help: ServeSettings.help("validation-category")) var validationCategories: [String] = []
    @Option(name: .customLong("minimum-bundle-version"), help: ServeSettings.help("minimum-bundle-version")) var minimumBundleVersion: String?
    @Option(name: .customLong("allowed-cdhash"), help: ServeSettings.help("allowed-cdhash")) var allowedCDHashes: [String] = []
    @Option(name: .customLong("allowed-cdhashes-file"), help: ServeSettings.help("allowed-cdhashes-file")) var allowedCDHashesFile: String?
    @Flag(name: .customLong("require-cdhash"), help: ServeSettings.help("require-cdhash")) var requireCDHash = false
    @Flag(name: .customLong("require-extensions"), help: ServeSettings.help("require-extensions")) var requireExtensions = false
    @Option(name: .customLong("macos-access-control"), help: ServeSettings.help("macos-access-control")) var macOSAccessControl: String?
    @Option(name: .customLong("caller-jwks"), help: ServeSettings.help("caller-jwks")) var callerJWKS: String?
    @Option(name: .customLong("caller-issuer"), help: ServeSettings.help("caller-issuer")) var callerIssuer: String?
    @Option(name: .customLong("caller-audience"), help: ServeSettings.help("caller-audience")) var callerAudience: String?
    @Option(name: .customLong("caller-user-claim"), help: ServeSettings.help("caller-user-claim")) var callerUserClaim: String?
    @Option(name: .customLong("bind-session"), help: ServeSettings.help("bind-session")) var bindSession: String?
    @Option(name: .customLong("caller-secret-file"), help: ServeSettings.help("caller-secret-file")) var callerSecretFile: String?
    @Option(name: .customLong("admin-secret-file"), help: ServeSettings.help("admin-secret-file")) var adminSecretFile: String?
    @Flag(name: .customLong("insecure-no-caller-auth"), help: ServeSettings.help("insecure-no-caller-auth")) var insecureNoCallerAuth = false
    @Option(name: .customLong("max-keys-per-user"), help: ServeSettings.help("max-keys-per-user")) var maxKeysPerUser: String?
    @Option(name: .customLong("passkey-rp-id"), help: ServeSettings.help("passkey-rp-id")) var passkeyRelyingPartyID: String?
    @Option(name: .customLong("passkey-origin"), help: ServeSettings.help("passkey-origin")) var passkeyOrigins: [String] = []
    @Option(name: .customLong("factor-policy"), help: ServeSettings.help("factor-policy")) var factorPolicy: String?
    @Option(name: .customLong("max-passkeys-per-user"), help: ServeSettings.help("max-passkeys-per-user")) var maxPasskeysPerUser: String?
    @Option(name: .customLong("rate-limit-per-user"), help: ServeSettings.help("rate-limit-per-user")) var rateLimitPerUser: String?
    @Option(name: .customLong("rate-limit-per-address"), help: ServeSettings.help("rate-limit-per-address")) var rateLimitPerAddress: String?
    @Option(name: .customLong("rate-limit-assertions-per-user"), help: ServeSettings.help("rate-limit-assertions-per-user"))
    var rateLimitAssertionsPerUser: String?
    @Option(name: .customLong("rate-limit-window"), help: ServeSettings.help("rate-limit-window")) var rateLimitWindow: String?
    @Option(name: .customLong("trusted-proxy-hops"), help: ServeSettings.help("trusted-proxy-hops")) var trustedProxyHops: String?
    @Option(name: .customLong("rate-limit-per-backend"), help: ServeSettings.help("rate-limit-per-backend")) var rateLimitPerBackend: String?
    @Option(name: .customLong("rate-limit-backend-unnamed"), help: ServeSettings.help("rate-limit-backend-unnamed")) var rateLimitBackendUnnamed:
        String?
    @Option(name: .customLong("rate-limit-ipv6-prefix"), help: ServeSettings.help("rate-limit-ipv6-prefix")) var rateLimitIPv6Prefix: String?
    @Option(name: .customLong("rate-limit-inspect"), help: ServeSettings.help("rate-limit-inspect")) var rateLimitInspect: String?
    @Option(name: .customLong("rate-limit-pool"), help: ServeSettings.help("rate-limit-pool")) var rateLimitPool: String?
    @Option(name: .customLong("rate-limit-pool-per-user"), help: ServeSettings.help("rate-limit-pool-per-user")) var rateLimitPoolPerUser: String?
    @Option(name: .customLong("rate-limit-registrations-per-backend"), help: ServeSettings.help("rate-limit-registrations-per-backend"))
    var rateLimitRegistrationsPerBackend: String?
    @Option(name: .customLong("rate-limit-backend-user-share"), help: ServeSettings.help("rate-limit-backend-user-share"))
    var rateLimitBackendUserShare: String?
    @Option(name: .customLong("rate-limit-registrations-per-user"), help: ServeSettings.help("rate-limit-registrations-per-user"))
    var rateLimitRegistrationsPerUser: String?
    @Option(name: .customLong("max-connections"), help: ServeSettings.help("max-connections")) var maxConnections: String?
    @Option(name: .customLong("max-connections-per-address"), help: ServeSettings.help("max-connections-per-address")) var maxConnectionsPerAddress:
        String?
    @Option(name: .customLong("header-timeout"), help: ServeSettings.help("header-timeout")) var headerTimeout: String?
    @Option(name: .customLong("max-requests-per-connection"), help: ServeSettings.help("max-requests-per-connection")) var maxRequestsPerConnection:
        String?
    @Option(name: .customLong("max-connection-age"), help: ServeSettings.help("max-connection-age")) var maxConnectionAge: String?
    @Option(name: .customLong("attestation-ca"), help: ServeSettings.help("attestation-ca")) var attestationCA: String?
    @Option(name: .customLong("rp-id"), help: ServeSettings.help("rp-id")) var relyingPartyID: String?
    @Option(name: .customLong("evidence-dir"), help: ServeSettings.help("evidence-dir")) var evidenceDirectory: String?
    @Flag(name: .customLong("evidence-in-answer"), help: ServeSettings.help("evidence-in-answer")) var evidenceInAnswer = false
    @Option(name: .customLong("evidence-log"), help: ServeSettings.help("evidence-log")) var evidenceLog: String?
    @Option(name: .customLong("evidence-log-key"), help: ServeSettings.help("evidence-log-key")) var evidenceLogKey: String?
    @Option(name: .customLong("min-free-space"), help: ServeSettings.help("min-free-space")) var minFreeSpace: String?
    @Flag(name: .customLong("dev-simulator"), help: ServeSettings.help("dev-simulator")) var devSimulator = false
    @Option(name: .customLong("demo-dir"), help: ServeSettings.help("demo-dir")) var demoDirectory: String?
    @Option(name: .customLong("log-level"), help: ServeSettings.help("log-level")) var logLevel: String?
    @Option(name: .customLong("log-format"), help: ServeSettings.help("log-format")) var logFormat: String?
    @Option(name: .customLong("otlp-endpoint"), help: ServeSettings.help("otlp-endpoint")) var otlpEndpoint: String?

    /// The flags given, by setting key (the command-line source of the provider chain).
    var givenFlags: [String: [String]] {
        [
            "config": self.config.map { [$0] } ?? [],
            "host": self.host.map { [$0] } ?? [],
            "port": self.port.map { [$0] } ?? [],
            "admin-host": self.adminHost.map { [$0] } ?? [],
            "admin-port": self.adminPort.map { [$0] } ?? [],
            "store": self.store.map { [$0] } ?? [],
            "mongodb-database": self.mongoDatabase.map { [$0] } ?? [],
            "mongodb-collection-prefix": self.mongoCollectionPrefix.map { [$0] } ?? [],
            "data-dir": self.dataDirectory.map { [$0] } ?? [],
            "signing-key": self.signingKey.map { [$0] } ?? [],
            "issuer": self.issuer.map { [$0] } ?? [],
            "audience": self.audience.map { [$0] } ?? [],
            "app-id": self.appIDs,
            "environment": self.environment.map { [$0] } ?? [],
            "root": self.roots,
            "form-max-age": self.formMaxAge.map { [$0] } ?? [],
            "form-max-skew": self.formMaxSkew.map { [$0] } ?? [],
            "challenge-lifetime": self.challengeLifetime.map { [$0] } ?? [],
            "require-challenge": self.requireChallenge ? ["true"] : [],
            "rotate-challenges": self.rotateChallenges ? ["true"] : [],
            "max-key-age": self.maxKeyAge.map { [$0] } ?? [],
            "counter-rule": self.counterRule.map { [$0] } ?? [],
            "idle-timeout": self.idleTimeout.map { [$0] } ?? [],
            "body-timeout": self.bodyTimeout.map { [$0] } ?? [],
            "min-body-rate": self.minBodyRate.map { [$0] } ?? [],
            "purge-interval": self.purgeInterval.map { [$0] } ?? [],
            "purge-step-target": self.purgeStepTarget.map { [$0] } ?? [],
            "revoked-key-retention": self.revokedKeyRetention.map { [$0] } ?? [],
            "require-valid-receipt": self.requireValidReceipt ? ["true"] : [],
            "validation-category": self.validationCategories,
            "minimum-bundle-version": self.minimumBundleVersion.map { [$0] } ?? [],
            "allowed-cdhash": self.allowedCDHashes,
            "allowed-cdhashes-file": self.allowedCDHashesFile.map { [$0] } ?? [],
            "require-cdhash": self.requireCDHash ? ["true"] : [],
            "require-extensions": self.requireExtensions ? ["true"] : [],
            "macos-access-control": self.macOSAccessControl.map { [$0] } ?? [],
            "caller-jwks": self.callerJWKS.map { [$0] } ?? [],
            "caller-issuer": self.callerIssuer.map { [$0] } ?? [],
            "caller-audience": self.callerAudience.map { [$0] } ?? [],
            "caller-user-claim": self.callerUserClaim.map { [$0] } ?? [],
            "bind-session": self.bindSession.map { [$0] } ?? [],
            "caller-secret-file": self.callerSecretFile.map { [$0] } ?? [],
            "admin-secret-file": self.adminSecretFile.map { [$0] } ?? [],
            "insecure-no-caller-auth": self.insecureNoCallerAuth ? ["true"] : [],
            "max-keys-per-user": self.maxKeysPerUser.map { [$0] } ?? [],
            "passkey-rp-id": self.passkeyRelyingPartyID.map { [$0] } ?? [],
            "passkey-origin": self.passkeyOrigins,
            "factor-policy": self.factorPolicy.map { [$0] } ?? [],
            "max-passkeys-per-user": self.maxPasskeysPerUser.map { [$0] } ?? [],
            "rate-limit-per-user": self.rateLimitPerUser.map { [$0] } ?? [],
            "rate-limit-per-address": self.rateLimitPerAddress.map { [$0] } ?? [],
            "rate-limit-assertions-per-user": self.rateLimitAssertionsPerUser.map { [$0] } ?? [],
            "rate-limit-window": self.rateLimitWindow.map { [$0] } ?? [],
            "trusted-proxy-hops": self.trustedProxyHops.map { [$0] } ?? [],
            "rate-limit-per-backend": self.rateLimitPerBackend.map { [$0] } ?? [],
            "rate-limit-backend-unnamed": self.rateLimitBackendUnnamed.map { [$0] } ?? [],
            "rate-limit-ipv6-prefix": self.rateLimitIPv6Prefix.map { [$0] } ?? [],
            "rate-limit-inspect": self.rateLimitInspect.map { [$0] } ?? [],
            "rate-limit-pool": self.rateLimitPool.map { [$0] } ?? [],
            "rate-limit-pool-per-user": self.rateLimitPoolPerUser.map { [$0] } ?? [],
            "rate-limit-registrations-per-backend": self.rateLimitRegistrationsPerBackend.map { [$0] } ?? [],
            "rate-limit-backend-user-share": self.rateLimitBackendUserShare.map { [$0] } ?? [],
            "rate-limit-registrations-per-user": self.rateLimitRegistrationsPerUser.map { [$0] } ?? [],
            "max-connections": self.maxConnections.map { [$0] } ?? [],
            "max-connections-per-address": self.maxConnectionsPerAddress.map { [$0] } ?? [],
            "header-timeout": self.headerTimeout.map { [$0] } ?? [],
            "max-requests-per-connection": self.maxRequestsPerConnection.map { [$0] } ?? [],
            "max-connection-age": self.maxConnectionAge.map { [$0] } ?? [],
            "attestation-ca": self.attestationCA.map { [$0] } ?? [],
            "rp-id": self.relyingPartyID.map { [$0] } ?? [],
            "evidence-dir": self.evidenceDirectory.map { [$0] } ?? [],
            "evidence-in-answer": self.evidenceInAnswer ? ["true"] : [],
            "evidence-log": self.evidenceLog.map { [$0] } ?? [],
            "evidence-log-key": self.evidenceLogKey.map { [$0] } ?? [],
            "min-free-space": self.minFreeSpace.map { [$0] } ?? [],
            "dev-simulator": self.devSimulator ? ["true"] : [],
            "demo-dir": self.demoDirectory.map { [$0] } ?? [],
            "log-level": self.logLevel.map { [$0] } ?? [],
            "log-format": self.logFormat.map { [$0] } ?? [],
            "otlp-endpoint": self.otlpEndpoint.map { [$0] } ?? [],
        ]
    }

    /// What `--dev-simulator` adds, made for the first app id: the device behind
    /// `/api/dev/simulate` and the two roots the verifier must trust to accept what it signs.
    public typealias DevelopmentDeviceFactory =
        @Sendable (_ appID: String) throws -> (
            device: any DevelopmentDevice, trustAnchor: X509.Certificate, receiptTrustAnchor: X509.Certificate
        )

    /// Resolves the settings, then runs the service until it is stopped.
    ///
    /// - Parameter factory: the development device, or `nil` in a binary without one, where
    ///   `--dev-simulator` is refused before anything starts.
    public func run(developmentDevice factory: DevelopmentDeviceFactory?) async throws {
        let settings = try ServeSettings.resolve(flags: self.givenFlags, environment: ProcessInfo.processInfo.environment)
        let plan = try ServePlan(settings)
        if plan.devSimulator && factory == nil {
            throw UsageError(
                "--dev-simulator (\(settings.source("dev-simulator"))): this binary contains no simulator; run the developer executable instead: formattest-dev serve --dev-simulator"
            )
        }
        let level = Logger.Level(rawValue: settings.text("log-level") ?? "info") ?? .info  // checked: a choice
        let jsonLog = settings.text("log-format") == "json"
        LoggingSystem.bootstrap { label in
            var handler: any LogHandler = jsonLog ? JSONLogHandler(label: label) : StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "formattest")
        let tracing = try Self.tracing(settings, logger: logger)
        if let config = settings.values["config"] {
            logger.info("configuration file", metadata: ["path": "\(config.texts[0])", "source": "\(config.source)"])
        }

        // The files that decide trust are judged before any is read (StrictModes, r3 F1).
        try StrictModes.checkTrust(plan)
        var anchors = try InputFile.readCertificates(plan.roots, orDefault: AppAttestPolicy.appleTrustAnchors)
        var receiptAnchors = AppAttestPolicy.appleReceiptTrustAnchors
        var developmentDevice: (any DevelopmentDevice)?
        if plan.devSimulator, let factory {
            let simulated = try factory(plan.appIDs[0])
            anchors.append(simulated.trustAnchor)
            receiptAnchors.append(simulated.receiptTrustAnchor)
            developmentDevice = simulated.device
            let banner = String(repeating: "!", count: 78)
            logger.warning("\(banner)")
            logger.warning("DEV SIMULATOR MODE: the simulator's CA is TRUSTED and /api/dev/simulate is served.")
            logger.warning("Anyone can mint attestations this server accepts. NEVER run this in production.")
            logger.warning("\(banner)")
        }

        var policy = AppAttestPolicy(
            appIDs: plan.appIDs,
            environments: plan.environment.environments,
            trustAnchors: anchors,
            receiptTrustAnchors: receiptAnchors,
            // Evidence records carry the key's whole attestation, its receipt included.
            requireValidReceipt: settings.toggle("require-valid-receipt") || plan.evidence != nil
        )
        try plan.signalPolicy.apply(to: &policy)
        var configuration = ServerConfiguration(policy: policy)
        configuration.host = plan.host
        configuration.port = plan.port
        configuration.adminListener = plan.adminListener
        configuration.idleTimeout = .milliseconds(Int64((settings.seconds("idle-timeout") ?? 60) * 1000))
        configuration.bodyTimeout = .milliseconds(Int64((settings.seconds("body-timeout") ?? 10) * 1000))
        configuration.minimumBodyRate = settings.integer("min-body-rate") ?? 1000
        configuration.purgeInterval = .milliseconds(Int64((settings.seconds("purge-interval") ?? 60) * 1000))
        configuration.purgeStepTarget = .microseconds(Int64((settings.seconds("purge-step-target") ?? 0.005) * 1_000_000))
        configuration.revokedRetention = settings.seconds("revoked-key-retention") ?? ServeSettings.minimumRevokedKeyRetention
        configuration.connectionLimits = ConnectionLimits(
            total: plan.maxConnections, perAddress: settings.integer("max-connections-per-address") ?? 128,
            headerTimeout: .milliseconds(Int64((settings.seconds("header-timeout") ?? 10) * 1000)),
            maximumRequests: settings.integer("max-requests-per-connection") ?? 1000,
            maximumAge: .milliseconds(Int64((settings.seconds("max-connection-age") ?? 300) * 1000))
        )
        configuration.flows = FlowConfiguration(
            formPolicy: FormPolicy(maximumAge: settings.seconds("form-max-age") ?? 300, maximumFutureSkew: settings.seconds("form-max-skew") ?? 30),
            formChallengeLifetime: settings.seconds("challenge-lifetime") ?? 120,
            requireServerChallenge: settings.toggle("require-challenge"),
            rotateChallenges: settings.toggle("rotate-challenges"),
            maximumKeyAge: settings.seconds("max-key-age")
        )
        configuration.flows.maximumKeysPerUser = plan.caller.maxKeysPerUser
        configuration.flows.counterRule = CounterRule(rawValue: settings.text("counter-rule") ?? "tolerant") ?? .tolerant  // checked: a choice
        try Self.applyPasskeySettings(settings, to: &configuration)
        configuration.rateLimits = plan.caller.rateLimits
        // The process's metrics: bootstrapped here, once, and rendered by `/metrics` (before the
        // identity provider's first fetch, which counts its outcome).
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        // Latency buckets that fit the service: its answers take 0.5 to a few milliseconds, its
        // purge steps about 5 ms; the library's default starts at 5 ms and would put them all in
        // one bucket. The alerting rules (deploy/prometheus) read p99 from these.
        factory.defaultDurationHistogramBuckets = [
            .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(3), .milliseconds(5),
            .milliseconds(7), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
            .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(10),
        ]
        MetricsSystem.bootstrap(factory)
        configuration.metrics = registry
        configuration.callerAuthentication = try await plan.caller.authentication(logger: logger)
        configuration.adminSecrets = try plan.caller.adminSecrets()
        // Unsafe modes stop the service before it opens the store or listens (StrictModes).
        var callerSecrets: BackendSecrets?
        if case .trustedBackend(let secrets) = configuration.callerAuthentication { callerSecrets = secrets }
        try StrictModes.check(
            plan, callerSecrets: callerSecrets, adminSecrets: configuration.adminSecrets,
            configurationFile: settings.text("config").map { ($0, settings.configurationHoldsSecret) }
        )
        let descriptors = try DescriptorLimit.ensure(
            connections: plan.maxConnections, listeners: plan.adminListener == nil ? 1 : 2, explicit: settings.isSet("max-connections"))
        configuration.connectionLimits.total = descriptors.connections
        configuration.packedAttestation = try plan.packed.packed()
        configuration.evidence = plan.evidence
        configuration.assertionsPerUser = settings.integer("rate-limit-assertions-per-user") ?? 60
        // The low-space guard, on the filesystems that grow with every form: the SQLite store's
        // and the evidence archive's (a MongoDB server watches its own disk).
        let guardedPaths = [plan.sqliteDirectory, plan.evidence?.archiveDirectory, plan.evidence?.log?.directory].compactMap { $0 }
        let minimumFreeMegabytes = settings.integer("min-free-space") ?? 256
        if minimumFreeMegabytes > 0 && !guardedPaths.isEmpty {
            configuration.storageGuard = StorageGuardConfiguration(paths: guardedPaths, minimumFreeBytes: UInt64(minimumFreeMegabytes) * 1_000_000)
        }
        configuration.issuer = plan.signing.issuer
        configuration.audience = plan.signing.audience
        configuration.devSimulator = plan.devSimulator
        configuration.demoDirectory = plan.demoDirectory
        configuration.tracing = tracing != nil

        // What this instance is, one fact a line, before it opens the store and listens.
        let base = "http://\(plan.host.contains(":") ? "[\(plan.host)]" : plan.host):\(plan.port)"
        logger.info("public listener", metadata: ["address": "\(base)"])
        if let admin = plan.adminListener {
            logger.info("operators' listener (/metrics, /admin/*)", metadata: ["address": "http://\(admin.host):\(admin.port)"])
        } else {
            logger.warning("/metrics and /admin/* share the public port: set --admin-port to serve them on a separate listener")
        }
        logger.info("store", metadata: ["kind": "\(plan.storeKind)", "location": "\(plan.storeLocationForLog)"])
        logger.info("data directory", metadata: ["path": "\(URL(fileURLWithPath: plan.signing.dataDirectory).standardizedFileURL.path)"])
        for anchor in anchors {
            let fingerprint = try Self.fingerprint(anchor)
            logger.info("trust anchor", metadata: ["subject": "\(anchor.subject)", "sha256": "\(fingerprint)"])
        }
        logger.info("environments", metadata: ["accepted": "\(plan.environment.environments.map(\.rawValue).sorted().joined(separator: ","))"])
        for appID in plan.appIDs {
            logger.info("app id", metadata: ["appId": "\(appID)"])
        }
        if let demo = plan.demoDirectory {
            logger.info(
                "demo page", metadata: ["url": "\(base)/appattest-demo.html", "directory": "\(URL(fileURLWithPath: demo).standardizedFileURL.path)"])
        } else {
            logger.info("demo page: off", metadata: ["reason": "the default directory \(plan.demoDefault.debugDescription) does not exist"])
        }
        if let evidence = plan.evidence {
            logger.info(
                "evidence records",
                metadata: [
                    "archive": "\(evidence.archiveDirectory.map { URL(fileURLWithPath: $0).standardizedFileURL.path } ?? "none")",
                    "inAnswer": "\(evidence.inAnswer)", "requireValidReceipt": "true",
                    "log": "\(evidence.log.map { URL(fileURLWithPath: $0.directory).standardizedFileURL.path } ?? "none")",
                    "logVerifierKey": "\(evidence.log.map(\.signer.verifierKey) ?? "none")",
                ]
            )
        }
        if let storageGuard = configuration.storageGuard {
            for path in storageGuard.paths {
                logger.info(
                    "storage guard",
                    metadata: [
                        "path": "\(URL(fileURLWithPath: path).standardizedFileURL.path)", "minimumFreeBytes": "\(storageGuard.minimumFreeBytes)",
                    ])
            }
        } else {
            logger.info(
                "storage guard: off",
                metadata: ["reason": "\(minimumFreeMegabytes == 0 ? "min-free-space 0" : "no local store or evidence directory")"])
        }
        logger.info("counter rule", metadata: ["rule": "\(configuration.flows.counterRule.rawValue)"])
        logger.info(
            "connections",
            metadata: [
                "max": "\(configuration.connectionLimits.total)", "maxPerAddress": "\(configuration.connectionLimits.perAddress)",
                // As in force: the header deadline is clamped to the idle timeout.
                "headerTimeout": "\(min(configuration.connectionLimits.headerTimeout, configuration.idleTimeout))",
                "fileDescriptors": "\(descriptors.descriptors)",
            ]
        )
        logger.info("log level", metadata: ["level": "\(level)", "source": "\(settings.source("log-level"))"])
        if let endpoint = settings.text("otlp-endpoint") {
            logger.info("traces", metadata: ["otlpEndpoint": "\(endpoint)", "source": "\(settings.source("otlp-endpoint"))"])
        } else {
            logger.info("traces: off")
        }
        logger.info("log format", metadata: ["format": "\(jsonLog ? "json" : "text")", "source": "\(settings.source("log-format"))"])

        let store = try await plan.storeOptions.open()
        let application = try await FormAttestApplication.make(
            configuration: configuration,
            store: store,
            signingKeys: try plan.signing.keys(),
            developmentDevice: developmentDevice,
            logger: logger,
            services: tracing.map { [$0] } ?? []
        )
        try await application.runService()
    }

    /// With `otlp-endpoint`: swift-otel's tracer over OTLP/HTTP (protobuf), bootstrapped as the
    /// process's tracer, and its exporter's service (which the application runs, and stops after
    /// its HTTP servers, so that the last spans are sent). Traces only: the logs stay swift-log's
    /// and the metrics Prometheus's. Without it: nil, and nothing is bootstrapped.
    static func tracing(_ settings: ServeSettings.Resolved, logger: Logger) throws -> (any Service)? {
        guard let endpoint = settings.text("otlp-endpoint") else { return nil }
        // swift-otel reads the standard variables itself, and they would win over a flag: a flag
        // or a file entry beside a different OTEL_EXPORTER_OTLP_ENDPOINT is refused, not guessed.
        let environment = ProcessInfo.processInfo.environment
        if settings.source("otlp-endpoint") != "environment", let variable = environment["OTEL_EXPORTER_OTLP_ENDPOINT"], variable != endpoint {
            throw UsageError(
                "otlp-endpoint (\(settings.source("otlp-endpoint"))): OTEL_EXPORTER_OTLP_ENDPOINT is also set, to another URL; set one of them.")
        }
        var configuration = OTel.Configuration.default
        configuration.serviceName = "formattest"
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        configuration.traces.enabled = true
        configuration.traces.exporter = .otlp
        configuration.traces.otlpExporter.protocol = .httpProtobuf
        // A base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is: the traces go to its /v1/traces.
        configuration.traces.otlpExporter.endpoint = endpoint.hasSuffix("/") ? "\(endpoint)v1/traces" : "\(endpoint)/v1/traces"
        configuration.propagators = [.traceContext]
        configuration.diagnosticLogger = .custom(logger)
        do {
            let backend = try OTel.makeTracingBackend(configuration: configuration)
            InstrumentationSystem.bootstrap(backend.factory)
            return backend.service
        } catch {
            throw UsageError("otlp-endpoint (\(settings.source("otlp-endpoint"))): the OTLP exporter could not be made: \(error)")
        }
    }

    /// The SHA-256 of a certificate's DER, in hex: what `openssl x509 -fingerprint -sha256` shows.
    static func fingerprint(_ certificate: X509Certificate) throws -> String {
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return SHA256.hash(data: serializer.serializedBytes).map { String(format: "%02X", $0) }.joined(separator: ":")
    }
}

/// What `serve` runs, decided from the resolved settings: the cross-setting checks, and the option
/// groups the other commands share, parsed from the settings' canonical `--key=value` form (so that
/// their own checks run on the final values, whatever their source).
struct ServePlan {
    let host: String
    let port: Int
    let adminListener: (host: String, port: Int)?
    let appIDs: [String]
    let roots: [String]
    let environment: EnvironmentChoice
    let devSimulator: Bool
    let demoDirectory: String?
    let demoDefault: String
    let storeOptions: StoreOptions
    let storeKind: String
    let storeLocationForLog: String
    /// The SQLite store's directory (nil for MongoDB and memory).
    let sqliteDirectory: String?
    let signing: SigningOptions
    let caller: CallerOptions
    let packed: PackedOptions
    let evidence: EvidenceConfiguration?
    let signalPolicy: SignalPolicyOptions
    /// The SQLite store's file, when the store is one.
    let sqliteFile: String?
    /// Open connections per listener.
    let maxConnections: Int

    init(_ settings: ServeSettings.Resolved) throws {
        func arguments(_ keys: [String]) -> [String] {
            keys.flatMap { key -> [String] in
                let setting = ServeSettings.setting(key)
                guard settings.values[key] != nil else { return [] }
                if setting.kind.isToggle { return settings.toggle(key) ? [setting.flag] : [] }
                return settings.list(key).map { "\(setting.flag)=\($0)" }
            }
        }
        self.host = settings.text("host") ?? "127.0.0.1"
        self.maxConnections = settings.integer("max-connections") ?? 1024
        self.port = settings.integer("port") ?? 8080
        self.appIDs = settings.list("app-id")
        self.roots = settings.list("root")
        self.environment = EnvironmentChoice(rawValue: settings.text("environment") ?? "any") ?? .any
        self.devSimulator = settings.toggle("dev-simulator")
        if self.devSimulator && self.environment == .production {
            throw UsageError("--dev-simulator is refused with --environment production: the simulator is not Apple.")
        }

        // The operators' listener: a port of its own, never the public one.
        if let adminPort = settings.integer("admin-port") {
            let adminHost = settings.text("admin-host") ?? "127.0.0.1"
            guard adminPort != self.port else {
                throw UsageError(
                    "--admin-port (\(settings.source("admin-port"))) must differ from --port: the operators' listener is a separate one.")
            }
            self.adminListener = (adminHost, adminPort)
        } else {
            guard !settings.isSet("admin-host") else {
                throw UsageError("--admin-host (\(settings.source("admin-host"))) needs --admin-port.")
            }
            self.adminListener = nil
        }

        // The demo page: a directory that was asked for must exist; the default may be missing.
        let demo = settings.text("demo-dir") ?? "demo"
        self.demoDefault = ServeSettings.setting("demo-dir").defaultValue ?? "demo"
        var isDirectory: ObjCBool = false
        let exists = FileManager.default.fileExists(atPath: demo, isDirectory: &isDirectory) && isDirectory.boolValue
        if settings.isSet("demo-dir") && !exists {
            throw UsageError(
                "--demo-dir (\(settings.source("demo-dir"))): \(demo.debugDescription) is not a directory; the demo page would answer 404.")
        }
        self.demoDirectory = exists ? demo : nil

        self.signing = try SigningOptions.parse(arguments(["data-dir", "signing-key", "issuer", "audience"]))
        self.caller = try CallerOptions.parse(
            arguments([
                "caller-jwks", "caller-issuer", "caller-audience", "caller-user-claim", "bind-session", "caller-secret-file", "admin-secret-file",
                "insecure-no-caller-auth", "max-keys-per-user", "rate-limit-per-user", "rate-limit-per-address", "rate-limit-window",
                "trusted-proxy-hops",
                "rate-limit-per-backend", "rate-limit-backend-unnamed", "rate-limit-ipv6-prefix", "rate-limit-inspect", "rate-limit-pool",
                "rate-limit-pool-per-user", "rate-limit-registrations-per-backend", "rate-limit-backend-user-share",
                "rate-limit-registrations-per-user",
            ])
        )
        try self.caller.validate(devSimulator: self.devSimulator)
        self.packed = try PackedOptions.parse(arguments(["attestation-ca", "rp-id"]))
        self.evidence = try EvidenceOptions.parse(arguments(["evidence-dir", "evidence-in-answer", "evidence-log", "evidence-log-key"]))
            .configuration()
        self.signalPolicy = try SignalPolicyOptions.parse(
            arguments([
                "validation-category", "minimum-bundle-version", "allowed-cdhash", "allowed-cdhashes-file", "require-cdhash", "require-extensions",
                "macos-access-control",
            ])
        )
        try self.signalPolicy.check()

        // The store: a SQLite file's directory must exist (a mistyped path must not create
        // directories and an empty store), but for the data directory, which serve creates.
        let dataDirectory = URL(fileURLWithPath: self.signing.dataDirectory).standardizedFileURL.path
        let location = settings.text("store") ?? "sqlite:" + URL(fileURLWithPath: dataDirectory).appendingPathComponent("formattest.sqlite").path
        self.storeOptions = try StoreOptions.parse(["--store=\(location)"] + arguments(["mongodb-database", "mongodb-collection-prefix"]))
        self.storeLocationForLog = StoreOptions.redacted(location)
        if location.hasPrefix("sqlite:") {
            self.storeKind = "sqlite"
            let file = URL(fileURLWithPath: String(location.dropFirst("sqlite:".count))).standardizedFileURL
            self.sqliteFile = file.path
            let directory = file.deletingLastPathComponent().path
            self.sqliteDirectory = directory
            var isDirectory: ObjCBool = false
            guard
                directory == dataDirectory || (FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory) && isDirectory.boolValue)
            else {
                throw UsageError(
                    "--store (\(settings.source("store"))): the directory \(directory.debugDescription) of the SQLite file does not exist; create it first (serve creates only the data directory)."
                )
            }
        } else if location == "memory" {
            self.storeKind = "memory"
            self.sqliteDirectory = nil
            self.sqliteFile = nil
        } else {
            self.storeKind = "mongodb"
            self.sqliteDirectory = nil
            self.sqliteFile = nil
        }
    }
}
