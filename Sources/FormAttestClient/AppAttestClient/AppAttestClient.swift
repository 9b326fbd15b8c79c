//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Foundation

/// The App Attest client the product's apps program against.
///
/// It adds to DeviceCheck what real apps needed: a timeout on every call, fail-closed size and
/// input checks, one retry with a fresh key when the service rejects the key or the input, a
/// single-flight registration, a re-attestation circuit breaker and refusal of expired server
/// challenges.
public actor AppAttestClient {
    /// Tunables, each with the default real apps settled on.
    public struct Configuration: Sendable, Hashable {
        /// Timeout of each service call. Default 30 s.
        public var timeout: Duration
        /// Attestations allowed per ``reattestationWindow``. Default 3.
        public var maximumAttestationsPerWindow: Int
        /// Default 5 minutes.
        public var reattestationWindow: TimeInterval
        /// How long after its expiry a server challenge is still used. Default 0.
        public var challengeGrace: TimeInterval

        public init(
            timeout: Duration = .seconds(30),
            maximumAttestationsPerWindow: Int = 3,
            reattestationWindow: TimeInterval = 300,
            challengeGrace: TimeInterval = 0
        ) {
            self.timeout = timeout
            self.maximumAttestationsPerWindow = maximumAttestationsPerWindow
            self.reattestationWindow = reattestationWindow
            self.challengeGrace = challengeGrace
        }
    }

    /// A challenge issued by the server, with its expiry.
    public struct ServerChallenge: Sendable, Hashable {
        public var value: String
        public var expiresAt: Date

        public init(value: String, expiresAt: Date) {
            self.value = value
            self.expiresAt = expiresAt
        }
    }

    /// A new key and its attestation, to send to the server.
    public struct Registration: Sendable, Hashable {
        public var keyId: String
        public var attestation: Data
        public var clientDataHash: Data
        /// True when the first key was rejected and a fresh key was attested instead.
        public var retriedWithFreshKey: Bool
    }

    /// Largest attestation accepted from the service (the server's limit too).
    public static let maximumAttestationSize = 8 * 1024
    /// Largest assertion accepted from the service.
    public static let maximumAssertionSize = 2 * 1024

    private let service: any DCAppAttestServiceProtocol
    private let configuration: Configuration
    private let now: @Sendable () -> Date
    private var breaker: ReattestationCircuitBreaker
    private var inflight: (clientDataHash: Data, waiters: [CheckedContinuation<Registration, any Error>])?

    /// Creates a client.
    ///
    /// - Parameters:
    ///   - service: `DCAppAttestServiceWrapper()` on a device; a simulated service elsewhere.
    ///   - configuration: timeouts and limits.
    ///   - now: the clock for the breaker and challenge expiry (injected for tests).
    public init(
        service: any DCAppAttestServiceProtocol,
        configuration: Configuration = Configuration(),
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.service = service
        self.configuration = configuration
        self.now = now
        self.breaker = ReattestationCircuitBreaker(
            maximumAttempts: configuration.maximumAttestationsPerWindow,
            window: configuration.reattestationWindow
        )
    }

    /// Whether App Attest is available here.
    public nonisolated var isSupported: Bool { self.service.isSupported }

    /// The re-attestation circuit breaker's state now.
    public var circuitBreakerState: ReattestationCircuitBreaker.State { self.breaker.state(at: self.now()) }

    /// Closes the re-attestation circuit breaker (after the user or support intervened).
    public func resetCircuitBreaker() {
        self.breaker.reset()
    }

    // MARK: - The three service calls

    /// Creates a key in the Secure Enclave.
    public func generateKey() async throws(AppAttestClientError) -> String {
        try self.requireSupport()
        let service = self.service
        do {
            let keyId: String = try await ServiceCall.run(timeout: self.configuration.timeout) { finish in
                service.generateKey { keyId, error in finish(Self.result(keyId, error)) }
            }
            return keyId
        } catch {
            throw Self.wrap(error, as: AppAttestClientError.keyGeneration)
        }
    }

    /// Attests a key over a 32-byte clientDataHash. Counts toward the circuit breaker.
    public func attestKey(keyId: String, clientDataHash: Data) async throws(AppAttestClientError) -> Data {
        try self.requireSupport()
        try Self.requireHash(clientDataHash)
        try self.breaker.recordAttempt(at: self.now())
        let service = self.service
        let attestation: Data
        do {
            attestation = try await ServiceCall.run(timeout: self.configuration.timeout) { finish in
                service.attestKey(keyId, clientDataHash: clientDataHash) { data, error in finish(Self.result(data, error)) }
            }
        } catch {
            throw Self.wrap(error, as: AppAttestClientError.attestation)
        }
        guard attestation.count <= Self.maximumAttestationSize else {
            throw .attestation(OversizedResponse(size: attestation.count, limit: Self.maximumAttestationSize))
        }
        return attestation
    }

    /// Signs a 32-byte clientDataHash with an attested key.
    public func generateAssertion(keyId: String, clientDataHash: Data) async throws(AppAttestClientError) -> Data {
        try self.requireSupport()
        try Self.requireHash(clientDataHash)
        let service = self.service
        let assertion: Data
        do {
            assertion = try await ServiceCall.run(timeout: self.configuration.timeout) { finish in
                service.generateAssertion(keyId, clientDataHash: clientDataHash) { data, error in
                    finish(Self.result(data, error))
                }
            }
        } catch {
            throw Self.wrap(error, as: AppAttestClientError.assertion)
        }
        guard assertion.count <= Self.maximumAssertionSize else {
            throw .assertion(OversizedResponse(size: assertion.count, limit: Self.maximumAssertionSize))
        }
        return assertion
    }

    // MARK: - Registration

    /// Creates and attests a key over `clientDataHash` (the hash of the form that registers it).
    ///
    /// - One retry with a fresh key when the service reports `invalidKey` or `invalidInput`.
    /// - Single flight: a call while another runs for the same clientDataHash joins it and gets
    ///   the same registration; one for a different hash is refused with `registrationInProgress`.
    /// - A `challenge` that expired more than `challengeGrace` ago is refused before any call.
    public func register(clientDataHash: Data, challenge: ServerChallenge? = nil) async throws(AppAttestClientError)
        -> Registration
    {
        if let challenge, self.now() > challenge.expiresAt.addingTimeInterval(self.configuration.challengeGrace) {
            throw .challengeExpired
        }
        try Self.requireHash(clientDataHash)
        if let running = self.inflight {
            guard running.clientDataHash == clientDataHash else { throw .registrationInProgress }
            do {
                return try await withCheckedThrowingContinuation { continuation in
                    self.inflight?.waiters.append(continuation)
                }
            } catch {
                throw Self.wrap(error, as: AppAttestClientError.attestation)
            }
        }
        self.inflight = (clientDataHash, [])
        let outcome: Result<Registration, AppAttestClientError>
        do {
            outcome = .success(try await self.performRegistration(clientDataHash: clientDataHash))
        } catch {
            outcome = .failure(error)
        }
        let waiters = self.inflight?.waiters ?? []
        self.inflight = nil
        for waiter in waiters {
            waiter.resume(with: outcome.mapError { $0 as any Error })
        }
        return try outcome.get()
    }

    /// How many calls wait for the running registration (observable for tests).
    package var registrationWaiterCount: Int { self.inflight?.waiters.count ?? 0 }

    private func performRegistration(clientDataHash: Data) async throws(AppAttestClientError) -> Registration {
        let keyId = try await self.generateKey()
        do {
            let attestation = try await self.attestKey(keyId: keyId, clientDataHash: clientDataHash)
            return Registration(keyId: keyId, attestation: attestation, clientDataHash: clientDataHash, retriedWithFreshKey: false)
        } catch let error where error.code == .attestation && [.invalidKey, .invalidInput].contains(error.underlying.flatMap(DCErrorCode.init)) {
            let freshKeyId = try await self.generateKey()
            let attestation = try await self.attestKey(keyId: freshKeyId, clientDataHash: clientDataHash)
            return Registration(keyId: freshKeyId, attestation: attestation, clientDataHash: clientDataHash, retriedWithFreshKey: true)
        }
    }

    // MARK: - Helpers

    private func requireSupport() throws(AppAttestClientError) {
        guard self.service.isSupported else { throw .notSupported }
    }

    private static func requireHash(_ hash: Data) throws(AppAttestClientError) {
        guard hash.count == 32 else { throw .invalidClientDataHash }
    }

    private static func result<Value: Sendable>(_ value: Value?, _ error: (any Error)?) -> Result<Value, any Error> {
        if let error { return .failure(error) }
        if let value { return .success(value) }
        return .failure(AppAttestClientError.unknownError)
    }

    /// Keeps the client's own errors (timeout, unknown) and wraps the service's in `wrapper`.
    private static func wrap(_ error: any Error, as wrapper: (any Error) -> AppAttestClientError) -> AppAttestClientError {
        if let own = error as? AppAttestClientError { return own }
        if DCErrorCode(error) == .featureUnsupported { return .notSupported }
        return wrapper(error)
    }
}
