//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import CanonicalJSON
public import FormAttestFlows
import FormAttestResponses
public import FormAttestTokens
import Foundation
public import Hummingbird
public import Logging
public import ServiceLifecycle
import WebAuthn

/// FormAttest's HTTP API as a piece of an application someone else owns: the routes with their
/// middleware, to add to a router, and the background work, to add to a service group.
///
/// `formattest serve` is built from this type (``FormAttestApplication/make(configuration:store:signingKeys:developmentDevice:logger:services:)``);
/// an integrator that runs its own Hummingbird application builds one and mounts it beside its
/// own routes, as Hummingbird's own libraries are mounted:
///
/// ```swift
/// let formAttest = try await FormAttestService(
///     configuration: configuration, store: store, signingKeys: keys, logger: logger)
/// let router = Router(context: AppRequestContext.self)
/// router.get("bank/health") { _, _ in "ok" }
/// formAttest.addRoutes(to: router)
/// let app = Application(
///     router: router,
///     server: FormAttestApplication.http1(configuration, listener: "api", logger: logger),
///     configuration: FormAttestApplication.listener(host: "127.0.0.1", port: 8080, configuration, logger: logger),
///     services: formAttest.services,
///     onServerRunning: FormAttestApplication.serverRunning(listener: "api", logger: logger),
///     logger: logger)
/// try await app.runService()
/// ```
///
/// The routes take ``AppRequestContext``, the integrator's router's context: the handlers read the
/// caller's identity the caller authentication set in it, the peer's address (rate limits) and
/// the connection (to stop reading it after a refused body), and Hummingbird cannot make such a
/// context from another context (a `ChildRequestContext` has no connection to read them from).
///
/// The connection-level protections (the per-address cap, the header and body deadlines, each
/// connection's request and age caps) belong to the listener, which the integrator owns: its
/// server builder is ``FormAttestApplication/http1(_:listener:logger:)``.
public struct FormAttestService {
    let configuration: ServerConfiguration
    /// The store the routes use (wrapped in spans when tracing is on).
    let routeStore: any OperationalAttestationStore
    let appAttest: AppAttestController
    let passkeys: PasskeyController
    let evidenceLog: EvidenceLog?
    let storageGuard: StorageGuard?
    let health: HealthProbe
    let jwks: JSONValue
    let developmentDevice: (any DevelopmentDevice)?

    /// Closes the store when the service group shuts down (`OperationalAttestationStore.shutdown()`).
    ///
    /// Put it first in the service group, before the HTTP server: a group stops its services in
    /// reverse order, each after the one before it returned, so the store closes after the server
    /// drained its requests.
    public let storeShutdown: any Service
    /// Deletes expired challenges, form hashes, rate-limit windows and, after
    /// ``ServerConfiguration/revokedRetention``, revoked credentials, every
    /// ``ServerConfiguration/purgeInterval``. Housekeeping: no answer depends on it.
    public let purge: any Service

    /// The store's own housekeeping (SQLite's write-ahead log checkpoints), for a store that has
    /// some (`StoreHousekeeping`); `nil` otherwise. It stops at graceful shutdown, before the
    /// store closes.
    public let housekeeping: (any Service)?

    /// The background work, in the order to give a service group: ``storeShutdown``,
    /// ``housekeeping`` when the store has some, then ``purge``. Add them before the HTTP server
    /// (`Application(services:)` runs its own services before its server, and so stops them
    /// after it).
    public var services: [any Service] { [self.storeShutdown] + (self.housekeeping.map { [$0] } ?? []) + [self.purge] }

