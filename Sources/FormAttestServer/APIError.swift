//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
public import FormAttestFlows
import FormAttestForm
public import FormAttestResponses
import Foundation
public import HTTPTypes
public import Hummingbird

/// The only error that reaches clients: `{error: {code, message}, next_challenge?}` with the
/// status of its category. Every status decision is made in this file: the flows' errors by
/// their category (``init(_:)-(FlowError)``), caller authentication's by its code, and the HTTP
/// layer's own errors as the named values below. The memberwise initializer is private, so no
/// other file can choose a status; an adapter that meets a form or store error converts it to a
/// `FlowError` first.
public struct APIError: HTTPResponseError, Sendable {
    public let status: HTTPResponse.Status
    public let code: String
    public let message: String
    public let nextChallenge: IssuedChallenge?
    /// Extra response headers (`Retry-After`, `WWW-Authenticate`).
    public let headers: HTTPFields

    private init(status: HTTPResponse.Status, code: String, message: String, nextChallenge: IssuedChallenge? = nil, headers: HTTPFields = [:]) {
        self.status = status
        self.code = code
        // Libraries' error descriptions (SwiftASN1's, swift-certificates') end with the source
        // location that threw (`SwiftASN1/ObjectIdentifier.swift:41`): the client has no use for
        // it, and it names the service's dependencies; the log keeps it (r3 F7).
        self.message = Self.withoutSourceLocations(message)
        self.nextChallenge = nextChallenge
        self.headers = headers
    }

    /// The one mapping from flow outcomes to HTTP statuses.
    public init(_ error: FlowError) {
        let status: HTTPResponse.Status
        switch error.category {
        case .malformedInput: status = .badRequest
        case .verificationFailed, .keyMismatch: status = .unauthorized
        case .callerMismatch, .factorMissing: status = .forbidden
        case .conflict: status = .conflict
        case .policy: status = .unprocessableContent
        case .requiresReattestation: status = .init(code: 428, reasonPhrase: "Precondition Required")
        case .storeUnavailable: status = .serviceUnavailable
        case .upstreamUnavailable: status = .badGateway
        case .rateLimited: status = .tooManyRequests
        }
        // A store's failure is reported by its code alone: its reason names the store's
        // internals (statements, files, hosts), which the caller has no use for (the log has it).
        let message = error.category == .storeUnavailable ? Self.storeUnavailableMessage : error.reason
        let headers: HTTPFields = error.retryAfter.map { [.retryAfter: String($0)] } ?? [:]
        self.init(status: status, code: error.code.identifier, message: message, nextChallenge: error.nextChallenge, headers: headers)
    }

    /// `text` without the words that are a Swift source location (`Module/File.swift:41`, with
    /// any closing punctuation after it).
    static func withoutSourceLocations(_ text: String) -> String {
        guard text.contains(".swift:") else { return text }
        return text.split(separator: " ", omittingEmptySubsequences: false).filter { !Self.isSourceLocation($0) }.joined(separator: " ")
    }

    /// `File.swift:41`, `Module/File.swift:41`, `File.swift:41)` or `File.swift:41;`.
    static func isSourceLocation(_ word: Substring) -> Bool {
        var core = word
        while let last = core.last, ")],;.".contains(last) { core = core.dropLast() }
        guard let colon = core.lastIndex(of: ":") else { return false }
        let line = core[core.index(after: colon)...]
        return core[..<colon].hasSuffix(".swift") && !line.isEmpty && line.allSatisfy { $0.isASCII && $0.isNumber }
    }

    /// Caller authentication's outcomes: 401, 403, or 503 when the identity provider's keys are
    /// unavailable (fail closed). The 401 carries a `WWW-Authenticate` challenge.
    init(_ error: CallerAuthenticationError) {
        switch error.code {
        case .identityMismatch:
            self.init(status: .forbidden, code: error.code.identifier, message: error.reason)
        case .identityProviderUnavailable:
            self.init(status: .serviceUnavailable, code: error.code.identifier, message: error.reason)
        default:
            self.init(status: .unauthorized, code: error.code.identifier, message: error.reason, headers: [.wwwAuthenticate: "Bearer"])
        }
    }

    static let storeUnavailableMessage = "the store is unavailable; nothing was changed; retry later"

    /// A username from a body or a query string, by ``Username``'s rule.
    static func checkUsername(_ username: String) throws(APIError) {
        if let problem = Username.problem(username) { throw APIError.invalidRequest(problem) }
    }

    static func invalidRequest(_ message: String) -> APIError {
        APIError(status: .badRequest, code: "invalid_request", message: message)
    }

    /// The inspector's answer would be larger than it sends.
    static func inspectionTooLarge(_ size: Int, atLeast: Bool = false) -> APIError {
        APIError(
            status: .unprocessableContent, code: "inspection_too_large",
            message:
                "the inspection's answer is \(atLeast ? "at least " : "")\(size) bytes, over the \(InspectionGate.maximumAnswerSize) the service sends; use formattest inspect locally"
        )
    }

    /// A form too large for its evidence record to be one entry of the evidence log.
    static func formTooLargeForEvidenceLog(_ size: Int, limit: Int) -> APIError {
        APIError(
            status: .contentTooLarge, code: "form_too_large",
            message: "the form is \(size) bytes; with the evidence log on, a form may hold at most \(limit) bytes (its record must fit one log entry)"
        )
    }

