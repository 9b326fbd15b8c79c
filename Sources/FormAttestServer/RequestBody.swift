//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import FormAttestFlows
import Foundation
import Hummingbird
import NIOCore
import NIOHTTP1

/// A JSON request body: collected here (the transport's errors), then parsed and read by the
/// flows' own decoding (``FormFlows/parseBody(_:maximumSize:)``, ``FormFlows/RequestFields``),
/// the strict RFC 8785 parser, never a lenient decoder: a body (and so a `form`) with duplicate
/// names or lone surrogates is refused as a whole.
struct RequestBody {
    let value: JSONValue
    /// The user an identity provider's token names, who acts for the request
    /// (``acting(for:)``); `nil`: the body's `username`.
    private(set) var actingUser: String?

    static func read(_ request: Request, context: AppRequestContext) async throws -> RequestBody {
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: context.maxUploadSize)
        } catch is NIOTooManyBytesError {
            throw APIError.bodyTooLarge
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw APIError.bodyTooLarge
        } catch let error as HTTPParserError {
            throw APIError.malformedRequest("\(error)")
        }
        do {
            return RequestBody(value: try FormFlows.parseBody(buffer.readableBytesView, maximumSize: context.maxUploadSize))
        } catch {
            throw APIError(error)
        }
    }

    /// One of the flows' requests (`FormFlows.AttestRequest(body:actingUser:)`, ...), decoded by
    /// the flows' rules, for the acting user; a bad field is 400 with its code.
    func decode<Decoded>(_ decode: (JSONValue, String?) throws(FlowError) -> Decoded) throws(APIError) -> Decoded {
        do {
            return try decode(self.value, self.actingUser)
        } catch {
            throw APIError(error)
        }
    }

    /// The body as the caller identity reads it. With an identity provider's token the user is
    /// the token's: a `username` in the body is optional and must be the token's (403
    /// `identity_mismatch`), and the flows are given the token's user as a value
    /// (``actingUser``), the body unchanged. A trusted backend's (or an unauthenticated) request
    /// keeps its own `username`.
    func acting(for identity: CallerIdentity?) throws(APIError) -> RequestBody {
        guard let identity, identity.kind == .identityProvider else { return self }
        let requested = self.value["username"]
        if let requested, requested.stringValue == nil { throw APIError.invalidRequest("username must be a string") }
        var acting = self
        do {
            acting.actingUser = try identity.user(requested: requested?.stringValue)
        } catch {
            throw APIError(error)
        }
        return acting
    }

    // The inspect and dev-simulator routes' own fields, by the same rules.

    private var fields: FormFlows.RequestFields { FormFlows.RequestFields(self.value, actingUser: self.actingUser) }

    /// A binary field, in base64url or standard base64.
    func bytes(_ name: String) throws(APIError) -> [UInt8] {
        try self.decode { _, _ throws(FlowError) in try self.fields.bytes(name) }
    }

    func optionalBytes(_ name: String) throws(APIError) -> [UInt8]? {
        try self.decode { _, _ throws(FlowError) in try self.fields.optionalBytes(name) }
    }

    /// The `form` object, as the canonical bytes the flows parse again.
    func form() throws(APIError) -> [UInt8] {
        try self.decode { _, _ throws(FlowError) in try self.fields.form() }
    }
}
