//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestForm
import FormAttestFlows
import FormAttestResponses
import Foundation
import HTTPTypes
import Hummingbird

/// `/admin/*`, for operators, with a credential of its own (`--admin-secret-file`, never the
/// callers'): a user's keys, and revoking a key (401 `key_revoked` at its next assertion).
struct AdminController {
    let store: any OperationalAttestationStore
    let secrets: BackendSecrets
    let registrationWindow: TimeInterval
    let now: @Sendable () -> Date

    func addRoutes(to group: RouterGroup<AppRequestContext>) {
        group.get("users/:username/keys", use: self.listKeys)
        group.post("keys/:keyId/revoke", use: self.revoke)
    }

    private func authorize(_ request: Request) throws {
        guard let bearer = CallerAuthenticationMiddleware.bearer(request), self.secrets.accepts(bearer) else {
            throw APIError(CallerAuthenticationError(code: .unauthenticated, reason: "an admin credential is required (Authorization: Bearer)"))
        }
    }

    @Sendable func listKeys(_ request: Request, context: AppRequestContext) async throws -> Response {
        try self.authorize(request)
        // The path segment as sent, percent-decoded (a user named `josé` is `jos%C3%A9`).
        guard let raw = context.parameters.get("username"), let username = raw.removingPercentEncoding else {
            throw APIError.invalidRequest("the username is not percent-encoded UTF-8")
        }
        try APIError.checkUsername(username)
        let keys: [StoredKey]
        do {
            keys = try await self.store.keys(username: username)
        } catch {
            throw APIError(FlowError(code: .init(error.code), category: .storeUnavailable, reason: error.reason))
        }
        return try JSONResponse.make(KeyListingResponse(username: username, keys: keys, now: self.now(), registrationWindow: self.registrationWindow))
    }

    @Sendable func revoke(_ request: Request, context: AppRequestContext) async throws -> Response {
        try self.authorize(request)
        guard let text = context.parameters.get("keyId"), let keyID = Base64URL.decode(text), keyID.count == 32 else {
            throw APIError.invalidRequest("keyId must be 32 bytes, base64url")
        }
        let now = self.now()
        do {
            try await self.store.revokeKey(keyID: keyID, at: now)
        } catch where error.code == .unknownKey {
            throw APIError.unknownKey
        } catch {
            throw APIError(FlowError(code: .init(error.code), category: .storeUnavailable, reason: error.reason))
        }
        let key = try? await self.store.loadKey(keyID: keyID)
        return try JSONResponse.make(RevocationResponse(keyID: keyID, revokedAt: key?.revokedAt ?? now))
    }
}
