//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import ArgumentParser
import FormAttestServer
import Foundation
import Logging

/// `serve`'s caller authentication, key and rate limits: who vouches for `username`. Read from
/// the resolved settings, whose table checked each value and supplied each default; what is left
/// here is what spans settings.
struct CallerOptions {
    let jwks: String?
    let issuer: String?
    let audience: String?
    let userClaim: String
    let bindSession: String
    let secretFile: String?
    let adminSecretFile: String?
    let insecureNoCallerAuth: Bool
    let maxKeysPerUser: Int
    let rateLimits: RateLimits

    /// - Throws: `ValidationError` when the settings name no caller authentication, or more
    ///   than one, or an identity provider without its issuer and audience.
    init(_ settings: ServeSettings.Resolved, devSimulator: Bool) throws {
        self.jwks = settings.textIfSet("caller-jwks")
        self.issuer = settings.textIfSet("caller-issuer")
        self.audience = settings.textIfSet("caller-audience")
        self.userClaim = settings.text("caller-user-claim")
        self.bindSession = settings.text("bind-session")
        self.secretFile = settings.textIfSet("caller-secret-file")
        self.adminSecretFile = settings.textIfSet("admin-secret-file")
        self.insecureNoCallerAuth = settings.toggle("insecure-no-caller-auth")
        self.maxKeysPerUser = settings.integer("max-keys-per-user")
        self.rateLimits = RateLimits(
            perUser: settings.integer("rate-limit-per-user"), perAddress: settings.integer("rate-limit-per-address"),
            window: settings.seconds("rate-limit-window"), trustedProxyHops: settings.integer("trusted-proxy-hops"),
            perBackend: settings.integer("rate-limit-per-backend"), perBackendUnnamed: settings.integer("rate-limit-backend-unnamed"),
            ipv6Prefix: settings.integer("rate-limit-ipv6-prefix"), inspect: settings.integer("rate-limit-inspect"),
            pool: settings.integer("rate-limit-pool"), poolPerUser: settings.integer("rate-limit-pool-per-user"),
            registrationsPerBackend: settings.integer("rate-limit-registrations-per-backend"),
            backendUserSharePercent: settings.integer("rate-limit-backend-user-share"),
            registrationsPerUser: settings.integer("rate-limit-registrations-per-user")
        )

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
            guard self.issuer != nil, self.audience != nil else {
                throw ValidationError("--caller-jwks needs --caller-issuer and --caller-audience.")
            }
        } else if self.issuer != nil || self.audience != nil {
            throw ValidationError("--caller-issuer and --caller-audience go with --caller-jwks.")
        }
    }

    /// A secret file's text. One that starts with a UTF-8 byte order mark is refused: the mark
    /// (EF BB BF, invisible in editors) would otherwise silently become part of the first secret.
    static func secretText(_ path: String, _ flag: String) throws -> String {
        // Read before StrictModes judges the file's mode: its type is judged here, first.
        try StrictModes.checkRegularFile(path, flag)
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
