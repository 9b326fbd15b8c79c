//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import FormAttestFlows
import FormAttestForm
public import Foundation
import JWTKit
public import Logging
import Metrics

/// Verifies the bank's identity-provider tokens (an OIDC access token as a bearer): ES256,
/// RS256 or EdDSA, by a key of the provider's JWKS, with `exp`, `nbf`, `iss` and `aud` checked
/// against the injected clock (at most 60 s leeway). The user is one configured claim.
///
/// The token's header and payload are read with the strict RFC 8785 parser (duplicate claims are
/// refused, not resolved one way here and another way in the provider's tooling); jwt-kit checks
/// the signature. The `kid` must name a key of the set, whose type must fit the `alg`: jwt-kit
/// alone would fall back to a default key for an unknown `kid`.
public actor IdentityProviderVerifier {
    public struct Configuration: Sendable {
        public var issuer: String
        public var audience: String
        /// The claim that names the user (default `sub`).
        public var userClaim: String = "sub"
        /// Tolerance for `exp` and `nbf` (at most 60 s).
        public var leeway: TimeInterval = 30
        /// An unknown `kid` refreshes the set at most this often.
        public var refreshInterval: TimeInterval = 60

        public init(issuer: String, audience: String, userClaim: String = "sub", leeway: TimeInterval = 30, refreshInterval: TimeInterval = 60) {
            self.issuer = issuer
            self.audience = audience
            self.userClaim = userClaim
            self.leeway = min(max(leeway, 0), 60)
            self.refreshInterval = refreshInterval
        }
    }

    /// The token's claims that matter once it verified.
    public struct Verified: Sendable, Hashable {
        public var user: String
        public var sessionID: String?
    }

    /// Where the key set comes from: a fetch (a file read, or an HTTPS GET) returning its JSON.
    public typealias KeySetSource = @Sendable () async throws -> [UInt8]

    /// Algorithms accepted, and the JWK key type each needs.
    static let algorithms: [String: JWK.KeyType] = ["ES256": .ecdsa, "RS256": .rsa, "EdDSA": .octetKeyPair]
    /// Tokens longer than this are refused before any parsing.
    static let maximumTokenLength = 16 * 1024

    private let configuration: Configuration
    private let source: KeySetSource
    private let now: @Sendable () -> Date
    /// One collection per key type: jwt-kit holds one key per kid, and a provider may publish an
    /// EC and an RSA key under one kid (r3 F5). The token's alg chooses the collection.
    private var keys: [String: JWTKeyCollection] = [:]
    /// Each key held, by kid and type, with the alg it names, if any.
    private var keyAlgorithms: [IdentityProviderKeySet.Index: String?] = [:]
    private var lastFetch: Date?
    private let logger: Logger

    public init(
        configuration: Configuration, source: @escaping KeySetSource, now: @escaping @Sendable () -> Date = Date.init,
        logger: Logger = Logger(label: "formattest.caller-jwks")
    ) {
        self.configuration = configuration
        self.source = source
        self.now = now
        self.logger = logger
    }

    /// Fetches the key set now (at start-up, and for an unknown `kid` at most once a
    /// `refreshInterval`). The set is read key by key (`IdentityProviderKeySet`): a key this
    /// service cannot verify with is skipped with one log line, and the others are used. A
    /// refresh that fails (the source, or a set with no usable key) is logged and counted
    /// (`formattest_caller_jwks_refreshes_total{outcome="failed"}`), and the keys already held
    /// stay in use.
    public func refresh() async throws {
        self.lastFetch = self.now()
        let set: IdentityProviderKeySet
        do {
            set = try IdentityProviderKeySet(json: try await self.source())
        } catch {
            Counter(label: "formattest_caller_jwks_refreshes_total", dimensions: [("outcome", "failed")]).increment()
            self.logger.error(
                "the identity provider's key set could not be refreshed; the keys already held stay in use",
                metadata: ["error": "\(error)", "keysHeld": "\(self.keyAlgorithms.count)"]
            )
            throw error
        }
        var collections: [String: JWTKeyCollection] = [:]
        var types: [IdentityProviderKeySet.Index: String?] = [:]
        var skipped = set.skipped
        for key in set.keys {
            do {
                let collection = collections[key.type.rawValue] ?? JWTKeyCollection()
                try await collection.add(jwk: key.jwk)
                collections[key.type.rawValue] = collection
                types[key.index] = key.algorithm
            } catch {
                skipped.append(.init(kid: key.kid, reason: "jwt-kit refused the key"))
            }
        }
        for skip in skipped {
            Counter(label: "formattest_caller_jwks_keys_skipped_total").increment()
            self.logger.warning("identity provider key skipped", metadata: ["kid": "\(skip.kid ?? "(none)")", "reason": "\(skip.reason)"])
        }
        guard !types.isEmpty else {
            Counter(label: "formattest_caller_jwks_refreshes_total", dimensions: [("outcome", "failed")]).increment()
            self.logger.error("the identity provider's key set holds no usable key; the keys already held stay in use")
            throw IdentityProviderKeySet.Refused(description: "the key set holds no usable key")
        }
        Counter(label: "formattest_caller_jwks_refreshes_total", dimensions: [("outcome", "ok")]).increment()
        self.keys = collections
        self.keyAlgorithms = types
    }

    /// Verifies `token`, or throws 401 `unauthenticated` (503 when the key set cannot be had).
    public func verify(_ token: String) async throws(CallerAuthenticationError) -> Verified {
        guard token.utf8.count <= Self.maximumTokenLength else { throw .unauthenticated("the token is too long") }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Base64URL.decode(String(parts[0])), let payloadBytes = Base64URL.decode(String(parts[1])),
            let header = try? CanonicalJSON.parse(headerBytes, limits: .init(maximumSize: 4096, maximumDepth: 8)),
            let claims = try? CanonicalJSON.parse(payloadBytes, limits: .init(maximumSize: 16 * 1024, maximumDepth: 16))
        else { throw .unauthenticated("the bearer is not a well-formed JWT") }
        guard let algorithm = header["alg"]?.stringValue, let keyType = Self.algorithms[algorithm] else {
            throw .unauthenticated("the token's alg is not ES256, RS256 or EdDSA")
        }
        guard let kid = header["kid"]?.stringValue else { throw .unauthenticated("the token has no kid") }
        // RFC 7515 §4.1.11: a critical extension the recipient does not understand makes the
        // token invalid. This verifier understands none.
        guard header["crit"] == nil else { throw .unauthenticated("the token names critical header extensions") }
        let index = IdentityProviderKeySet.Index(kid: kid, type: keyType.rawValue)
        if !self.keyAlgorithms.keys.contains(where: { $0.kid == kid }) { try await self.refreshForUnknownKey() }
        guard self.keyAlgorithms.keys.contains(where: { $0.kid == kid }) else {
            throw .unauthenticated("the token's kid is not a key of the identity provider")
        }
        // The kid is known; a key of the alg's type under it, and naming no other alg.
        guard let named = self.keyAlgorithms[index], named == nil || named == algorithm, let collection = self.keys[keyType.rawValue] else {
            throw .unauthenticated("the token's alg does not fit its key")
        }
        do {
            _ = try await collection.verify(token, as: SignatureOnly.self)
        } catch {
            throw .unauthenticated("the token's signature does not verify")
        }
        return try self.check(claims)
    }

    private func refreshForUnknownKey() async throws(CallerAuthenticationError) {
        if let last = self.lastFetch, self.now().timeIntervalSince(last) < self.configuration.refreshInterval, !self.keyAlgorithms.isEmpty {
            return  // refreshed recently: the kid is simply unknown
        }
        if let last = self.lastFetch, self.now().timeIntervalSince(last) < self.configuration.refreshInterval {
            // Never fetched successfully, and tried too recently: fail closed without a fetch.
            throw CallerAuthenticationError(code: .identityProviderUnavailable, reason: "the identity provider's keys are unavailable")
        }
        do {
            try await self.refresh()
        } catch {
            if self.keyAlgorithms.isEmpty {
                throw CallerAuthenticationError(code: .identityProviderUnavailable, reason: "the identity provider's keys are unavailable")
            }
            // The set we have stays in use; the kid is unknown to it.
        }
    }

    private func check(_ claims: JSONValue) throws(CallerAuthenticationError) -> Verified {
        guard case .object = claims else { throw .unauthenticated("the token's payload is not an object") }
        let now = self.now().timeIntervalSince1970
        let leeway = self.configuration.leeway
        guard case .number(let expiry)? = claims["exp"], expiry.isFinite else { throw .unauthenticated("the token has no exp") }
        guard now <= expiry + leeway else { throw .unauthenticated("the token has expired") }
        if let notBefore = claims["nbf"] {
            guard case .number(let value) = notBefore, value.isFinite else { throw .unauthenticated("the token's nbf is not a number") }
            guard now >= value - leeway else { throw .unauthenticated("the token is not valid yet") }
        }
        guard let issuer = claims["iss"]?.stringValue, Array(issuer.utf8) == Array(self.configuration.issuer.utf8) else {
            throw .unauthenticated("the token's issuer is not the configured one")
        }
        let audiences: [String]
        switch claims["aud"] {
        case .string(let single)?: audiences = [single.string]
        case .array(let many)?:
            audiences = many.compactMap(\.stringValue)
            guard audiences.count == many.count else { throw .unauthenticated("the token's audience holds a non-string") }
        default: throw .unauthenticated("the token has no audience")
        }
        guard audiences.contains(where: { Array($0.utf8) == Array(self.configuration.audience.utf8) }) else {
            throw .unauthenticated("the token is not for this audience")
        }
        guard let user = claims[self.configuration.userClaim]?.stringValue, Username.problem(user) == nil else {
            throw .unauthenticated("the token's \(self.configuration.userClaim) claim is not a valid username")
        }
        var sessionID: String?
        if let sid = claims["sid"] {
            guard let text = sid.stringValue, !text.isEmpty, text.utf8.count <= 256 else { throw .unauthenticated("the token's sid is not a string") }
            sessionID = text
        }
        return Verified(user: user, sessionID: sessionID)
    }
}

/// jwt-kit needs a payload type; the claims are read and checked by the strict parser above.
struct SignatureOnly: JWTPayload {
    init(from decoder: any Decoder) throws {}
    func encode(to encoder: any Encoder) throws {}
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
