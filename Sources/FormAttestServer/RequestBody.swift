//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import FormAttestClient
import Foundation
import Hummingbird
import NIOCore

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
        }
        let value: JSONValue
        do {
            value = try CanonicalJSON.parse(buffer.readableBytesView, limits: .init(maximumSize: context.maxUploadSize, maximumDepth: 32))
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
