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
import HummingbirdCore
public import Logging
import Metrics
public import NIOCore
import NIOHTTP1
import Prometheus
public import ServiceLifecycle
import WebAuthn

/// Builds the Hummingbird application: routes, middleware, and the background services.
public enum FormAttestApplication {
    /// Builds the application.
    ///
    /// - Parameters:
    ///   - configuration: what to serve and how.
    ///   - store: the shared state. The application owns it from here: it closes it when it shuts
    ///     down, after its HTTP servers drained.
    ///   - signingKeys: the JWS keys (the JWKS publishes them).
    ///   - developmentDevice: the device behind `POST /api/dev/simulate`, served when
    ///     `devSimulator` is set (the developer executable's simulator; `nil` in production).
    ///   - logger: the service's logger.
    ///   - extra: more services to run beside the listeners and stop after them (the trace
    ///     exporter, which must send the last requests' spans).
    public static func make(
        configuration: ServerConfiguration,
        store: any OperationalAttestationStore,
        signingKeys: SigningKeys,
        developmentDevice: (any DevelopmentDevice)?,
        logger: Logger,
        services extra: [any Service] = []
    ) async throws -> some ApplicationProtocol {
        let service = try await FormAttestService(
            configuration: configuration, store: store, signingKeys: signingKeys, developmentDevice: developmentDevice, logger: logger)
        let router = Router(context: AppRequestContext.self)
        service.addRoutes(to: router)
        // The store's first, so that the service group stops it last (see StoreShutdownService).
        var services: [any Service] = [service.storeShutdown] + (service.housekeeping.map { [$0] } ?? []) + extra + [service.purge]
        if let admin = configuration.adminListener {
            // The operators' listener runs beside the public one, in the same service group.
            services.append(
                Application(
                    router: self.operatorRouter(configuration: configuration, store: store),
                    server: Self.http1(configuration, listener: "admin", logger: logger),
                    configuration: Self.listener(host: admin.host, port: admin.port, configuration, logger: logger),
                    onServerRunning: Self.serverRunning(listener: "admin", logger: logger),
                    logger: logger
                )
            )
        }
        return Application(
            router: router,
            server: Self.http1(configuration, listener: "api", logger: logger),
            configuration: Self.listener(host: configuration.host, port: configuration.port, configuration, logger: logger),
            services: services,
            onServerRunning: Self.serverRunning(listener: "api", logger: logger),
            logger: logger
        )
    }

    /// A listener's address, with the connections' hard ceiling
    /// (``ServerConfiguration/connectionLimits``' `ceiling`) as its accept gate: at the ceiling the
    /// listener stops accepting, and says so in the log and `formattest_connections_saturated_total`.
    ///
    /// - Parameters:
    ///   - host: the address to bind.
    ///   - port: the port to bind.
    ///   - configuration: the service's configuration (its connection limits).
    ///   - logger: where the saturation is logged.
    /// - Returns: the configuration of a Hummingbird `Application` (server name `formattest`).
    public static func listener(host: String, port: Int, _ configuration: ServerConfiguration, logger: Logger) -> ApplicationConfiguration {
        ApplicationConfiguration(
            address: .hostname(host, port: port), serverName: "formattest",
            availableConnectionsDelegate: ConnectionCap(maximum: configuration.connectionLimits.ceiling, logger: logger)
        )
    }

