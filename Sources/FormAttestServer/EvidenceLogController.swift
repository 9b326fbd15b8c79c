//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import Hummingbird
import Logging
import TransparencyLog

/// The evidence log's public endpoints: its latest checkpoint and the proofs against it. They
/// show hashes only (never a record): anyone holding a record, a checkpoint and the log's
/// verifier key can check that the record is in the log and that the log only grew.
///
/// - `GET /api/evidence/checkpoint`: the signed checkpoint of the committed tree (C2SP
///   tlog-checkpoint in a C2SP signed note), `text/plain`.
/// - `GET /api/evidence/proof/inclusion?index=I&size=N`: the inclusion proof of leaf `I` in the
///   tree of `N` leaves.
/// - `GET /api/evidence/proof/consistency?first=M&second=N`: the consistency proof between two
///   tree sizes.
struct EvidenceLogController {
    let log: EvidenceLog

    func addRoutes(to group: RouterGroup<AppRequestContext>) {
        group.get("checkpoint", use: self.checkpoint)
        group.get("proof/inclusion", use: self.inclusion)
        group.get("proof/consistency", use: self.consistency)
    }

    @Sendable func checkpoint(_ request: Request, context: AppRequestContext) async throws -> Response {
        _ = try QueryParameters(request)
        let note: String
        do {
            note = try await self.log.checkpoint()
        } catch {
            context.logger.error("evidence checkpoint not signed", metadata: ["reason": "\(error)"])
            throw APIError.evidenceLogUnavailable
        }
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; charset=utf-8"
        headers[.cacheControl] = "no-store"
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: note)))
    }

    @Sendable func inclusion(_ request: Request, context: AppRequestContext) async throws -> Response {
        let query = try QueryParameters(request)
        let index = try Self.number(query, "index")
        let size = try Self.number(query, "size")
        try await self.checkRange(index < size, size, "leaf \(index) is not in a committed tree of \(size) leaves", context: context)
        let proof = try await self.proof({ try await self.log.inclusionProof(index: index, size: size) }, context: context)
        return Self.answer([("index", index), ("size", size)], proof)
    }

    @Sendable func consistency(_ request: Request, context: AppRequestContext) async throws -> Response {
        let query = try QueryParameters(request)
        let first = try Self.number(query, "first")
        let second = try Self.number(query, "second")
        try await self.checkRange(first <= second, second, "no committed tree of \(second) leaves extends one of \(first)", context: context)
        let proof = try await self.proof({ try await self.log.consistencyProof(first: first, second: second) }, context: context)
        return Self.answer([("first", first), ("second", second)], proof)
    }

    /// Refuses a proof unless `ordered` and `size` is committed.
    private func checkRange(_ ordered: Bool, _ size: UInt64, _ message: String, context: AppRequestContext) async throws {
        let committed: UInt64
        do {
            committed = try await self.log.size(atLeast: size)
        } catch {
            context.logger.error("evidence log not brought up to date", metadata: ["reason": "\(error)"])
            throw APIError.evidenceLogUnavailable
        }
        guard ordered, size <= committed else { throw APIError.evidenceLogRange(message) }
    }

    private func proof(_ make: () async throws -> [[UInt8]], context: AppRequestContext) async throws -> [[UInt8]] {
        do {
            return try await make()
        } catch {
            context.logger.error("evidence proof not made", metadata: ["reason": "\(error)"])
            throw APIError.evidenceLogUnavailable
        }
    }

    /// A decimal parameter without sign or leading zero, at most 2⁶³ − 1.
    private static func number(_ query: QueryParameters, _ name: String) throws(APIError) -> UInt64 {
        guard let text = query.get(name) else { throw APIError.invalidQuery("the query string must name \(name)") }
        let digits = Array(text.utf8)
        guard !digits.isEmpty, digits.count <= 19, digits.allSatisfy({ (0x30...0x39).contains($0) }), digits.count == 1 || digits[0] != 0x30,
            let value = UInt64(text), value <= MerkleProof.maximumSize
        else { throw APIError.invalidQuery("\(name) must be a decimal number from 0 to 2^63 - 1, without sign or leading zero") }
        return value
    }

    private static func answer(_ numbers: [(String, UInt64)], _ proof: [[UInt8]]) -> Response {
        var members: [(name: String, value: JSONValue)] = numbers.map { ($0.0, .number(Double($0.1))) }
        members.append(("hashes", .array(proof.map { .string(JSONString(StrictBase64.encode($0))) })))
        return JSONResponse.make(.object(JSONObject(constantMembers: members)))
    }
}
