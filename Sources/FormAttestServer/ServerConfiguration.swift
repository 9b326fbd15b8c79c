//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
public import FormAttestFlows
public import FormAttestTokens
public import Foundation
public import Prometheus
public import WebAuthn

/// Everything the service needs, decided by `formattest serve` from flags and environment.
public struct ServerConfiguration: Sendable {
    public var host: String = "127.0.0.1"
    public var port: Int = 8080
    /// The operators' listener: `/metrics` and `/admin/*` on an address of their own, and no longer
    /// on the public one. `nil`: both on the public listener.
    public var adminListener: (host: String, port: Int)?
    /// Accepted app ids, environments, trust anchors.
    public var policy: AppAttestPolicy
    public var flows: FlowConfiguration = FlowConfiguration()
    /// Passkeys: the relying party id and origins a passkey is verified against. `nil` (the
    /// default): the service accepts no passkeys (`passkeys_disabled`).
    public var passkeys: WebAuthnPolicy?
    /// The JWS issuer and audience.
    public var issuer: String = "formattest"
    public var audience: String = "formattest"
    /// Serve `POST /api/dev/simulate` (the simulator's root must then be among the trust anchors).
    public var devSimulator: Bool = false
    /// Where the demo page's files are; nil serves none.
    public var demoDirectory: String? = "demo"
    /// How often expired records are purged (housekeeping; correctness never depends on it).
    public var purgeInterval: Duration = .seconds(60)
    /// How long one step of the purge may hold the store's writer: a pass deletes in steps sized
    /// to about this, with the writer back to the requests between them (`PurgeService`).
    public var purgeStepTarget: Duration = .milliseconds(5)
    /// How long a revoked key or passkey, with its registration, is kept after its revocation;
    /// the purge deletes it then (`PurgeService`). `nil`: kept for ever. Default 30 days.
    ///
    /// At least ``minimumRevokedRetention``: a user's registrations are counted over revoked keys
    /// too, over the last 30 days; a key deleted sooner after its revocation could have been
    /// created inside that window, and would leave the count. ``FormAttestService/init(configuration:store:signingKeys:developmentDevice:logger:)``,
    /// and so ``FormAttestApplication/make(configuration:store:signingKeys:developmentDevice:logger:services:)``,
    /// refuses a shorter one (``RevokedRetentionTooShort``).
    public var revokedRetention: TimeInterval? = 30 * 86_400
    /// The shortest ``revokedRetention``: the longest window the service counts a user's
    /// registrations or pool challenges over (`FlowConfiguration.registrationCountWindow`,
    /// `FlowConfiguration.poolChallengeLifetime`; 30 days each by default). A key revoked before
    /// it was created before it, so deleting it changes no count.
    public var minimumRevokedRetention: TimeInterval {
        max(self.flows.registrationCountWindow, self.flows.poolChallengeLifetime)
    }

    /// ``revokedRetention`` is shorter than ``minimumRevokedRetention``.
    public struct RevokedRetentionTooShort: Error, CustomStringConvertible {
        public var retention: TimeInterval
        public var minimum: TimeInterval
        public var description: String {
            "the retention of revoked keys (\(Int(self.retention)) s) is shorter than the \(Int(self.minimum)) s over which a user's registrations are counted: purging a key revoked sooner could take a recent registration out of the count"
        }
    }
    /// A connection that sends nothing for this long is closed (slow or stalled clients).
    public var idleTimeout: Duration = .seconds(60)
    /// Connections in total and per peer address, the header deadline, and each connection's
    /// request and age caps.
    public var connectionLimits = ConnectionLimits()
    /// A request body must arrive completely within this time, or the answer is 408; and each
    /// part of an answer must be taken by the client (written to its socket) within it, or the
    /// connection is closed (a client that never reads its answers).
    public var bodyTimeout: Duration = .seconds(10)
    /// After a grace of 1 s from its head, a request body must keep arriving at this many bytes a
    /// second, counted over the last 2 s, or the answer is 408 and the connection closes (a client
    /// trickling its body cannot hold a connection busy for the body timeout); 0: no minimum.
    public var minimumBodyRate: Int = 1000
    /// `/healthz` probes the store with a write at most this often; callers in between share
    /// the last answer.
    public var healthProbeInterval: Duration = .seconds(1)
    /// Who vouches for the caller. Default: none (only the demo and tests; `serve` refuses to
    /// start that way but for `--dev-simulator` or `--insecure-no-caller-auth`).
    public var callerAuthentication: CallerAuthentication = .none
    /// The attestation authority and relying party id of the FIDO2 `packed` format: when set,
    /// every registration's answer carries a `packedAttestation` too.
    public var packedAttestation: (authority: PackedAttestationAuthority, relyingPartyID: String)?
    /// Evidence records of accepted forms (returned and/or archived); nil: none.
    public var evidence: EvidenceConfiguration?
    /// The operators' credential for `/admin/*`; nil: no admin API.
    public var adminSecrets: BackendSecrets?
    /// Per-user and per-address limits on challenge, attest and register-pooled.
    public var rateLimits = RateLimits()
    /// At most this many assertions per user in each rate-limit window (``RateLimits/window``),
    /// counted in the store across instances; over it, 429 `rate_limited`. Every accepted form
    /// writes a replay record and, with evidence on, a record file: one user signing in a loop
    /// must not fill the disk. `nil` (the library's default): no limit; `formattest serve` sets
    /// 60 unless told otherwise (`rate-limit-assertions-per-user`).
    public var assertionsPerUser: Int?
    /// The low-space guard: new forms refused (507 `insufficient_storage`) before the store's or
    /// the evidence's filesystem is full; nil: none.
    public var storageGuard: StorageGuardConfiguration?
    /// The registry `/metrics` renders. The process that owns the metrics system bootstraps it
    /// with this registry (`MetricsSystem.bootstrap(PrometheusMetricsFactory(registry:))`, once per
    /// process: the executable, or a test's harness); the library only emits. nil: no `/metrics`.
    public var metrics: PrometheusCollectorRegistry?
    /// Spans for each request and its steps (`RequestTraceMiddleware`), through whatever tracer
    /// the process bootstrapped (`serve --otlp-endpoint`: swift-otel's OTLP/HTTP exporter). Off:
    /// no middleware and no store wrapper; the steps' spans go to the no-op tracer.
    public var tracing = false
    /// The clock (injected for tests).
    public var now: @Sendable () -> Date = { Date() }

    public init(policy: AppAttestPolicy) {
        self.policy = policy
    }
}