    /// A proof asked of the evidence log for a leaf or tree size it has not committed.
    static func evidenceLogRange(_ message: String) -> APIError {
        APIError(status: .badRequest, code: "evidence_log_range", message: message)
    }

    /// The evidence log cannot answer: its copy of a shared log stopped at a batch it refused, or
    /// its files failed (the reason is logged).
    static let evidenceLogUnavailable = APIError(
        status: .serviceUnavailable, code: "evidence_log_unavailable",
        message: "the evidence log cannot answer now (the service's log names the reason); retry later")

    /// A query string that is not strictly percent-encoded UTF-8, or names a parameter twice.
    static func invalidQuery(_ message: String) -> APIError {
        APIError(status: .badRequest, code: "invalid_query", message: message)
    }

    // Both close the connection: the rest of the body is not read.
    static let requestTimeout = APIError(
        status: .requestTimeout, code: "request_timeout", message: "the request body did not arrive in time", headers: [.connection: "close"]
    )
    static let bodyTooLarge = APIError(
        status: .contentTooLarge, code: "body_too_large", message: "the request body is larger than 64 KiB", headers: [.connection: "close"]
    )

    /// 429 with `Retry-After`.
    static func rateLimited(retryAfter seconds: Int, reason: String) -> APIError {
        APIError(status: .tooManyRequests, code: "rate_limited", message: reason, headers: [.retryAfter: String(seconds)])
    }

    /// A request that is not valid HTTP/1.1 (bad chunked encoding, ...): the client's fault.
    static func malformedRequest(_ detail: String) -> APIError {
        APIError(status: .badRequest, code: "malformed_request", message: "the request is not valid HTTP/1.1: \(detail)")
    }

    /// The server framework's own HTTP errors, with their status: `not_found` (404),
    /// `method_not_allowed` (405), `body_too_large` (413), `http_error` for any other.
    static func framework(status: HTTPResponse.Status, message: String?) -> APIError {
        switch status {
        case .contentTooLarge: return .bodyTooLarge
        case .notFound: return APIError(status: status, code: "not_found", message: message ?? status.reasonPhrase)
        case .methodNotAllowed: return APIError(status: status, code: "method_not_allowed", message: message ?? status.reasonPhrase)
        default: return APIError(status: status, code: "http_error", message: message ?? status.reasonPhrase)
        }
    }

    /// 507: the disk that holds the store or the evidence is below its free-space threshold; no
    /// new form is taken until an operator makes room (nothing was changed).
    static let insufficientStorage = APIError(
        status: .init(code: 507, reasonPhrase: "Insufficient Storage"), code: "insufficient_storage",
        message: "the service is low on storage and takes no new forms; nothing was changed; retry later"
    )

    /// An unexpected error: 500, saying nothing internal (the log has it).
    // swift-format-ignore: DontRepeatTypeInStaticProperties
    static let internalError = APIError(status: .internalServerError, code: "internal_error", message: "internal error")

    /// Admin API: no key has this keyId.
    static let unknownKey = APIError(status: .notFound, code: "unknown_key", message: "no key has this keyId")
    static let unknownPasskey = APIError(status: .notFound, code: "unknown_passkey", message: "no passkey has this credential id")

    /// Dev simulator only: the simulated device could not produce the request.
    static func simulatorError(_ message: String) -> APIError {
        APIError(status: .badRequest, code: "simulator_error", message: message)
    }

    /// Dev simulator only: a keyId the simulated device does not hold (DeviceCheck's
    /// `invalidKey`): its keys live in memory, so after a server restart every key a page
    /// remembers is unknown, and the page must attest a new one.
    static let simulatorUnknownKey = APIError(
        status: .notFound,
        code: "simulator_unknown_key",
        message: "the simulated device holds no key with this keyId (it keeps its keys in memory, so a server restart forgets them): attest a new key"
    )

    /// The body, `ErrorResponse`.
    public var body: ErrorResponse {
        ErrorResponse(code: self.code, message: self.message, nextChallenge: self.nextChallenge)
    }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        var response = try JSONResponse.make(self.body, status: self.status)
        response.headers.append(contentsOf: self.headers)
        return response
    }
}

/// JSON responses: a typed ``APIResponse`` serialized with RFC 8785.
enum JSONResponse {
    static func make(_ body: some APIResponse, status: HTTPResponse.Status = .ok) throws -> Response {
        Self.make(bytes: try body.canonicalBytes(), status: status)
    }

    /// Bytes already RFC 8785 (the inspector's view, the JWKS).
    static func make(_ value: JSONValue, status: HTTPResponse.Status = .ok) -> Response {
        Self.make(bytes: value.canonicalBytes, status: status)
    }

    /// A value's RFC 8785 bytes, already serialized.
    static func make(canonicalBytes: [UInt8], status: HTTPResponse.Status = .ok) -> Response {
        Self.make(bytes: canonicalBytes, status: status)
    }

    private static func make(bytes: [UInt8], status: HTTPResponse.Status) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        headers[.cacheControl] = "no-store"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }
}
