//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import ArgumentParser
import FormAttestServer
import Foundation
import Logging

/// `serve`'s caller authentication, key and rate limits: who vouches for `username`.
struct CallerOptions: ParsableArguments {
    @Option(name: .customLong("caller-jwks"), help: "The identity provider's JWKS: a file, or an https:// URL (fetched, cached by kid).")
    var jwks: String?

    @Option(name: .customLong("caller-issuer"), help: "The identity provider's iss, required with --caller-jwks.")
    var issuer: String?

    @Option(name: .customLong("caller-audience"), help: "This service's aud in the provider's tokens, required with --caller-jwks.")
    var audience: String?

    @Option(name: .customLong("caller-user-claim"), help: "The token claim that names the user (default sub).")
    var userClaim = "sub"

    @Option(name: .customLong("bind-session"), help: "sid: a form must carry session = the token's sid when it has one (default); none.")
    var bindSession = "sid"

    @Option(name: .customLong("caller-secret-file"), help: "A trusted backend's shared secrets, one per line (Authorization: Bearer).")
    var secretFile: String?

    @Option(name: .customLong("admin-secret-file"), help: "Operators' secrets for /admin/* (a user's keys, revocation); without it, no admin API.")
    var adminSecretFile: String?

    @Flag(name: .customLong("insecure-no-caller-auth"), help: "INSECURE: trust the body's username without any caller authentication.")
    var insecureNoCallerAuth = false

    @Option(name: .customLong("max-keys-per-user"), help: "Active keys per user; a new one beyond revokes the least recently used (default 10).")
    var maxKeysPerUser = 10

    @Option(name: .customLong("rate-limit-per-user"), help: "Requests per window per user on challenge, attest, register-pooled (default 30).")
    var rateLimitPerUser = 30

    @Option(name: .customLong("rate-limit-per-address"), help: "Requests per window per client address, likewise (default 30).")
    var rateLimitPerAddress = 30

    @Option(name: .customLong("rate-limit-window"), help: "The rate limits' window in seconds (default 60).")
    var rateLimitWindow: Double = 60

    @Option(name: .customLong("trusted-proxy-hops"), help: "Reverse proxies that append X-Forwarded-For (default 0: the peer address).")
    var trustedProxyHops = 0

    @Option(name: .customLong("rate-limit-per-backend"), help: "Requests per window per backend secret, per endpoint (default 3000).")
    var rateLimitPerBackend = 3000

    @Option(name: .customLong("rate-limit-backend-unnamed"), help: "Requests per window per backend secret that name no user (default 30).")
    var rateLimitBackendUnnamed = 30

    @Option(name: .customLong("rate-limit-ipv6-prefix"), help: "The bits of an IPv6 address that name one client (default 64).")
    var rateLimitIPv6Prefix = 64

    @Option(name: .customLong("rate-limit-inspect"), help: "Inspector requests per window per caller (default 60).")
    var rateLimitInspect = 60

    @Option(name: .customLong("rate-limit-pool"), help: "Pool challenges and register-pooled requests per window per backend secret (default 60).")
    var rateLimitPool = 60

    @Option(name: .customLong("rate-limit-pool-per-user"), help: "Pool challenges per user in 30 days (default 100).")
    var rateLimitPoolPerUser = 100

    @Option(name: .customLong("rate-limit-registrations-per-backend"), help: "Registrations per window per backend secret (default 600).")
    var rateLimitRegistrationsPerBackend = 600

    @Option(
        name: .customLong("rate-limit-backend-user-share"),
        help: "Percent of a backend's pool and registration budgets one user may spend in a window (default 10).")
    var rateLimitBackendUserShare = 10

    @Option(name: .customLong("rate-limit-registrations-per-user"), help: "Registrations per user in 24 hours, whoever asks (default 20).")
    var rateLimitRegistrationsPerUser = 20

