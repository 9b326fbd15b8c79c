//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestFlows
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOConcurrencyHelpers
import Tracing

/// A span for each request (``ServerConfiguration/tracing``), a child of the caller's when the
/// request carries a W3C `traceparent`; its context goes back in the answer's `traceresponse`
/// header (W3C Trace Context Level 2), and its trace and span ids into every log line the request
/// writes (`traceId`, `spanId`).
///
/// Its attributes are the method, the route's template (never the path as sent, nor the query:
/// either may carry a username or a keyId), the status and a refusal's error code. Hummingbird's
/// own `TracingMiddleware` records `url.path` and `url.query`, hence this one.
struct RequestTraceMiddleware: RouterMiddleware {
    typealias Context = AppRequestContext

    // A valid field name (lowercase letters only): the initializer cannot fail.
    private static let traceresponse = HTTPField.Name("traceresponse")!

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var parent = InstrumentationContext.current ?? .topLevel
        InstrumentationSystem.instrument.extract(request.headers, into: &parent, using: HTTPFieldsExtractor())
        let span = startSpan("\(request.method.rawValue)", context: parent, ofKind: .server)
        span.updateAttributes { $0["http.request.method"] = request.method.rawValue }
        var carrier: [String: String] = [:]
        InstrumentationSystem.instrument.inject(span.context, into: &carrier, using: DictionaryInjector())
        let traceparent = carrier["traceparent"]
        var context = context
        if let traceparent {
            // 00-<trace id>-<span id>-<flags>
            let parts = traceparent.split(separator: "-")
            if parts.count == 4 {
                context.logger[metadataKey: "traceId"] = .string(String(parts[1]))
                context.logger[metadataKey: "spanId"] = .string(String(parts[2]))
            }
        }
        var response: Response
        var code: String?
        do {
            response = try await InstrumentationContext.$current.withValue(span.context) {
                try await next(request, context)
            }
        } catch let error as any HTTPResponseError {
            code = (error as? APIError)?.code
            response = try error.response(from: request, context: context)
        } catch {
            // Not reached through ErrorShapeMiddleware, which answers everything; should it be,
            // the span still ends, as a server error.
            span.setStatus(SpanStatus(code: .error))
            span.end()
            throw error
        }
        let route = context.endpointPath ?? "(no route)"
        span.operationName = "\(request.method.rawValue) \(route)"
        span.updateAttributes { attributes in
            attributes["http.route"] = route
            attributes["http.response.status_code"] = Int(response.status.code)
            if let code { attributes["formattest.error.code"] = code }
        }
        if response.status.code >= 500 {
            span.setStatus(SpanStatus(code: .error))
        }
        if let traceparent {
            response.headers[Self.traceresponse] = traceparent
        }
        span.end()
        return response
    }
}

/// Runs one step of a request (the body read, the caller's authentication, the flow, the token
/// signing, the evidence write, a store call) in a child span of the request's. Without tracing
/// the tracer is swift-distributed-tracing's no-op one. A failure sets the span's status to error
/// and its `formattest.error.code` attribute (the code, never the reason: a reason may quote a
/// field of the request).
enum TraceStep {
    /// Whether steps make spans: off until an application with ``ServerConfiguration/tracing``
    /// is built in this process, and then on for good (tests run traced and untraced services in
    /// one process; a span on the no-op tracer is merely wasted). Off, a step is its body alone:
    /// no span and no task-local context, which the no-op tracer's spans cost (measured with
    /// `formattest-dev bench --only tracing`: docs/performance.md).
    private static let enabled = NIOLockedValueBox(false)

    static func enable() { Self.enabled.withLockedValue { $0 = true } }

    static var isEnabled: Bool { Self.enabled.withLockedValue { $0 } }

    static func run<T, Failure: Error>(_ name: String, kind: SpanKind = .internal, _ body: () async throws(Failure) -> T) async throws(Failure) -> T {
        guard Self.isEnabled else { return try await body() }
        let span = startSpan(name, ofKind: kind)
        defer { span.end() }
        let result: Result<T, Failure> = await InstrumentationContext.$current.withValue(span.context) {
            do throws(Failure) {
                return .success(try await body())
            } catch {
                return .failure(error)
            }
        }
        switch result {
        case .success(let value):
            return value
        case .failure(let error):
            span.setStatus(SpanStatus(code: .error))
            if let code = Self.code(of: error) { span.updateAttributes { $0["formattest.error.code"] = code } }
            throw error
        }
    }

    /// The same for a call that throws a ``StoreError`` (the stores' typed throws).
    static func store<T>(_ operation: String, _ body: () async throws(StoreError) -> T) async throws(StoreError) -> T {
        guard Self.isEnabled else { return try await body() }
        let span = startSpan("store \(operation)", ofKind: .client)
        span.updateAttributes { $0["db.operation.name"] = operation }
        defer { span.end() }
        do {
            return try await body()
        } catch {
            span.setStatus(SpanStatus(code: .error))
            span.updateAttributes { $0["formattest.error.code"] = error.code.identifier }
            throw error
        }
    }

    private static func code(of error: any Error) -> String? {
        switch error {
        case let error as APIError: return error.code
        case let error as FlowError: return error.code.identifier
        case let error as StoreError: return error.code.identifier
        default: return nil
        }
    }
}

/// The store with a client span around each call (``TraceStep/store(_:_:)``): a request's trace
/// shows each read and each commit with its duration. Its attributes name the operation only,
/// never a key id, a username or a form hash.
struct TracedStore: OperationalAttestationStore {
    let base: any OperationalAttestationStore