    /// HTTP/1.1 with the idle timeout, and in every connection's pipeline the connection guard
    /// (`ConnectionGuardHandler`: the per-address cap, the shedding over the total, the header
    /// deadline, and each connection's request and age caps) and the body
    /// deadline (`BodyDeadlineHandler`). Each listener counts its own connections.
    ///
    /// The connection-level half of FormAttest's protections: an integrator that mounts
    /// ``FormAttestService``'s routes in its own application passes this as its `Application`'s
    /// `server`, or its listener goes without them (the routes' own limits, such as the body size
    /// cap, hold either way).
    ///
    /// - Parameters:
    ///   - configuration: the service's configuration (its timeouts and connection limits).
    ///   - listener: the listener's name in metrics (`api`, `admin`).
    ///   - logger: where refused connections are logged.
    /// - Returns: the server builder for a Hummingbird `Application`.
    public static func http1(_ configuration: ServerConfiguration, listener: String, logger: Logger) -> HTTPServerBuilder {
        let bodyTimeout = configuration.bodyTimeout
        // Made once a listener, after the metrics system's bootstrap (not per request).
        let timeToAnswer = Metrics.Timer(label: "formattest_time_to_answer_seconds", dimensions: [("listener", listener)])
        let limits = configuration.connectionLimits
        // Behind trusted proxies every peer is a proxy: no per-address cap then (shedding over the
        // total still closes the connection idle longest).
        let registry = ConnectionRegistry(
            total: limits.total, perAddress: configuration.rateLimits.trustedProxyHops > 0 ? nil : limits.perAddress)
        let headerTimeout = min(limits.headerTimeout, configuration.idleTimeout)
        let ipv6Prefix = configuration.rateLimits.ipv6Prefix
        let minimumRate = MinimumBodyRate(bytesPerSecond: configuration.minimumBodyRate, logger: logger)
        return .http1(
            configuration: .init(
                additionalChannelHandlers: [
                    ConnectionGuardHandler(
                        registry: registry, ipv6Prefix: ipv6Prefix, headerTimeout: headerTimeout, writeTimeout: bodyTimeout,
                        maximumRequests: limits.maximumRequests, maximumAge: limits.maximumAge, timeToAnswer: timeToAnswer, logger: logger),
                    BodyDeadlineHandler(timeout: bodyTimeout, minimumRate: minimumRate),
                ],
                idleTimeout: TimeAmount(configuration.idleTimeout)
            ))
    }

    /// What a listener does once it runs: logs the errors its accepts meet (a file descriptor
    /// shortage) and watches its accept queue (`formattest_listener_accept_queue`).
    ///
    /// - Parameters:
    ///   - listener: the listener's name in logs and metrics (`api`, `admin`).
    ///   - logger: where accept errors are logged.
    /// - Returns: the `onServerRunning` closure of a Hummingbird `Application`.
    public static func serverRunning(listener: String, logger: Logger) -> @Sendable (any Channel) async -> Void {
        { channel in
            await AcceptErrorObserver.install(on: channel, logger: logger)
            AcceptQueueWatch.install(on: channel, listener: listener, logger: logger)
        }
    }

    /// The operators' router, for ``ServerConfiguration/adminListener``: `/metrics` and, with
    /// admin secrets, `/admin/*`; nothing else.
    public static func operatorRouter(configuration: ServerConfiguration, store: any OperationalAttestationStore) -> Router<AppRequestContext> {
        let router = Router(context: AppRequestContext.self)
        router.add(middleware: RequestLogMiddleware())
        router.add(middleware: ErrorShapeMiddleware())
        router.add(middleware: BodyDeadlineMiddleware())
        self.addOperatorRoutes(to: router, configuration: configuration, store: store)
        return router
    }

    /// `/metrics` and `/admin/*`, on whichever router serves them.
    static func addOperatorRoutes(
        to router: some RouterMethods<AppRequestContext>, configuration: ServerConfiguration, store: any OperationalAttestationStore
    ) {
        if let adminSecrets = configuration.adminSecrets {
            AdminController(
                store: store, secrets: adminSecrets, registrationWindow: configuration.flows.registrationCountWindow, now: configuration.now
            )
            .addRoutes(to: router.group("admin"))
        }
        if let registry = configuration.metrics {
            router.get("metrics") { _, _ in
                var headers = HTTPFields()
                headers[.contentType] = "text/plain; version=0.0.4"
                return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: registry.emitToBuffer())))
            }
        }
    }

    /// The router alone, with ``FormAttestService``'s routes (the route tests drive it in process).
    public static func router(
        configuration: ServerConfiguration,
        store: any OperationalAttestationStore,
        signingKeys: SigningKeys,
        developmentDevice: (any DevelopmentDevice)?
    ) async throws -> Router<AppRequestContext> {
        let service = try await FormAttestService(
            configuration: configuration, store: store, signingKeys: signingKeys, developmentDevice: developmentDevice,
            logger: Logger(label: "formattest"))
        let router = Router(context: AppRequestContext.self)
        service.addRoutes(to: router)
        return router
    }
}

