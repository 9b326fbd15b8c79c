//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
public import AppAttestSimulator
public import Crypto
public import Foundation
import Hummingbird
import HummingbirdTesting
import JWTKit
import NIOCore

/// A local stand-in for Apple's `POST /v1/attestationData`, at the HTTP boundary only: it checks
/// the request as Apple documents it (ES256 JWT with kid, iss and iat; a base64 receipt body)
/// and answers as the test tells it to, signing new receipts with the simulator's receipt CA.
public actor FakeAppleExchange {
    public enum Mode: Sendable {
        /// 200 with a RECEIPT for the same app and key, created now, with this risk metric.
        case issue(riskMetric: Int)
        /// 200 with a RECEIPT created this long before now.
        case issueCreated(ago: TimeInterval)
        /// 200 with a RECEIPT for another key's certificate.
        case issueForOtherCertificate([UInt8])
        /// 200 with a receipt signed by another CA.
        case issueSignedBy(SimulatedReceiptAuthority)
        /// This status and no body.
        case status(Int)
        /// 200 with a body that is not base64.
        case garbage
        /// Wait this long before answering.
        case delay(Duration)
    }

    public struct Recorded: Sendable {
        public var path: String
        public var kid: String?
        public var issuer: String?
        public var issuedAt: Date?
        public var receipt: [UInt8]?
    }

    let authority: SimulatedReceiptAuthority
    let deviceCheckKey: P256.Signing.PublicKey
    let now: Date
    public private(set) var mode: Mode = .issue(riskMetric: 2)
    public private(set) var requests: [Recorded] = []

    public init(authority: SimulatedReceiptAuthority, deviceCheckKey: P256.Signing.PublicKey, now: Date) {
        self.authority = authority
        self.deviceCheckKey = deviceCheckKey
        self.now = now
    }

    public func set(_ mode: Mode) { self.mode = mode }

    /// Runs the fake on a free local port for the duration of `body`.
    public func serve<T: Sendable>(_ body: @Sendable (_ url: String) async throws -> T) async throws -> T {
        let router = Router()
        router.post("/v1/attestationData") { request, context in
            try await self.answer(request, context: context)
        }
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        return try await app.test(.live) { client in
            guard let port = client.port else { throw HTTPError(.internalServerError) }
            return try await body("http://127.0.0.1:\(port)/v1/attestationData")
        }
    }

    private func answer(_ request: Request, context: some RequestContext) async throws -> Response {
        var recorded = Recorded(path: request.uri.path)
        defer { self.requests.append(recorded) }

        // The JWT, as Apple checks it.
        guard let token = request.headers[.authorization] else { return Response(status: .unauthorized) }
        let keys = JWTKeyCollection()
        await keys.add(ecdsa: try ES256PublicKey(backing: self.deviceCheckKey))
        let claims: FakeClaims
        do {
            claims = try await keys.verify(token, as: FakeClaims.self)
        } catch {
            return Response(status: .unauthorized)
        }
        let header = try DecodedHeader(token)
        guard header.alg == "ES256", let kid = header.kid else { return Response(status: .unauthorized) }
        recorded.kid = kid
        recorded.issuer = claims.iss.value
        recorded.issuedAt = claims.iat.value

        let body = try await request.body.collect(upTo: 64 * 1024)
        guard let bytes = Data(base64Encoded: String(buffer: body)), let old = try? AppAttestReceipt(berEncoded: Array(bytes)) else {
            return Response(status: .badRequest)
        }
        recorded.receipt = Array(bytes)

        func issue(_ change: (inout SimulatedReceiptAuthority.Content) -> Void, by authority: SimulatedReceiptAuthority? = nil) throws
            -> Response
        {
            var content = SimulatedReceiptAuthority.Content(
                appID: old.payload.appID,
                attestedCertificate: old.payload.attestedCertificateDER,
                clientHash: Array(SHA256.hash(data: bytes)),
                environment: old.payload.environment == "sandbox" ? .development : .production,
                creationTime: self.now
            )
            content.type = .receipt
            content.notBefore = self.now.addingTimeInterval(86_400)
            change(&content)
            let receipt = try (authority ?? self.authority).receipt(content)
            return Response(status: .ok, body: .init(byteBuffer: ByteBuffer(string: Data(receipt).base64EncodedString())))
        }

        switch self.mode {
        case .issue(let metric):
            return try issue { $0.riskMetric = metric }
        case .issueCreated(let ago):
            return try issue {
                $0.riskMetric = 1
                $0.creationTime = self.now.addingTimeInterval(-ago)
            }
        case .issueForOtherCertificate(let certificate):
            return try issue {
                $0.riskMetric = 1
                $0.attestedCertificate = certificate
            }
        case .issueSignedBy(let other):
            return try issue({ $0.riskMetric = 1 }, by: other)
        case .status(let code):
            return Response(status: .init(code: code))
        case .garbage:
            return Response(status: .ok, body: .init(byteBuffer: ByteBuffer(string: "this is not base64!")))
        case .delay(let duration):
            try await Task.sleep(for: duration)
            return try issue { $0.riskMetric = 1 }
        }
    }
}

struct FakeClaims: JWTPayload {
    var iss: IssuerClaim
    var iat: IssuedAtClaim
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// The JOSE header, read without verifying (the signature was checked above).
struct DecodedHeader: Decodable {
    var alg: String
    var kid: String?

    init(_ token: String) throws {
        let part = String(token.split(separator: ".").first ?? "")
        var base64 = part.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        guard let data = Data(base64Encoded: base64) else { throw HTTPError(.unauthorized) }
        self = try JSONDecoder().decode(Self.self, from: data)
    }
}
