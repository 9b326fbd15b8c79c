//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
public import AsyncHTTPClient
public import Crypto
public import FormAttestFlows
public import Foundation
import JWTKit
import NIOCore
import NIOHTTP1

/// The HTTP client for Apple's receipt exchange (`POST /v1/attestationData`).
///
/// Apple's "Assessing fraud risk": the request body is the receipt in base64, the `Authorization`
/// header is a JWT signed with ES256 by a DeviceCheck private key from the developer account
/// (header `kid` = its 10-character key id; claims `iss` = team id, `iat` = now). A 200 answers
/// with the new receipt in base64; a 304 means "not before" has not passed and the old receipt
/// stays. This machine cannot reach Apple: the client is tested against a local fake of that
/// HTTP boundary (`Tests/AppleReceiptExchangeTests`).
public struct AppleReceiptExchangeClient: ReceiptExchanging {
    /// Apple's endpoints.
    public static let productionURL = "https://data.appattest.apple.com/v1/attestationData"
    public static let developmentURL = "https://data-development.appattest.apple.com/v1/attestationData"

    /// The DeviceCheck key that signs the request's JWT.
    public struct Credentials: Sendable {
        public var teamID: String
        public var keyID: String
        public var privateKey: P256.Signing.PrivateKey

        public init(teamID: String, keyID: String, privateKey: P256.Signing.PrivateKey) {
            self.teamID = teamID
            self.keyID = keyID
            self.privateKey = privateKey
        }
    }

    /// The largest response body read (real receipts are about 4 KB; base64 adds a third).
    public static let maximumResponseSize = 64 * 1024

    let httpClient: HTTPClient
    let credentials: Credentials
    let endpoints: [AppAttestEnvironment: String]
    let timeout: TimeAmount
    let now: @Sendable () -> Date

    /// Creates a client.
    ///
    /// - Parameters:
    ///   - httpClient: the client to send with (its lifecycle is the caller's).
    ///   - credentials: the DeviceCheck key.
    ///   - endpoints: per environment; Apple's by default (tests point both at a local fake).
    ///   - timeout: for the whole request.
    ///   - now: the JWT's `iat`.
    public init(
        httpClient: HTTPClient,
        credentials: Credentials,
        endpoints: [AppAttestEnvironment: String] = [.production: Self.productionURL, .development: Self.developmentURL],
        timeout: Duration = .seconds(10),
        now: @escaping @Sendable () -> Date = Date.init
    ) {
        self.httpClient = httpClient
        self.credentials = credentials
        self.endpoints = endpoints
        self.timeout = TimeAmount(timeout)
        self.now = now
    }

    public func exchange(
        _ receipt: [UInt8],
        environment: AppAttestEnvironment
    ) async throws(ReceiptExchangeError) -> ReceiptExchangeResponse {
        guard let url = self.endpoints[environment] else {
            throw ReceiptExchangeError(code: .unavailable, reason: "no endpoint for the \(environment.rawValue) environment")
        }
        let token: String
        do {
            token = try await self.token()
        } catch {
            throw ReceiptExchangeError(code: .unauthorized, reason: "cannot sign the request's JWT: \(error)")
        }
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Authorization", value: token)
        request.headers.add(name: "Content-Type", value: "text/plain")
        request.body = .bytes(ByteBuffer(string: Data(receipt).base64EncodedString()))

        let status: Int
        let body: ByteBuffer
        do {
            let response = try await self.httpClient.execute(request, timeout: self.timeout)
            status = Int(response.status.code)
            body = try await response.body.collect(upTo: Self.maximumResponseSize)
        } catch {
            throw ReceiptExchangeError(code: .unavailable, reason: "\(url): \(error)")
        }
        switch status {
        case 200:
            let text = String(buffer: body).trimmingCharacters(in: .whitespacesAndNewlines)
            guard let bytes = Data(base64Encoded: text), !bytes.isEmpty else {
                throw ReceiptExchangeError(code: .malformedResponse, status: status, reason: "the body is not a base64 receipt")
            }
            return .newReceipt(Array(bytes))
        case 304:
            return .notModified
        case 401, 403:
            throw ReceiptExchangeError(code: .unauthorized, status: status, reason: "Apple refused the JWT (HTTP \(status))")
        case 429:
            throw ReceiptExchangeError(code: .rateLimited, status: status, reason: "too many requests (HTTP 429)")
        case 500...:
            throw ReceiptExchangeError(code: .unavailable, status: status, reason: "Apple answered HTTP \(status)")
        default:
            throw ReceiptExchangeError(code: .rejected, status: status, reason: "Apple refused the receipt (HTTP \(status))")
        }
    }

    /// The request's JWT: ES256, `kid` = key id; `iss` = team id, `iat` = now.
    func token() async throws -> String {
        let keys = JWTKeyCollection()
        let kid = JWKIdentifier(string: self.credentials.keyID)
        await keys.add(ecdsa: try ES256PrivateKey(backing: self.credentials.privateKey), kid: kid)
        let claims = ExchangeClaims(iss: IssuerClaim(value: self.credentials.teamID), iat: IssuedAtClaim(value: self.now()))
        return try await keys.sign(claims, kid: kid)
    }
}

/// The claims Apple reads.
struct ExchangeClaims: JWTPayload {
    var iss: IssuerClaim
    var iat: IssuedAtClaim

    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