/// Gives every error the one JSON shape: ``APIError`` as it is, Hummingbird's HTTP errors (404,
/// 405, 413) with their status, and anything unexpected as a 500 that says nothing internal.
struct ErrorShapeMiddleware: RouterMiddleware {
    typealias Context = AppRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as APIError {
            throw error
        } catch is NIOTooManyBytesError {
            throw APIError.bodyTooLarge
        } catch let error as HTTPParserError {
            // A malformed request (bad chunked encoding, ...) met while reading the body: the
            // client's fault, never a 5xx.
            throw APIError.malformedRequest("\(error)")
        } catch let error as HTTPError {
            throw APIError.framework(status: error.status, message: error.body)
        } catch {
            context.logger.error("unexpected error", metadata: ["error": "\(type(of: error))"])
            throw APIError.internalError
        }
    }
}

/// One line per request at info: method, the matched route's template (never the path as sent:
/// its query string or segments may carry a username or a keyId; `/admin/users/{username}/keys`
/// is logged as `/admin/users/:username/keys`), status, duration in milliseconds (`ms`) and, for a
/// refusal, its error code (`code`, the answer's). Request fields and form contents are never
/// logged.
struct RequestLogMiddleware: RouterMiddleware {
    typealias Context = AppRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let started = ContinuousClock.now
        do {
            let response = try await next(request, context)
            self.log(request, status: response.status.code, code: nil, started: started, context: context)
            return response
        } catch let error as APIError {
            self.log(request, status: error.status.code, code: error.code, started: started, context: context)
            throw error
        } catch let error as any HTTPResponseError {
            self.log(request, status: error.status.code, code: nil, started: started, context: context)
            throw error
        }
    }

    private func log(_ request: Request, status: Int, code: String?, started: ContinuousClock.Instant, context: Context) {
        let elapsed = ContinuousClock.now - started
        let milliseconds = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
        var metadata: Logger.Metadata = [
            "method": .string(request.method.rawValue),
            "route": .string(context.endpointPath ?? "(no route)"),
            "status": .stringConvertible(status),
            "ms": .stringConvertible((milliseconds * 10).rounded() / 10),
        ]
        if let code { metadata["code"] = .string(code) }
        context.logger.info("request", metadata: metadata)
    }
}

/// `/healthz`'s probe: whether the store takes a write (a read succeeds on a store that is full,
/// read-only or locked). The write is a replay record of 32 random bytes that expires at once,
/// the same statement path as every accepted form. At most one probe an `interval` (a second by
/// default) runs; callers in between share its answer, so that `/healthz` cannot load the store.
actor HealthProbe {
    private let store: any OperationalAttestationStore
    private let interval: Duration
    private let now: @Sendable () -> Date
    private var last: (at: ContinuousClock.Instant, writable: Bool)?

    init(store: any OperationalAttestationStore, interval: Duration, now: @escaping @Sendable () -> Date) {
        self.store = store
        self.interval = interval
        self.now = now
    }

    func storeIsWritable(logger: Logger) async -> Bool {
        if let last = self.last, ContinuousClock.now - last.at < self.interval {
            return last.writable
        }
        var generator = SystemRandomNumberGenerator()
        let probe = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let now = self.now()
        let writable: Bool
        do {
            try await self.store.recordFormHash(ReplayRecord(formHash: probe, expiresAt: now), now: now)
            writable = true
        } catch {
            logger.error("health probe: the store does not take a write", metadata: ["reason": .string(error.reason)])
            writable = false
        }
        self.last = (ContinuousClock.now, writable)
        return writable
    }
}
