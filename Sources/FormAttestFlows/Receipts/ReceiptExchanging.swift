//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest

/// Apple's receipt exchange ("Assessing fraud risk"): a stored receipt is traded for a newer one
/// whose field 17 is the risk metric (how many attested keys this device has for the app in the
/// last 30 days). The flows depend on this protocol; the HTTP client that talks to Apple is an
/// adapter (`AppleReceiptExchangeClient`).
public protocol ReceiptExchanging: Sendable {
    /// Sends `receipt` to the exchange for `environment`.
    func exchange(_ receipt: [UInt8], environment: AppAttestEnvironment) async throws(ReceiptExchangeError) -> ReceiptExchangeResponse
}

/// What the exchange answered.
public enum ReceiptExchangeResponse: Sendable, Hashable {
    /// 200: a new receipt (type RECEIPT, with a risk metric).
    case newReceipt([UInt8])
    /// 304: asked before the previous receipt's "not before" time; keep using it.
    case notModified
}

/// Why the exchange did not answer with a receipt. Nothing was stored.
public struct ReceiptExchangeError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Backing: String, Hashable, Sendable, CaseIterable {
            case unavailable = "receipt_exchange_unavailable"
            case unauthorized = "receipt_exchange_unauthorized"
            case rateLimited = "receipt_exchange_rate_limited"
            case rejected = "receipt_exchange_rejected"
            case malformedResponse = "receipt_exchange_malformed_response"
        }

        fileprivate let backing: Backing
        fileprivate init(_ backing: Backing) { self.backing = backing }

        /// Every code of the exchange (the error table in docs/errors.md is generated from them).
        public static var allCases: [Code] { Backing.allCases.map(Code.init) }

        /// The stable `snake_case` identifier, such as `receipt_exchange_unavailable`.
        public var identifier: String { self.backing.rawValue }
        public var description: String { self.backing.rawValue }

        /// Not reachable, timed out, or a 5xx.
        public static let unavailable = Code(.unavailable)
        /// 401/403: the JWT (team id, key id, signature, age) was refused.
        public static let unauthorized = Code(.unauthorized)
        /// 429: too many requests.
        public static let rateLimited = Code(.rateLimited)
        /// 400 or another refusal of the receipt itself.
        public static let rejected = Code(.rejected)
        /// A 200 whose body is not a base64 receipt.
        public static let malformedResponse = Code(.malformedResponse)
    }

    public let code: Code
    /// The HTTP status, when there was one.
    public let status: Int?
    public let reason: String

    public init(code: Code, status: Int? = nil, reason: String) {
        self.code = code
        self.status = status
        self.reason = reason
    }

    public var description: String { "\(self.code.identifier): \(self.reason)" }
}
