//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// Who vouches for a request's user, as established by the caller authentication.
public struct CallerIdentity: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable {
        /// A bearer token of the bank's identity provider: the user is the token's claim.
        case identityProvider = "identity_provider"
        /// The bank's own backend, holding a shared secret: it vouches for the body's `username`.
        case trustedBackend = "trusted_backend"
        /// No caller authentication (`--dev-simulator` or `--insecure-no-caller-auth`).
        case unauthenticated
    }

    public var kind: Kind
    /// The user the token names (identity provider only).
    public var username: String?
    /// The token's `sid` (session id) when it has one and sessions are bound.
    public var sessionID: String?
    /// Which backend secret vouched (trusted backend only): the name its budgets are counted under.
    public var backend: String?

    public init(kind: Kind, username: String? = nil, sessionID: String? = nil, backend: String? = nil) {
        self.kind = kind
        self.username = username
        self.sessionID = sessionID
        self.backend = backend
    }

    /// The user a request acts for: the token's user, which a `username` given in the request
    /// must equal (403 `identity_mismatch`), or, for a trusted backend or no authentication, the
    /// request's own `username` (required).
    public func user(requested: String?) throws(CallerAuthenticationError) -> String? {
        switch self.kind {
        case .identityProvider:
            guard let username = self.username else { throw .unauthenticated("the token names no user") }
            if let requested, Array(requested.utf8) != Array(username.utf8) {
                throw CallerAuthenticationError(code: .identityMismatch, reason: "the request's username is not the token's user")
            }
            return username
        case .trustedBackend, .unauthenticated:
            return requested
        }
    }
}

/// Why a caller was refused: 401 `unauthenticated`, 403 `identity_mismatch`, 503
/// `identity_provider_unavailable`. (A form signed for another session than the token's is the
/// form rules' `session_mismatch`.)
public struct CallerAuthenticationError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Backing: String, Hashable, Sendable, CaseIterable {
            case unauthenticated
            case identityMismatch = "identity_mismatch"
            case identityProviderUnavailable = "identity_provider_unavailable"
        }

        fileprivate let backing: Backing
        fileprivate init(_ backing: Backing) { self.backing = backing }

        /// Every code of caller authentication (the error table in docs/errors.md is generated from them).
        public static var allCases: [Code] { Backing.allCases.map(Code.init) }

        public var identifier: String { self.backing.rawValue }
        /// What the code means, in a line (docs/errors.md is generated from it).
        public var summary: String {
            switch self.backing {
            case .unauthenticated: "no caller credential, or one that does not verify (`WWW-Authenticate: Bearer`)"
            case .identityMismatch: "the body's username is not the authenticated caller's"
            case .identityProviderUnavailable: "the identity provider's keys cannot be fetched: every request fails closed"
            }
        }

        public var description: String { self.backing.rawValue }

        /// No credential, or one that does not verify (401).
        public static let unauthenticated = Code(.unauthenticated)
        /// The request names another user than the token (403).
        public static let identityMismatch = Code(.identityMismatch)
        /// The identity provider's keys could not be had to check a token (503).
        public static let identityProviderUnavailable = Code(.identityProviderUnavailable)
    }

    public let code: Code
    public let reason: String

    public init(code: Code, reason: String) {
        self.code = code
        self.reason = reason
    }

    static func unauthenticated(_ reason: String) -> Self { Self(code: .unauthenticated, reason: reason) }

    public var description: String { "\(self.code.identifier): \(self.reason)" }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(self.code) }
}
