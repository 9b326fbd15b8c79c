//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import HTTPTypes
import Hummingbird

/// How a deployment establishes who the caller is. Chosen explicitly: `serve` refuses to start
/// without one (but for the demo and an explicit, logged `--insecure-no-caller-auth`).
public enum CallerAuthentication: Sendable {
    /// Bearer tokens of the bank's identity provider. With `bindSessions`, a form must carry
    /// `session` equal to the token's `sid` when the token has one.
    case identityProvider(IdentityProviderVerifier, bindSessions: Bool)
    /// The bank's backend authenticates the user and calls with a shared secret as bearer.
    case trustedBackend(BackendSecrets)
    /// None: the body's `username` is trusted as it is.
    case none
}

/// Authenticates every `/api/appattest/*` request (the challenge included) before its route
/// runs, and stores the ``CallerIdentity`` in the context. `/healthz`, the JWKS and the demo
/// page's files are public.
struct CallerAuthenticationMiddleware: RouterMiddleware {
    typealias Context = AppRequestContext
    let authentication: CallerAuthentication

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        context.identity = try await TraceStep.run("caller authentication") { () async throws(APIError) -> CallerIdentity in
            do throws(CallerAuthenticationError) {
                return try await self.identify(request)
            } catch {
                throw APIError(error)
            }
        }
        return try await next(request, context)
    }

    private func identify(_ request: Request) async throws(CallerAuthenticationError) -> CallerIdentity {
        switch self.authentication {
        case .none:
            return CallerIdentity(kind: .unauthenticated)
        case .trustedBackend(let secrets):
            guard let bearer = Self.bearer(request), let backend = secrets.backend(presenting: bearer) else {
                throw .unauthenticated("a valid backend credential is required (Authorization: Bearer)")
            }
            return CallerIdentity(kind: .trustedBackend, backend: backend)
        case .identityProvider(let verifier, let bindSessions):
            guard let bearer = Self.bearer(request) else {
                throw .unauthenticated("an identity provider's token is required (Authorization: Bearer)")
            }
            let verified = try await verifier.verify(String(bearer))
            return CallerIdentity(kind: .identityProvider, username: verified.user, sessionID: bindSessions ? verified.sessionID : nil)
        }
    }

    /// The bearer credential of the one `Authorization` header, or nil.
    static func bearer(_ request: Request) -> Substring? {
        let values = request.headers[values: .authorization]
        guard values.count == 1, let value = values.first else { return nil }
        let scheme = "Bearer "
        guard value.utf8.count > scheme.utf8.count, value.prefix(scheme.count).lowercased() == scheme.lowercased() else { return nil }
        let credential = value.dropFirst(scheme.count)
        return credential.isEmpty ? nil : Substring(credential)
    }
}
