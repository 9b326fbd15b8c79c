//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
package import ArgumentParser
import Crypto
import FormAttestFlows
import FormAttestForm
package import FormAttestServer
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
package import X509

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
package struct ServeOptions: ParsableArguments {
    /// The `serve` command's name, abstract and discussion.
    package static let configuration = CommandConfiguration(
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

    package init() {}

    @Option(help: ServeSettings.help("config")) var config: String?
    @Option(help: ServeSettings.help("host")) var host: String?
    @Option(help: ServeSettings.help("port")) var port: String?
    @Option(help: ServeSettings.help("admin-host")) var adminHost: String?
    @Option(help: ServeSettings.help("admin-port")) var adminPort: String?
    @Option(help: ServeSettings.help("store")) var store: String?
    @Option(help: ServeSettings.help("mongodb-database")) var mongodbDatabase: String?
    @Option(help: ServeSettings.help("mongodb-collection-prefix")) var mongodbCollectionPrefix: String?
    @Option(help: ServeSettings.help("data-dir")) var dataDir: String?
    @Option(help: ServeSettings.help("signing-key")) var signingKey: String?
    @Option(help: ServeSettings.help("issuer")) var issuer: String?
    @Option(help: ServeSettings.help("audience")) var audience: String?
    @Option(help: ServeSettings.help("app-id")) var appId: [String] = []
    @Option(help: ServeSettings.help("environment")) var environment: String?
    @Option(help: ServeSettings.help("root")) var root: [String] = []
    @Option(help: ServeSettings.help("form-max-age")) var formMaxAge: String?
    @Option(help: ServeSettings.help("form-max-skew")) var formMaxSkew: String?
    @Option(help: ServeSettings.help("challenge-lifetime")) var challengeLifetime: String?
    @Flag(help: ServeSettings.help("require-challenge")) var requireChallenge = false
    @Flag(help: ServeSettings.help("rotate-challenges")) var rotateChallenges = false
    @Option(help: ServeSettings.help("max-key-age")) var maxKeyAge: String?
    @Option(help: ServeSettings.help("counter-rule")) var counterRule: String?
    @Option(help: ServeSettings.help("idle-timeout")) var idleTimeout: String?
    @Option(help: ServeSettings.help("body-timeout")) var bodyTimeout: String?
    @Option(help: ServeSettings.help("min-body-rate")) var minBodyRate: String?
    @Option(help: ServeSettings.help("purge-interval")) var purgeInterval: String?
    @Option(help: ServeSettings.help("purge-step-target")) var purgeStepTarget: String?
    @Option(help: ServeSettings.help("revoked-key-retention")) var revokedKeyRetention: String?
    @Flag(help: ServeSettings.help("require-valid-receipt")) var requireValidReceipt = false
    @Option(help: ServeSettings.help("validation-category")) var validationCategory: [String] = []
    @Option(help: ServeSettings.help("minimum-bundle-version")) var minimumBundleVersion: String?
    @Option(help: ServeSettings.help("allowed-cdhash")) var allowedCdhash: [String] = []
    @Option(help: ServeSettings.help("allowed-cdhashes-file")) var allowedCdhashesFile: String?
    @Flag(help: ServeSettings.help("require-cdhash")) var requireCdhash = false
    @Flag(help: ServeSettings.help("require-extensions")) var requireExtensions = false
    @Option(help: ServeSettings.help("macos-access-control")) var macosAccessControl: String?
    @Option(help: ServeSettings.help("caller-jwks")) var callerJwks: String?
    @Option(help: ServeSettings.help("caller-issuer")) var callerIssuer: String?
    @Option(help: ServeSettings.help("caller-audience")) var callerAudience: String?
    @Option(help: ServeSettings.help("caller-user-claim")) var callerUserClaim: String?
    @Option(help: ServeSettings.help("bind-session")) var bindSession: String?
    @Option(help: ServeSettings.help("caller-secret-file")) var callerSecretFile: String?
    @Option(help: ServeSettings.help("admin-secret-file")) var adminSecretFile: String?
    @Flag(help: ServeSettings.help("insecure-no-caller-auth")) var insecureNoCallerAuth = false
    @Option(help: ServeSettings.help("max-keys-per-user")) var maxKeysPerUser: String?
    @Option(help: ServeSettings.help("passkey-rp-id")) var passkeyRpId: String?
    @Option(help: ServeSettings.help("passkey-origin")) var passkeyOrigin: [String] = []
    @Option(help: ServeSettings.help("factor-policy")) var factorPolicy: String?
    @Option(help: ServeSettings.help("max-passkeys-per-user")) var maxPasskeysPerUser: String?
    @Option(help: ServeSettings.help("rate-limit-per-user")) var rateLimitPerUser: String?
    @Option(help: ServeSettings.help("rate-limit-per-address")) var rateLimitPerAddress: String?
    @Option(help: ServeSettings.help("rate-limit-assertions-per-user"))
    var rateLimitAssertionsPerUser: String?
    @Option(help: ServeSettings.help("rate-limit-window")) var rateLimitWindow: String?
    @Option(help: ServeSettings.help("trusted-proxy-hops")) var trustedProxyHops: String?
    @Option(help: ServeSettings.help("rate-limit-per-backend")) var rateLimitPerBackend: String?
    @Option(help: ServeSettings.help("rate-limit-backend-unnamed")) var rateLimitBackendUnnamed: String?
    @Option(help: ServeSettings.help("rate-limit-ipv6-prefix")) var rateLimitIpv6Prefix: String?
    @Option(help: ServeSettings.help("rate-limit-inspect")) var rateLimitInspect: String?
    @Option(help: ServeSettings.help("rate-limit-pool")) var rateLimitPool: String?
    @Option(help: ServeSettings.help("rate-limit-pool-per-user")) var rateLimitPoolPerUser: String?
    @Option(help: ServeSettings.help("rate-limit-registrations-per-backend"))
    var rateLimitRegistrationsPerBackend: String?
    @Option(help: ServeSettings.help("rate-limit-backend-user-share"))
    var rateLimitBackendUserShare: String?
    @Option(help: ServeSettings.help("rate-limit-registrations-per-user"))
    var rateLimitRegistrationsPerUser: String?
    @Option(help: ServeSettings.help("max-connections")) var maxConnections: String?
    @Option(help: ServeSettings.help("max-connections-per-address")) var maxConnectionsPerAddress: String?
    @Option(help: ServeSettings.help("header-timeout")) var headerTimeout: String?
    @Option(help: ServeSettings.help("max-requests-per-connection")) var maxRequestsPerConnection: String?
    @Option(help: ServeSettings.help("max-connection-age")) var maxConnectionAge: String?
    @Option(help: ServeSettings.help("attestation-ca")) var attestationCa: String?
    @Option(help: ServeSettings.help("rp-id")) var rpId: String?
    @Option(help: ServeSettings.help("evidence-dir")) var evidenceDir: String?
    @Flag(help: ServeSettings.help("evidence-in-answer")) var evidenceInAnswer = false
    @Option(help: ServeSettings.help("evidence-log")) var evidenceLog: String?
    @Option(help: ServeSettings.help("evidence-log-key")) var evidenceLogKey: String?
    @Option(help: ServeSettings.help("min-free-space")) var minFreeSpace: String?
    @Flag(help: ServeSettings.help("dev-simulator")) var devSimulator = false
    @Option(help: ServeSettings.help("demo-dir")) var demoDir: String?
    @Option(help: ServeSettings.help("log-level")) var logLevel: String?
    @Option(help: ServeSettings.help("log-format")) var logFormat: String?
    @Option(help: ServeSettings.help("otlp-endpoint")) var otlpEndpoint: String?

    /// The flags given, by setting key (the command-line source of the provider chain). Each
    /// `@Option` and `@Flag` above is named after its setting's key in camel case, which is also
    /// how ArgumentParser spells its flag (`maxConnections`, `--max-connections`); `ServeOptionsTests`
    /// parse every key of ``ServeSettings/all`` through its flag, and a property whose name is not
    /// a key stops the first `resolve` (``ServeSettings/setting(_:)``).
    package var givenFlags: [String: [String]] {
        var flags: [String: [String]] = [:]
        for child in Mirror(reflecting: self).children {
            // A property wrapper is stored as `_name`.
            guard let label = child.label, label.hasPrefix("_") else { continue }
            let key = ServeSettings.key(ofProperty: String(label.dropFirst()))
            switch child.value {
            case let option as Option<String?>: flags[key] = option.wrappedValue.map { [$0] } ?? []
            case let option as Option<[String]>: flags[key] = option.wrappedValue
            case let flag as Flag<Bool>: flags[key] = flag.wrappedValue ? ["true"] : []
            default: preconditionFailure("serve's property \(label) is not a String?, [String] or Bool setting")
            }
        }
        return flags
    }

    /// What `--dev-simulator` adds, made for the first app id: the device behind
    /// `/api/dev/simulate` and the two roots the verifier must trust to accept what it signs.
    package typealias DevelopmentDeviceFactory =
        @Sendable (_ appID: String) throws -> (
            device: any DevelopmentDevice, trustAnchor: X509.Certificate, receiptTrustAnchor: X509.Certificate
        )

    /// Resolves the settings, then runs the service until it is stopped.
    ///
    /// - Parameter factory: the development device, or `nil` in a binary without one, where
    ///   `--dev-simulator` is refused before anything starts.
    package func run(developmentDevice factory: DevelopmentDeviceFactory?) async throws {
        // ArgumentParser keeps the last of a repeated single-value option without a word: read
        // from the process's own arguments, those after `serve`, and said at start (a wrapper
        // script that appends overrides to its defaults relies on the last one winning).
        let repeated = ServeSettings.repeatedFlags(Array(CommandLine.arguments.drop { $0 != "serve" }.dropFirst()))
        let settings = try ServeSettings.resolve(flags: self.givenFlags, environment: ProcessInfo.processInfo.environment)
        let plan = try ServePlan(settings)
        if plan.devSimulator && factory == nil {
            throw UsageError(
                "--dev-simulator (\(settings.source("dev-simulator"))): this binary contains no simulator; run the developer executable instead: formattest-dev serve --dev-simulator"
            )
        }
        let level = settings.choice("log-level", as: Logger.Level.self)
        let jsonLog = settings.text("log-format") == "json"
        LoggingSystem.bootstrap { label in
            var handler: any LogHandler = jsonLog ? JSONLogHandler(label: label) : StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "formattest")
        for flag in repeated {
            logger.warning("a flag given more than once: the last value is used", metadata: ["flag": "\(flag)"])
        }
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
        plan.signalPolicy.apply(to: &policy)
        var configuration = ServerConfiguration(policy: policy)
        configuration.host = plan.host
        configuration.port = plan.port
        configuration.adminListener = plan.adminListener
        configuration.idleTimeout = settings.duration("idle-timeout")
        configuration.bodyTimeout = settings.duration("body-timeout")
        configuration.minimumBodyRate = settings.integer("min-body-rate")
        configuration.purgeInterval = settings.duration("purge-interval")
        configuration.purgeStepTarget = settings.duration("purge-step-target")
        configuration.revokedRetention = settings.seconds("revoked-key-retention")
        configuration.connectionLimits = ConnectionLimits(
            total: plan.maxConnections, perAddress: settings.integer("max-connections-per-address"),
            headerTimeout: settings.duration("header-timeout"),
            maximumRequests: settings.integer("max-requests-per-connection"),
            maximumAge: settings.duration("max-connection-age")
        )
        configuration.flows = FlowConfiguration(
            formPolicy: FormPolicy(maximumAge: settings.seconds("form-max-age"), maximumFutureSkew: settings.seconds("form-max-skew")),
            formChallengeLifetime: settings.seconds("challenge-lifetime"),
            requireServerChallenge: settings.toggle("require-challenge"),
            rotateChallenges: settings.toggle("rotate-challenges"),
            maximumKeyAge: settings.secondsIfSet("max-key-age")
        )
        configuration.flows.maximumKeysPerUser = plan.caller.maxKeysPerUser
        configuration.flows.counterRule = settings.choice("counter-rule", as: CounterRule.self)
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
            configurationFile: settings.textIfSet("config").map { ($0, settings.configurationHoldsSecret) }
        )
        let descriptors = try DescriptorLimit.ensure(
            connections: plan.maxConnections, listeners: plan.adminListener == nil ? 1 : 2, explicit: settings.isSet("max-connections"))
        configuration.connectionLimits.total = descriptors.connections
        configuration.packedAttestation = try plan.packed.packed()
        configuration.evidence = plan.evidence
        configuration.assertionsPerUser = settings.integer("rate-limit-assertions-per-user")
        // The low-space guard, on the filesystems that grow with every form: the SQLite store's
        // and the evidence archive's (a MongoDB server watches its own disk).
        let guardedPaths = [plan.sqliteDirectory, plan.evidence?.archiveDirectory, plan.evidence?.log?.directory].compactMap { $0 }
        let minimumFreeMegabytes = settings.integer("min-free-space")
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
        if let endpoint = settings.textIfSet("otlp-endpoint") {
            // Without its user information or query, where a collector's credentials may be (r14 F5).
            logger.info(
                "traces", metadata: ["otlpEndpoint": "\(StoreSource.redacted(endpoint))", "source": "\(settings.source("otlp-endpoint"))"])
        } else {
            logger.info("traces: off")
        }
        logger.info("log format", metadata: ["format": "\(jsonLog ? "json" : "text")", "source": "\(settings.source("log-format"))"])

        let store = try await plan.store.open()
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
        guard let endpoint = settings.textIfSet("otlp-endpoint") else { return nil }
        // swift-otel reads the standard variables itself, and they would win over a flag: a flag
        // or a file entry beside a different OTEL_EXPORTER_OTLP_ENDPOINT is refused, not guessed.
        let environment = ProcessInfo.processInfo.environment
        if settings.source("otlp-endpoint") != "environment", let variable = environment["OTEL_EXPORTER_OTLP_ENDPOINT"], variable != endpoint {
            throw UsageError(
                "otlp-endpoint (\(settings.source("otlp-endpoint"))): OTEL_EXPORTER_OTLP_ENDPOINT is also set, to another URL; set one of them.")
        }
        // The traces' own variable wins over both inside swift-otel: one that names another URL
        // would send the traces elsewhere than this instance logs (r13).
        let tracesURL = endpoint.hasSuffix("/") ? "\(endpoint)v1/traces" : "\(endpoint)/v1/traces"
        if let variable = environment["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"], variable != tracesURL {
            throw UsageError(
                "otlp-endpoint (\(settings.source("otlp-endpoint"))): OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is also set, to another URL than its /v1/traces, and the traces would go there; unset it or set one URL."
            )
        }
        var configuration = OTel.Configuration.default
        configuration.serviceName = "formattest"
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        configuration.traces.enabled = true
        configuration.traces.exporter = .otlp
        configuration.traces.otlpExporter.protocol = .httpProtobuf
        // A base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is: the traces go to its /v1/traces.
        configuration.traces.otlpExporter.endpoint = tracesURL
        configuration.propagators = [.traceContext]
        configuration.diagnosticLogger = .custom(logger)
        do {
            let backend = try OTel.makeTracingBackend(configuration: configuration)
            InstrumentationSystem.bootstrap(backend.factory)
            return backend.service
        } catch {
            throw UsageError(
                "otlp-endpoint (\(settings.source("otlp-endpoint"))): the OTLP exporter could not be made: \(StoreSource.scrubbed("\(error)", of: endpoint))"
            )
        }
    }

    /// The SHA-256 of a certificate's DER, in hex: what `openssl x509 -fingerprint -sha256` shows.
    static func fingerprint(_ certificate: X509Certificate) throws -> String {
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return SHA256.hash(data: serializer.serializedBytes).map { String(format: "%02X", $0) }.joined(separator: ":")
    }
}

