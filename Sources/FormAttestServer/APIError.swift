//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
public import FormAttestFlows
import FormAttestForm
import Foundation
import RFC3339
public import HTTPTypes
public import Hummingbird

/// The only error that reaches clients: `{error: {code, message}, next_challenge?}` with the
/// status of its category. Every status decision is made here.
public struct APIError: HTTPResponseError, Sendable {
    public let status: HTTPResponse.Status
    public let code: String
    public let message: String
    public let nextChallenge: IssuedChallenge?
    /// Extra response headers (`Retry-After`, `WWW-Authenticate`).
    public let headers: HTTPFields

    public init(status: HTTPResponse.Status, code: String, message: String, nextChallenge: IssuedChallenge? = nil, headers: HTTPFields = [:]) {
        self.status = status
        self.code = code
        self.message = message
        self.nextChallenge = nextChallenge
        self.headers = headers
    }

    /// The one mapping from flow outcomes to HTTP statuses.
    public init(_ error: FlowError) {
        let status: HTTPResponse.Status
        switch error.category {
        case .malformedInput: status = .badRequest
        case .verificationFailed, .keyMismatch: status = .unauthorized
        case .callerMismatch: status = .forbidden
        case .conflict: status = .conflict
        case .policy: status = .unprocessableContent
        case .requiresReattestation: status = .init(code: 428, reasonPhrase: "Precondition Required")
        case .storeUnavailable: status = .serviceUnavailable
        case .upstreamUnavailable: status = .badGateway
        }
        // A store's failure is reported by its code alone: its reason names the store's
        // internals (statements, files, hosts), which the caller has no use for (the log has it).
        let message = error.category == .storeUnavailable ? Self.storeUnavailableMessage : error.reason
        self.init(status: status, code: error.code.identifier, message: message, nextChallenge: error.nextChallenge)
    }

    static let storeUnavailableMessage = "the store is unavailable; nothing was changed; retry later"

    /// A username from a body or a query string, by ``Username``'s rule.
    static func checkUsername(_ username: String) throws(APIError) {
        if let problem = Username.problem(username) { throw APIError.invalidRequest(problem) }
    }

    static func invalidRequest(_ message: String) -> APIError {
        APIError(status: .badRequest, code: "invalid_request", message: message)
    }

    // Both close the connection: the rest of the body is not read.
    static let requestTimeout = APIError(
        status: .requestTimeout, code: "request_timeout", message: "the request body did not arrive in time", headers: [.connection: "close"]
    )
    static let bodyTooLarge = APIError(
        status: .contentTooLarge, code: "body_too_large", message: "the request body is larger than 64 KiB", headers: [.connection: "close"]
    )

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        var members: [(name: String, value: JSONValue)] = [
            ("error", .object(JSONObject(constantMembers: [("code", .string(JSONString(self.code))), ("message", .string(JSONString(self.message)))])))
        ]
        if let next = self.nextChallenge {
            members.append(("next_challenge", JSONResponse.challenge(next)))
        }
        var response = JSONResponse.make(.object(JSONObject(constantMembers: members)), status: self.status)
        response.headers.append(contentsOf: self.headers)
        return response
    }
}

/// JSON responses, serialized with RFC 8785.
enum JSONResponse {
    static func make(_ value: JSONValue, status: HTTPResponse.Status = .ok) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        headers[.cacheControl] = "no-store"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: value.canonicalBytes)))
    }

    static func challenge(_ challenge: IssuedChallenge) -> JSONValue {
        .object(
            JSONObject(constantMembers: [
                ("challenge", .string(JSONString(Base64URL.encode(challenge.value)))),
                ("purpose", .string(JSONString(challenge.purpose.rawValue))),
                ("expiresAt", .string(JSONString(RFC3339UTC.format(challenge.expiresAt)))),
            ])
        )
    }
}
