//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestClient
import Foundation
import Testing

/// The client's behaviour against a service whose answers each test decides.
struct AppAttestClientTests {
    static let hash = Data(repeating: 7, count: 32)

    static func expect<T>(_ expected: (AppAttestClientError) -> Bool, _ body: () async throws -> T) async {
        do {
            _ = try await body()
            Issue.record("no error was thrown")
        } catch let error as AppAttestClientError {
            #expect(expected(error), "\(error)")
        } catch {
            Issue.record("unexpected error \(error)")
        }
    }

    @Test("an unsupported device gives notSupported before calling the service")
    func notSupported() async {
        let service = FakeAppAttestService(isSupported: false)
        let client = AppAttestClient(service: service)
        #expect(client.isSupported == false)
        await Self.expect({ $0.code == .notSupported }) { try await client.generateKey() }
        await Self.expect({ $0.code == .notSupported }) {
            try await client.register(clientDataHash: Self.hash)
        }
        #expect(service.calls.isEmpty)
    }

    @Test("a clientDataHash that is not 32 bytes is refused before calling the service", arguments: [0, 31, 33, 64])
    func invalidHash(count: Int) async {
        let service = FakeAppAttestService()
        let client = AppAttestClient(service: service)
        await Self.expect({ $0.code == .invalidClientDataHash }) {
            try await client.attestKey(keyId: "k", clientDataHash: Data(count: count))
        }
        await Self.expect({ $0.code == .invalidClientDataHash }) {
            try await client.generateAssertion(keyId: "k", clientDataHash: Data(count: count))
        }
        #expect(service.calls.isEmpty)
    }

    @Test("a service that never answers times out; a late answer is ignored")
    func timeout() async throws {
        let service = FakeAppAttestService()
        service.keyAnswer = { _, _ in }  // never answers
        // Keeps the assertion's completion handler, to answer only after the caller timed out:
        // deterministic however busy the machine is.
        let late = LateAnswer()
        service.assertAnswer = { _, respond in late.keep(respond) }
        let client = AppAttestClient(service: service, configuration: .init(timeout: .milliseconds(50)))
        await Self.expect({ $0.code == .timeout }) { try await client.generateKey() }
        await Self.expect({ $0.code == .timeout }) {
            try await client.generateAssertion(keyId: "k", clientDataHash: Self.hash)
        }
        // The late answer must not resume the caller a second time (that would trap).
        #expect(late.answer(Data([1])))
        // And the client still works: the next call is answered normally.
        service.assertAnswer = { _, respond in respond(Data([2]), nil) }
        #expect(try await client.generateAssertion(keyId: "k", clientDataHash: Self.hash) == Data([2]))
    }

    @Test("service errors are wrapped by operation; (nil, nil) is unknownError; featureUnsupported is notSupported")
    func errorWrapping() async {
        let service = FakeAppAttestService()
        service.keyAnswer = { _, respond in respond(nil, DCErrorCode.serverUnavailable.error) }
        service.attestAnswer = { _, respond in respond(nil, nil) }
        service.assertAnswer = { _, respond in respond(nil, DCErrorCode.featureUnsupported.error) }
        let client = AppAttestClient(service: service)
        await Self.expect({ $0.code == .keyGeneration && $0.underlying.flatMap(DCErrorCode.init) == .serverUnavailable }) {
            try await client.generateKey()
        }
        await Self.expect({ $0.code == .unknownError }) {
            try await client.attestKey(keyId: "k", clientDataHash: Self.hash)
        }
        await Self.expect({ $0.code == .notSupported }) {
            try await client.generateAssertion(keyId: "k", clientDataHash: Self.hash)
        }
    }

    @Test("oversized answers are refused: attestation over 8 KiB, assertion over 2 KiB")
    func oversized() async throws {
        let service = FakeAppAttestService()
        service.attestAnswer = { _, respond in respond(Data(count: 8 * 1024 + 1), nil) }
        service.assertAnswer = { _, respond in respond(Data(count: 2 * 1024 + 1), nil) }
        let client = AppAttestClient(service: service)
        await Self.expect({ $0.code == .attestation && ($0.underlying as? OversizedResponse)?.limit == 8192 }) {
            try await client.attestKey(keyId: "k", clientDataHash: Self.hash)
        }
        await Self.expect({ $0.code == .assertion && ($0.underlying as? OversizedResponse)?.limit == 2048 }) {
            try await client.generateAssertion(keyId: "k", clientDataHash: Self.hash)
        }
        service.attestAnswer = { _, respond in respond(Data(count: 8 * 1024), nil) }
        #expect(try await client.attestKey(keyId: "k", clientDataHash: Self.hash).count == 8192)
    }

    @Test("registration retries once with a fresh key on invalidKey or invalidInput", arguments: [DCErrorCode.invalidKey, .invalidInput])
    func retryWithFreshKey(code: DCErrorCode) async throws {
        let service = FakeAppAttestService()
        service.attestAnswer = { call, respond in
            call == 1 ? respond(nil, code.error) : respond(Data([0xA3]), nil)
        }
        let registration = try await AppAttestClient(service: service).register(clientDataHash: Self.hash)
        #expect(registration.retriedWithFreshKey)
        #expect(registration.keyId == "key-2")
        #expect(service.calls == [.generateKey, .attestKey("key-1"), .generateKey, .attestKey("key-2")])
    }