    func loadKey(keyID: [UInt8]) async throws(StoreError) -> StoredKey? {
        try await TraceStep.store("loadKey") { () async throws(StoreError) in try await self.base.loadKey(keyID: keyID) }
    }
    func requireReattestation(keyID: [UInt8]) async throws(StoreError) {
        try await TraceStep.store("requireReattestation") { () async throws(StoreError) in try await self.base.requireReattestation(keyID: keyID) }
    }
    func keys(username: String) async throws(StoreError) -> [StoredKey] {
        try await TraceStep.store("keys") { () async throws(StoreError) in try await self.base.keys(username: username) }
    }
    func countKeys(username: String, _ filter: KeyCountFilter) async throws(StoreError) -> Int {
        try await TraceStep.store("countKeys") { () async throws(StoreError) in try await self.base.countKeys(username: username, filter) }
    }
    func replaceReceipt(keyID: [UInt8], previous: [UInt8], with receipt: [UInt8]) async throws(StoreError) -> Bool {
        try await TraceStep.store("replaceReceipt") { () async throws(StoreError) in
            try await self.base.replaceReceipt(keyID: keyID, previous: previous, with: receipt)
        }
    }
    func issueChallenge(_ challenge: IssuedChallenge) async throws(StoreError) {
        try await TraceStep.store("issueChallenge") { () async throws(StoreError) in try await self.base.issueChallenge(challenge) }
    }
    func isFormHashRecorded(_ formHash: [UInt8], now: Date) async throws(StoreError) -> Bool {
        try await TraceStep.store("isFormHashRecorded") { () async throws(StoreError) in try await self.base.isFormHashRecorded(formHash, now: now) }
    }
    func commitRegistration(_ commit: RegistrationCommit) async throws(StoreError) {
        try await TraceStep.store("commitRegistration") { () async throws(StoreError) in try await self.base.commitRegistration(commit) }
    }
    func commitAssertion(_ commit: AssertionCommit) async throws(StoreError) {
        try await TraceStep.store("commitAssertion") { () async throws(StoreError) in try await self.base.commitAssertion(commit) }
    }
    func revokeKey(keyID: [UInt8], at date: Date) async throws(StoreError) {
        try await TraceStep.store("revokeKey") { () async throws(StoreError) in try await self.base.revokeKey(keyID: keyID, at: date) }
    }
    func keys(username: String, after position: KeyPosition?, limit: Int) async throws(StoreError) -> [StoredKey] {
        try await TraceStep.store("keys") { () async throws(StoreError) in try await self.base.keys(username: username, after: position, limit: limit)
        }
    }
    func loadPasskey(credentialID: [UInt8]) async throws(StoreError) -> StoredPasskey? {
        try await TraceStep.store("loadPasskey") { () async throws(StoreError) in try await self.base.loadPasskey(credentialID: credentialID) }
    }
    func passkeys(username: String) async throws(StoreError) -> [StoredPasskey] {
        try await TraceStep.store("passkeys") { () async throws(StoreError) in try await self.base.passkeys(username: username) }
    }
    func passkeyCredentials(username: String) async throws(StoreError) -> PasskeyCredentials {
        try await TraceStep.store("passkeyCredentials") { () async throws(StoreError) in try await self.base.passkeyCredentials(username: username) }
    }
    func countPasskeys(username: String, _ filter: KeyCountFilter) async throws(StoreError) -> Int {
        try await TraceStep.store("countPasskeys") { () async throws(StoreError) in try await self.base.countPasskeys(username: username, filter) }
    }
    func commitPasskeyRegistration(_ commit: PasskeyRegistrationCommit) async throws(StoreError) {
        try await TraceStep.store("commitPasskeyRegistration") { () async throws(StoreError) in try await self.base.commitPasskeyRegistration(commit)
        }
    }
    func revokePasskey(credentialID: [UInt8], at date: Date) async throws(StoreError) {
        try await TraceStep.store("revokePasskey") { () async throws(StoreError) in
            try await self.base.revokePasskey(credentialID: credentialID, at: date)
        }
    }
    func passkeys(username: String, after position: KeyPosition?, limit: Int) async throws(StoreError) -> [StoredPasskey] {
        try await TraceStep.store("passkeysPage") { () async throws(StoreError) in
            try await self.base.passkeys(username: username, after: position, limit: limit)
        }
    }
    func countRequest(in window: RateLimitWindow) async throws(StoreError) -> Int {
        try await TraceStep.store("countRequest") { () async throws(StoreError) in try await self.base.countRequest(in: window) }
    }
    func refundRequest(in window: RateLimitWindow) async throws(StoreError) {
        try await TraceStep.store("refundRequest") { () async throws(StoreError) in try await self.base.refundRequest(in: window) }
    }
    func recordFormHash(_ record: ReplayRecord, now: Date) async throws(StoreError) {
        try await TraceStep.store("recordFormHash") { () async throws(StoreError) in try await self.base.recordFormHash(record, now: now) }
    }
    func purgeExpired(now: Date, limit: Int) async throws(StoreError) -> PurgeStep {
        try await TraceStep.store("purgeExpired") { () async throws(StoreError) in try await self.base.purgeExpired(now: now, limit: limit) }
    }
    func purgeRevoked(before cutoff: Date, limit: Int) async throws(StoreError) -> PurgeStep {
        try await TraceStep.store("purgeRevoked") { () async throws(StoreError) in try await self.base.purgeRevoked(before: cutoff, limit: limit) }
    }
    func shutdown() async {
        await self.base.shutdown()
    }
}

/// Reads W3C trace context fields from a request's headers.
private struct HTTPFieldsExtractor: Extractor {
    func extract(key: String, from carrier: HTTPFields) -> String? {
        guard let name = HTTPField.Name(key) else { return nil }
        return carrier[name]
    }
}

/// Collects what the instrument would send (the span's `traceparent`).
private struct DictionaryInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) {
        carrier[key] = value
    }
}