/// What `serve` runs, decided from the resolved settings: the cross-setting checks, and the values
/// of the option groups the other commands share, built from the settings directly through the
/// groups' own checks (``SigningSource``, ``PackedSource``, ``SignalPolicy``, ``StoreSource``), so
/// that they run on the final values, whatever their source, and name it.
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
    let store: StoreSource
    let storeKind: String
    let storeLocationForLog: String
    /// The SQLite store's directory (nil for MongoDB and memory).
    let sqliteDirectory: String?
    let signing: SigningSource
    let caller: CallerOptions
    let packed: PackedSource
    let evidence: EvidenceConfiguration?
    let signalPolicy: SignalPolicy
    /// The SQLite store's file, when the store is one.
    let sqliteFile: String?
    /// Open connections per listener.
    let maxConnections: Int

    init(_ settings: ServeSettings.Resolved) throws {
        self.host = settings.text("host")
        self.maxConnections = settings.integer("max-connections")
        self.port = settings.integer("port")
        self.appIDs = settings.list("app-id")
        self.roots = settings.list("root")
        self.environment = settings.choice("environment", as: EnvironmentChoice.self)
        self.devSimulator = settings.toggle("dev-simulator")
        if self.devSimulator && self.environment == .production {
            throw UsageError("--dev-simulator is refused with --environment production: the simulator is not Apple.")
        }

        // The operators' listener: a port of its own, never the public one.
        if let adminPort = settings.integerIfSet("admin-port") {
            let adminHost = settings.textIfSet("admin-host") ?? "127.0.0.1"
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
        let demo = settings.text("demo-dir")
        // When the page is off, the directory was the default (one asked for and missing is refused below).
        self.demoDefault = demo
        var isDirectory: ObjCBool = false
        let exists = FileManager.default.fileExists(atPath: demo, isDirectory: &isDirectory) && isDirectory.boolValue
        if settings.isSet("demo-dir") && !exists {
            throw UsageError(
                "--demo-dir (\(settings.source("demo-dir"))): \(demo.debugDescription) is not a directory; the demo page would answer 404.")
        }
        self.demoDirectory = exists ? demo : nil

        self.signing = SigningSource(settings)
        self.caller = try CallerOptions(settings, devSimulator: self.devSimulator)
        self.packed = try PackedSource(settings)
        self.evidence = try EvidenceConfiguration(settings)
        self.signalPolicy = try SignalPolicy(settings)

        // The store: a SQLite file's directory must exist (a mistyped path must not create
        // directories and an empty store), but for the data directory, which serve creates.
        let dataDirectory = URL(fileURLWithPath: self.signing.dataDirectory).standardizedFileURL.path
        self.store = try StoreSource(settings)
        let location = self.store.location
        self.storeLocationForLog = StoreSource.redacted(location)
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
