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

    /// One of the flows' requests (`FormFlows.AttestRequest(body:)`, ...), decoded by the flows'
    /// rules; a bad field is 400 with its code.
    func decode<Decoded>(_ decode: (JSONValue) throws(FlowError) -> Decoded) throws(APIError) -> Decoded {
        do {
            return try decode(self.value)
        } catch {
            throw APIError(error)
        }
    }

    /// The body as the caller identity reads it. With an identity provider's token the user is
    /// the token's: a `username` in the body is optional and must be the token's (403
    /// `identity_mismatch`), and the flows see the token's user. A trusted backend's (or an
    /// unauthenticated) request keeps its own `username`.
    func acting(for identity: CallerIdentity?) throws(APIError) -> RequestBody {
        guard let identity, identity.kind == .identityProvider, case .object(let object) = self.value else { return self }
        let requested = self.value["username"]
        if let requested, requested.stringValue == nil { throw APIError.invalidRequest("username must be a string") }
        let user: String?
        do {
            user = try identity.user(requested: requested?.stringValue)
        } catch {
            throw APIError(error)
        }
        guard let user else { return self }
        var members = object.members.filter { $0.name.string != "username" }.map { (name: $0.name.string, value: $0.value) }
        members.append((name: "username", value: .string(JSONString(user))))
        // Names from the input: the throwing initializer (they were unique when parsed).
        guard let rebuilt = try? JSONObject(members) else { throw APIError.invalidRequest("the body's member names are not unique") }
        return RequestBody(value: .object(rebuilt))
    }

    // The inspect and dev-simulator routes' own fields, by the same rules.

    private var fields: FormFlows.RequestFields { FormFlows.RequestFields(self.value) }

    /// A binary field, in base64url or standard base64.
    func bytes(_ name: String) throws(APIError) -> [UInt8] {
        try self.decode { _ throws(FlowError) in try self.fields.bytes(name) }
    }

    func optionalBytes(_ name: String) throws(APIError) -> [UInt8]? {
        try self.decode { _ throws(FlowError) in try self.fields.optionalBytes(name) }
    }

    /// The `form` object, as the canonical bytes the flows parse again.
    func form() throws(APIError) -> [UInt8] {
        try self.decode { _ throws(FlowError) in try self.fields.form() }
    }
}