    /// Builds the flows, the verifiers, the token signer, the rate limiter and, with evidence on,
    /// opens the evidence log.
    ///
    /// - Parameters:
    ///   - configuration: what to serve and how. ``ServerConfiguration/host``,
    ///     ``ServerConfiguration/port`` and ``ServerConfiguration/adminListener`` are the
    ///     listeners', and this type reads none of them but one: without an operators' listener,
    ///     ``addRoutes(to:)`` adds `/metrics` and `/admin/*` beside the API.
    ///   - store: the shared state. ``storeShutdown`` closes it.
    ///   - signingKeys: the JWS keys (`/.well-known/jwks.json` publishes them).
    ///   - developmentDevice: the device behind `POST /api/dev/simulate`, served when
    ///     ``ServerConfiguration/devSimulator`` is set (`nil` in production).
    ///   - logger: the background services' logger (requests log through their context's).
    /// - Throws: ``ServerConfiguration/RevokedRetentionTooShort``; an error of the verifiers'
    ///   policies; an error opening the evidence log.
    public init(
        configuration: ServerConfiguration,
        store: any OperationalAttestationStore,
        signingKeys: SigningKeys,
        developmentDevice: (any DevelopmentDevice)? = nil,
        logger: Logger
    ) async throws {
        if let retention = configuration.revokedRetention, !(retention >= configuration.minimumRevokedRetention) {
            throw ServerConfiguration.RevokedRetentionTooShort(retention: retention, minimum: configuration.minimumRevokedRetention)
        }
        MetricSeries.declare()
        self.configuration = configuration
        self.developmentDevice = developmentDevice
        self.storeShutdown = StoreShutdownService(store: store, logger: logger)
        self.housekeeping = (store as? any StoreHousekeeping).map { StoreHousekeepingService(store: $0) }
        self.purge = PurgeService(
            store: store,
            interval: configuration.purgeInterval,
            pacer: PurgePacer(target: configuration.purgeStepTarget),
            now: configuration.now,
            revokedRetention: configuration.revokedRetention,
            logger: logger
        )

        let verifier = try AppAttestVerifier(policy: configuration.policy)
        var flowConfiguration = configuration.flows
        // Evidence holds for every key it is made for: with records on, a key whose registration
        // cannot support a verifiable one is refused (428 key_attestation_unverifiable).
        if configuration.evidence != nil { flowConfiguration.requireVerifiableKeyAttestation = true }
        // With tracing, each store call the flows and the rate limiter make is a span of its own.
        // A store that sequences a shared evidence log (MongoDB), before any wrapper hides it.
        let sharedLog = store as? any SharedLogStore
        let store: any OperationalAttestationStore = configuration.tracing ? TracedStore(base: store) : store
        self.routeStore = store
        let flows = FormFlows(
            verifier: verifier, store: store, configuration: flowConfiguration,
            webAuthn: try configuration.passkeys.map(WebAuthnVerifier.init(policy:)))
        let signer = ServerAttestationSigner(keys: signingKeys, issuer: configuration.issuer, audience: configuration.audience)

        var evidenceLog: EvidenceLog?
        if let logConfiguration = configuration.evidence?.log {
            // On a store that sequences a shared log (MongoDB), every instance appends to one log;
            // the directory is this instance's copy of it.
            let log = try await EvidenceLog.open(logConfiguration, shared: sharedLog)
            if let stopped = await log.stopped {
                Logger(label: "formattest.evidence").error(
                    "the shared evidence log stopped at a batch this copy refuses: forms are accepted but not logged until an operator removes it (docs/deployment.md)",
                    metadata: ["reason": "\(stopped)"])
            }
            evidenceLog = log
        }
        self.evidenceLog = evidenceLog
        // The per-user pool budget is counted over as long as a pool challenge lives.
        var rateLimits = configuration.rateLimits
        rateLimits.poolPerUserWindow = configuration.flows.poolChallengeLifetime
        let rateLimiter = RateLimiter(limits: rateLimits, store: store)
        var appAttest = AppAttestController(
            flows: flows,
            formatter: TokenFormatter(signer: signer, packed: configuration.packedAttestation),
            rateLimiter: rateLimiter,
            evidence: try configuration.evidence.map {
                try EvidenceRecorder(
                    configuration: $0, signingKey: signingKeys.current, verifierPolicy: configuration.policy, flows: configuration.flows,
                    log: evidenceLog)
            },
            now: configuration.now
        )
        appAttest.assertionsPerUser = configuration.assertionsPerUser
        let storageGuard = configuration.storageGuard.map(StorageGuard.init)
        appAttest.storageGuard = storageGuard
        self.appAttest = appAttest
        self.storageGuard = storageGuard
        self.passkeys = PasskeyController(flows: flows, rateLimiter: rateLimiter, storageGuard: storageGuard, now: configuration.now)
        self.health = HealthProbe(store: store, interval: configuration.healthProbeInterval, now: configuration.now)
        self.jwks = signingKeys.jwks
    }

