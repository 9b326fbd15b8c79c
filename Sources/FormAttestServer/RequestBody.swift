//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import FormAttestClient
import Foundation
import Hummingbird
import NIOCore
import NIOHTTP1

/// A JSON request body read with the strict RFC 8785 parser, never a lenient decoder: a body
/// (and so a `form`) with duplicate names or lone surrogates is refused as a whole.
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
            throw APIError(status: .badRequest, code: "malformed_request", message: "the request is not valid HTTP/1.1: \(error)")
        }
        let value: JSONValue
        do {
            // Numbers exact: the form inside is canonicalized from this parse, so a number rounded
            // here would reach the flows already rounded (and verify as a value nobody wrote).
            value = try CanonicalJSON.parse(
                buffer.readableBytesView,
                limits: .init(maximumSize: context.maxUploadSize, maximumDepth: 32, exactNumbers: true)
            )
        } catch where error.code == .inexactNumber {
            throw APIError(status: .badRequest, code: FormError.Code.inexactNumber.identifier, message: error.description)
        } catch {
            throw APIError(status: .badRequest, code: "invalid_json", message: error.description)
        }
        guard case .object = value else { throw APIError.invalidRequest("the body must be a JSON object") }
        return RequestBody(value: value)
    }

    func string(_ name: String, maximumLength: Int = 256) throws -> String {
        guard let text = self.value[name]?.stringValue, !text.isEmpty, text.utf8.count <= maximumLength else {
            throw APIError.invalidRequest("\(name) must be a non-empty string of at most \(maximumLength) bytes")
        }
        return text
    }

    /// The `username` field, by ``Username``'s rule (no control characters: 400 `invalid_request`).
    func username() throws -> String {
        guard let text = self.value["username"]?.stringValue else {
            throw APIError.invalidRequest("username must be a string")
        }
        try APIError.checkUsername(text)
        return text
    }

    /// A binary field, in base64url or standard base64.
    func bytes(_ name: String) throws -> [UInt8] {
        guard let text = self.value[name]?.stringValue, let bytes = Base64URL.decode(text), !bytes.isEmpty else {
            throw APIError.invalidRequest("\(name) must be base64url or base64")
        }
        return bytes
    }

    func optionalBytes(_ name: String) throws -> [UInt8]? {
        guard self.value[name] != nil, self.value[name] != .null else { return nil }
        return try self.bytes(name)
    }

    /// The `form` object, as the canonical bytes the flows parse again.
    func form() throws -> [UInt8] {
        guard let form = self.value["form"], case .object = form else {
            throw APIError.invalidRequest("form must be a JSON object")
        }
        return form.canonicalBytes
    }
}
