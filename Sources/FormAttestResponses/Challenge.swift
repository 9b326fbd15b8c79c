//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import CanonicalJSON
public import FormAttestFlows
import FormAttestForm
import RFC3339

/// `GET /api/appattest/challenge`'s answer, and `next_challenge` in other answers.
public struct ChallengeResponse: APIResponse, Hashable {
    public static let schemaName = "Challenge"

    /// 32 random bytes, base64url.
    public var challenge: String
    /// `form` or `pool`.
    public var purpose: String
    /// RFC 3339 UTC, milliseconds.
    public var expiresAt: String

    public init(_ challenge: IssuedChallenge) {
        self.challenge = Base64URL.encode(challenge.value)
        self.purpose = challenge.purpose.rawValue
        self.expiresAt = RFC3339UTC.format(challenge.expiresAt)
    }

    /// Built member by member, as ``AssertedResponse`` carries it (ResponseConformanceTests holds
    /// it equal to the `Encodable` encoding).
    public func jsonValue() -> JSONValue {
        .object(
            JSONObject(constantMembers: [
                ("challenge", .string(JSONString(self.challenge))), ("purpose", .string(JSONString(self.purpose))),
                ("expiresAt", .string(JSONString(self.expiresAt))),
            ])
        )
    }
}

/// Every error answer: `{error: {code, message}, next_challenge?}`.
public struct ErrorResponse: APIResponse, Hashable {
    public static let schemaName = "Error"

    public struct Detail: Encodable, Sendable, Hashable {
        public var code: String
        public var message: String

        public init(code: String, message: String) {
            self.code = code
            self.message = message
        }
    }

    public var error: Detail
    /// A fresh challenge for the retry, when the configuration rotates challenges.
    public var nextChallenge: ChallengeResponse?

    public init(code: String, message: String, nextChallenge: IssuedChallenge? = nil) {
        self.error = Detail(code: code, message: message)
        self.nextChallenge = nextChallenge.map(ChallengeResponse.init)
    }

    enum CodingKeys: String, CodingKey {
        case error
        case nextChallenge = "next_challenge"
    }
}

/// `GET /healthz`'s answer: `ok` or `store_unavailable`.
public struct HealthResponse: APIResponse, Hashable {
    public static let schemaName = "Health"

    /// `ok`, `store_unavailable`, or `insufficient_storage` (no new form is taken).
    public var status: String
    /// With `insufficient_storage`: the directory whose filesystem is low.
    public var path: String?
    /// With `insufficient_storage`: the bytes available there (absent: it could not be examined).
    public var availableBytes: UInt64?
    /// With `insufficient_storage`: the threshold (`min-free-space`).
    public var minimumFreeBytes: UInt64?

    public init(storeAvailable: Bool) {
        self.status = storeAvailable ? "ok" : "store_unavailable"
    }

    /// The store answers, but a filesystem is below the free-space threshold.
    public init(insufficientStoragePath path: String, availableBytes: UInt64?, minimumFreeBytes: UInt64) {
        self.status = "insufficient_storage"
        self.path = path
        // JSON numbers are exact to 2^53 bytes (8 PiB): more is reported as that much.
        self.availableBytes = availableBytes.map { min($0, 1 << 53) }
        self.minimumFreeBytes = min(minimumFreeBytes, 1 << 53)
    }
}