    @Test("registration retries only once, and not for other errors")
    func retryOnlyOnce() async throws {
        let service = FakeAppAttestService()
        service.attestAnswer = { _, respond in respond(nil, DCErrorCode.invalidKey.error) }
        await Self.expect({ $0.code == .attestation }) {
            try await AppAttestClient(service: service).register(clientDataHash: Self.hash)
        }
        #expect(service.calls.count == 4)

        let other = FakeAppAttestService()
        other.attestAnswer = { _, respond in respond(nil, DCErrorCode.serverUnavailable.error) }
        await Self.expect({ $0.code == .attestation }) {
            try await AppAttestClient(service: other).register(clientDataHash: Self.hash)
        }
        #expect(other.calls == [.generateKey, .attestKey("key-1")])
    }

    @Test("single flight: a concurrent registration joins the running one; another hash is refused")
    func singleFlight() async throws {
        let service = FakeAppAttestService()
        let release = AsyncGate()
        service.attestAnswer = { _, respond in
            release.whenOpen { respond(Data([0xA3]), nil) }
        }
        let client = AppAttestClient(service: service)
        async let first = client.register(clientDataHash: Self.hash)
        // Wait until the first registration is inside attestKey (held by the gate).
        for _ in 0..<1000 where !service.calls.contains(.attestKey("key-1")) {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(service.calls.contains(.attestKey("key-1")))
        async let second = client.register(clientDataHash: Self.hash)
        await Self.expect({ $0.code == .registrationInProgress }) {
            try await client.register(clientDataHash: Data(repeating: 8, count: 32))
        }
        // Answer only once the second call has joined (however long the machine takes to run it).
        for _ in 0..<3000 where await client.registrationWaiterCount < 1 {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(await client.registrationWaiterCount == 1)
        release.open()
        let (a, b) = try await (first, second)
        #expect(a == b)
        #expect(service.calls == [.generateKey, .attestKey("key-1")], "the service ran once")
    }

    @Test("the circuit breaker: 3 attestations per 5 minutes, observable, then closed by time or reset")
    func circuitBreaker() async throws {
        let clock = ManualClock()
        let service = FakeAppAttestService()
        let client = AppAttestClient(service: service, now: { clock.now })
        #expect(await client.circuitBreakerState == .closed(recentAttempts: 0))
        for attempt in 1...3 {
            _ = try await client.register(clientDataHash: Self.hash)
            clock.advance(by: 10)
            #expect(
                await client.circuitBreakerState
                    == (attempt < 3 ? .closed(recentAttempts: attempt) : .open(until: Date(timeIntervalSince1970: 1_795_341_600 + 300))))
        }
        await Self.expect({ $0.code == .reattestationLimited && $0.retryAfter == Date(timeIntervalSince1970: 1_795_341_900) }) {
            try await client.register(clientDataHash: Self.hash)
        }
        #expect(service.calls.filter { if case .attestKey = $0 { true } else { false } }.count == 3)
        clock.advance(by: 300 - 30)  // the first attempt leaves the window
        #expect(await client.circuitBreakerState == .closed(recentAttempts: 2))
        _ = try await client.register(clientDataHash: Self.hash)
        #expect(await client.circuitBreakerState == .open(until: Date(timeIntervalSince1970: 1_795_341_610 + 300)))
        await client.resetCircuitBreaker()
        #expect(await client.circuitBreakerState == .closed(recentAttempts: 0))
        _ = try await client.register(clientDataHash: Self.hash)
    }

    @Test("an expired server challenge is refused, with a configurable grace")
    func expiredChallenge() async throws {
        let clock = ManualClock()
        let challenge = AppAttestClient.ServerChallenge(value: "c", expiresAt: clock.now.addingTimeInterval(-5))
        let strict = AppAttestClient(service: FakeAppAttestService(), now: { clock.now })
        await Self.expect({ $0.code == .challengeExpired }) {
            try await strict.register(clientDataHash: Self.hash, challenge: challenge)
        }
        let lenient = AppAttestClient(service: FakeAppAttestService(), configuration: .init(challengeGrace: 10), now: { clock.now })
        _ = try await lenient.register(clientDataHash: Self.hash, challenge: challenge)
    }
}

/// Holds callbacks until opened.
final class AsyncGate: @unchecked Sendable {
    private let lock = NSLock()
    private var isOpen = false
    private var pending: [@Sendable () -> Void] = []

    func whenOpen(_ action: @escaping @Sendable () -> Void) {
        let runNow = self.lock.withLock { () -> Bool in
            if self.isOpen { return true }
            self.pending.append(action)
            return false
        }
        if runNow { action() }
    }

    func open() {
        let actions = self.lock.withLock { () -> [@Sendable () -> Void] in
            self.isOpen = true
            defer { self.pending = [] }
            return self.pending
        }
        for action in actions { action() }
    }
}

/// A completion handler kept for later.
final class LateAnswer: @unchecked Sendable {
    // Invariant: `respond` is only read or written while holding `lock`.
    private let lock = NSLock()
    private var respond: (@Sendable (Data?, (any Error)?) -> Void)?

    func keep(_ respond: @escaping @Sendable (Data?, (any Error)?) -> Void) {
        self.lock.withLock { self.respond = respond }
    }

    /// Answers with `data`; `false` when no handler was kept.
    func answer(_ data: Data) -> Bool {
        guard let respond = self.lock.withLock({ self.respond }) else { return false }
        respond(data, nil)
        return true
    }
}