    /// Adds FormAttest's middleware and routes: `/api/appattest/*`, `/api/passkeys/*`,
    /// `/.well-known/jwks.json`, `/healthz`, and as configured `/api/evidence/*`,
    /// `/api/dev/simulate`, and `/metrics` with `/admin/*` (without an operators' listener).
    ///
    /// On a `Router`, the middleware (error shape, request log, body deadline, metrics, traces)
    /// applies from here on to the whole router, unmatched paths included, as in
    /// `formattest serve`. On a `RouterGroup` (`router.group("formattest")`), the routes are
    /// under the group's path and the middleware applies to them only: the integrator's other
    /// routes keep their own errors, and ``ServerConfiguration/demoDirectory`` serves nothing
    /// (its files are served only for requests no route matched).
    ///
    /// - Parameter router: the integrator's router or one of its groups.
    public func addRoutes(to router: some RouterMethods<AppRequestContext>) {
        let configuration = self.configuration
        if configuration.tracing {
            TraceStep.enable()
            // First: the request's span encloses everything, and its ids reach the request's log line.
            _ = router.add(middleware: RequestTraceMiddleware())
        }
        // (The protocol's `add(middleware:)` returns the router, and is not `@discardableResult` as `Router`'s is.)
        _ = router.add(middleware: RequestLogMiddleware())
        _ = router.add(middleware: ErrorShapeMiddleware())
        _ = router.add(middleware: BodyDeadlineMiddleware())
        _ = router.add(middleware: MetricsMiddleware())
        if let demo = configuration.demoDirectory {
            _ = router.add(middleware: FileMiddleware(demo, searchForIndexHtml: false))
        }
        self.appAttest
            // Authentication is attached to the routes themselves, not to a path prefix: however a
            // request's path is spelled (`//api/appattest/assert`), if it reaches these handlers
            // it went through the caller authentication.
            .addRoutes(
                to: router.group("api/appattest").add(middleware: CallerAuthenticationMiddleware(authentication: configuration.callerAuthentication)))
        self.passkeys
            .addRoutes(
                to: router.group("api/passkeys").add(middleware: CallerAuthenticationMiddleware(authentication: configuration.callerAuthentication)))
        if configuration.adminListener == nil {
            FormAttestApplication.addOperatorRoutes(to: router, configuration: configuration, store: self.routeStore)
        }
        if configuration.devSimulator, let developmentDevice = self.developmentDevice {
            FormAttestApplication.addDevelopmentRoutes(developmentDevice, to: router.group("api/dev"))
        }
        if let evidenceLog = self.evidenceLog {
            EvidenceLogController(log: evidenceLog).addRoutes(to: router.group("api/evidence"))
        }
        let jwks = self.jwks
        router.get(".well-known/jwks.json") { _, _ in JSONResponse.make(jwks) }
        let health = self.health
        let storageGuard = self.storageGuard
        router.get("healthz") { _, context in
            // The store takes a write, or the service says so (and load balancers take it out).
            let writable = await health.storeIsWritable(logger: context.logger)
            guard writable else { return try JSONResponse.make(HealthResponse(storeAvailable: false), status: .serviceUnavailable) }
            // The disk low: no new form is taken, and the answer says which filesystem.
            if let storageGuard, let shortage = await storageGuard.shortage(logger: context.logger) {
                return try JSONResponse.make(
                    HealthResponse(
                        insufficientStoragePath: shortage.path, availableBytes: shortage.availableBytes,
                        minimumFreeBytes: storageGuard.configuration.minimumFreeBytes
                    ),
                    status: .serviceUnavailable
                )
            }
            return try JSONResponse.make(HealthResponse(storeAvailable: true))
        }
    }
}

extension FormAttestService: Sendable {}