    func validate(devSimulator: Bool) throws {
        let chosen = [self.jwks != nil, self.secretFile != nil, self.insecureNoCallerAuth].filter { $0 }.count
        guard chosen <= 1 else {
            throw ValidationError("Choose one caller authentication: --caller-jwks, --caller-secret-file or --insecure-no-caller-auth.")
        }
        if chosen == 0 && !devSimulator {
            throw ValidationError(
                "Choose a caller authentication: --caller-jwks (identity-provider tokens), --caller-secret-file (a trusted backend), or, knowingly, --insecure-no-caller-auth."
            )
        }
        if self.jwks != nil {
            guard let issuer = self.issuer, let audience = self.audience else {
                throw ValidationError("--caller-jwks needs --caller-issuer and --caller-audience.")
            }
            try Setting.checkText(issuer, "--caller-issuer")
            try Setting.checkText(audience, "--caller-audience")
            try Setting.checkText(self.userClaim, "--caller-user-claim")
        } else if self.issuer != nil || self.audience != nil {
            throw ValidationError("--caller-issuer and --caller-audience go with --caller-jwks.")
        }
        guard ["sid", "none"].contains(self.bindSession) else { throw ValidationError("--bind-session must be sid or none.") }
        guard (1...1000).contains(self.maxKeysPerUser) else { throw ValidationError("--max-keys-per-user must be 1-1000.") }
        guard (1...1_000_000).contains(self.rateLimitPerUser) else { throw ValidationError("--rate-limit-per-user must be 1-1000000.") }
        guard (1...1_000_000).contains(self.rateLimitPerAddress) else { throw ValidationError("--rate-limit-per-address must be 1-1000000.") }
        try Setting.checkSeconds(self.rateLimitWindow, "--rate-limit-window", 1...86_400)
        guard (0...10).contains(self.trustedProxyHops) else { throw ValidationError("--trusted-proxy-hops must be 0-10.") }
        guard (1...1_000_000).contains(self.rateLimitPerBackend) else { throw ValidationError("--rate-limit-per-backend must be 1-1000000.") }
        guard (1...1_000_000).contains(self.rateLimitBackendUnnamed) else { throw ValidationError("--rate-limit-backend-unnamed must be 1-1000000.") }
        guard (32...128).contains(self.rateLimitIPv6Prefix) else { throw ValidationError("--rate-limit-ipv6-prefix must be 32-128.") }
        guard (1...1_000_000).contains(self.rateLimitInspect) else { throw ValidationError("--rate-limit-inspect must be 1-1000000.") }
        guard (1...1_000_000).contains(self.rateLimitPool) else { throw ValidationError("--rate-limit-pool must be 1-1000000.") }
        guard (1...1_000_000).contains(self.rateLimitPoolPerUser) else { throw ValidationError("--rate-limit-pool-per-user must be 1-1000000.") }
        guard (1...1_000_000).contains(self.rateLimitRegistrationsPerBackend) else {
            throw ValidationError("--rate-limit-registrations-per-backend must be 1-1000000.")
        }
        guard (1...100).contains(self.rateLimitBackendUserShare) else { throw ValidationError("--rate-limit-backend-user-share must be 1-100.") }
        guard (1...1_000_000).contains(self.rateLimitRegistrationsPerUser) else {
            throw ValidationError("--rate-limit-registrations-per-user must be 1-1000000.")
        }
    }

    /// A secret file's text. One that starts with a UTF-8 byte order mark is refused: the mark
    /// (EF BB BF, invisible in editors) would otherwise silently become part of the first secret.
    static func secretText(_ path: String, _ flag: String) throws -> String {
        let text = try InputFile.readText(path)
        guard !text.utf8.starts(with: [0xEF, 0xBB, 0xBF]) else {
            throw UsageError(
                "\(flag) \(path): the file starts with a UTF-8 byte order mark (EF BB BF), which would become part of the secret; save it as UTF-8 without a BOM."
            )
        }
        return text
    }

    /// The admin API's credential, when configured.
    func adminSecrets() throws -> BackendSecrets? {
        guard let path = self.adminSecretFile else { return nil }
        do {
            return try BackendSecrets(fileText: try Self.secretText(path, "--admin-secret-file"))
        } catch let error as CallerAuthenticationError {
            throw UsageError("--admin-secret-file \(path): \(error.reason)")
        }
    }

    var rateLimits: RateLimits {
        RateLimits(
            perUser: self.rateLimitPerUser, perAddress: self.rateLimitPerAddress, window: self.rateLimitWindow,
            trustedProxyHops: self.trustedProxyHops,
            perBackend: self.rateLimitPerBackend, perBackendUnnamed: self.rateLimitBackendUnnamed, ipv6Prefix: self.rateLimitIPv6Prefix,
            inspect: self.rateLimitInspect, pool: self.rateLimitPool, poolPerUser: self.rateLimitPoolPerUser,
            registrationsPerBackend: self.rateLimitRegistrationsPerBackend, backendUserSharePercent: self.rateLimitBackendUserShare,
            registrationsPerUser: self.rateLimitRegistrationsPerUser
        )
    }

    /// The configured authentication; the identity provider's keys are fetched once now (a
    /// failure is logged, and every request then fails closed until a refresh succeeds).
    func authentication(logger: Logger) async throws -> CallerAuthentication {
        if let jwks = self.jwks, let issuer = self.issuer, let audience = self.audience {
            let verifier = IdentityProviderVerifier(
                configuration: .init(issuer: issuer, audience: audience, userClaim: self.userClaim),
                source: try IdentityProviderKeySets.source(jwks),
                logger: logger
            )
            do {
                try await verifier.refresh()
            } catch {
                logger.error(
                    "the identity provider's keys could not be fetched; requests fail closed until they are", metadata: ["error": "\(error)"])
            }
            logger.info(
                "caller authentication: identity-provider tokens",
                metadata: ["issuer": "\(issuer)", "audience": "\(audience)", "bind-session": "\(self.bindSession)"])
            return .identityProvider(verifier, bindSessions: self.bindSession == "sid")
        }
        if let secretFile = self.secretFile {
            let text = try Self.secretText(secretFile, "--caller-secret-file")
            do {
                let secrets = try BackendSecrets(fileText: text)
                logger.info("caller authentication: a trusted backend's shared secret")
                return .trustedBackend(secrets)
            } catch {
                throw UsageError("--caller-secret-file \(secretFile): \(error.reason)")
            }
        }
        let banner = String(repeating: "!", count: 78)
        logger.warning("\(banner)")
        logger.warning("NO CALLER AUTHENTICATION: any client may act for any username it names.")
        logger.warning("\(banner)")
        return .none
    }
}
