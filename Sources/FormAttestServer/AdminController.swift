//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestFlows
import FormAttestForm
import FormAttestResponses
import Foundation
import HTTPTypes
import Hummingbird

/// `/admin/*`, for operators, with a credential of its own (`--admin-secret-file`, never the
/// callers'): a user's keys and passkeys, and revoking either (401 `key_revoked` or
/// `passkey_revoked` at its next assertion).
struct AdminController {
    let store: any OperationalAttestationStore
    let secrets: BackendSecrets
    let registrationWindow: TimeInterval
    let now: @Sendable () -> Date

    func addRoutes(to group: RouterGroup<AppRequestContext>) {
        group.get("users/:username/keys", use: self.listKeys)
        group.post("keys/:keyId/revoke", use: self.revoke)
        group.get("users/:username/passkeys", use: self.listPasskeys)
        group.post("passkeys/:credentialId/revoke", use: self.revokePasskey)
    }

    private func authorize(_ request: Request) throws {
        guard let bearer = CallerAuthenticationMiddleware.bearer(request), self.secrets.accepts(bearer) else {
            throw APIError(CallerAuthenticationError(code: .unauthenticated, reason: "an admin credential is required (Authorization: Bearer)"))
        }
    }

    /// A listing's request: the user, the page size and the `after` position's text.
    private struct ListingQuery {
        var username: String
        var limit: Int
        var after: String?
    }

    /// The path's username and the query's `limit` and `after`, for every listing alike.
    private func listingQuery(_ request: Request, context: AppRequestContext) throws -> ListingQuery {
        try self.authorize(request)
        // The path segment as sent, percent-decoded (a user named `josé` is `jos%C3%A9`).
        guard let raw = context.parameters.get("username"), let username = raw.removingPercentEncoding else {
            throw APIError.invalidRequest("the username is not percent-encoded UTF-8")
        }
        try APIError.checkUsername(username)
        // A page at a time (`limit`, default and at most ``maximumPage``), after the credential
        // `after` names; the counts are the store's, of all the user's credentials, and read no blob.
        // Decoded strictly, as every query string the service reads (a parameter named twice,
        // bad percent-encoding or invalid UTF-8: 400 `invalid_query`).
        let query = try QueryParameters(request)
        var limit = Self.defaultPage
        if let text = query.get("limit") {
            guard text.utf8.count <= 4, text.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }), let number = Int(text),
                (1...Self.maximumPage).contains(number)
            else {
                throw APIError.invalidRequest("limit must be a whole number from 1 to \(Self.maximumPage)")
            }
            limit = number
        }
        return ListingQuery(username: username, limit: limit, after: query.get("after"))
    }

    /// One more than the page (whether there is a next one), cut to the page.
    private static func page<Item>(_ fetched: [Item], limit: Int) -> (items: [Item], more: Bool) {
        (Array(fetched.prefix(limit)), fetched.count > limit)
    }

    private static func storeFailure(_ error: StoreError) -> APIError {
        APIError(FlowError(code: .init(error.code), category: .storeUnavailable, reason: error.reason))
    }

    @Sendable func listKeys(_ request: Request, context: AppRequestContext) async throws -> Response {
        let query = try self.listingQuery(request, context: context)
        let username = query.username
        do {
            var position: KeyPosition?
            if let text = query.after {
                guard let keyID = Base64URL.decode(text), keyID.count == 32 else {
                    throw APIError.invalidRequest("after must be a keyId (32 bytes, base64url) from the previous page's next")
                }
                guard let key = try await self.store.loadKey(keyID: keyID), Array(key.username.utf8) == Array(username.utf8) else {
                    throw APIError.invalidRequest("after must name one of this user's keys (the previous page's next)")
                }
                position = KeyPosition(key)
            }
            let (page, more) = Self.page(try await self.store.keys(username: username, after: position, limit: query.limit + 1), limit: query.limit)
            let since = self.now().addingTimeInterval(-self.registrationWindow)
            return try JSONResponse.make(
                KeyListingResponse(
                    username: username, page: page,
                    activeKeys: try await self.store.countKeys(username: username, .active),
                    recentRegistrations: try await self.store.countKeys(username: username, .createdSince(since)),
                    totalKeys: try await self.store.countKeys(username: username, .all),
                    next: more ? page.last?.keyID : nil
                )
            )
        } catch let error as StoreError {
            throw Self.storeFailure(error)
        }
    }

    /// `GET /admin/users/{username}/passkeys`: the user's passkeys a page at a time, as the keys.
    @Sendable func listPasskeys(_ request: Request, context: AppRequestContext) async throws -> Response {
        let query = try self.listingQuery(request, context: context)
        let username = query.username
        do {
            var position: KeyPosition?
            if let text = query.after {
                guard let credentialID = Self.credentialID(text) else {
                    throw APIError.invalidRequest("after must be a credential id (1 to 1023 bytes, base64url) from the previous page's next")
                }
                guard let passkey = try await self.store.loadPasskey(credentialID: credentialID), Array(passkey.username.utf8) == Array(username.utf8)
                else {
                    throw APIError.invalidRequest("after must name one of this user's passkeys (the previous page's next)")
                }
                position = KeyPosition(passkey)
            }
            let (page, more) = Self.page(
                try await self.store.passkeys(username: username, after: position, limit: query.limit + 1), limit: query.limit)
            let since = self.now().addingTimeInterval(-self.registrationWindow)
            return try JSONResponse.make(
                PasskeyListingResponse(
                    username: username, page: page,
                    activePasskeys: try await self.store.countPasskeys(username: username, .active),
                    recentRegistrations: try await self.store.countPasskeys(username: username, .createdSince(since)),
                    totalPasskeys: try await self.store.countPasskeys(username: username, .all),
                    next: more ? page.last?.credentialID : nil
                )
            )
        } catch let error as StoreError {
            throw Self.storeFailure(error)
        }
    }

    /// A credential id from a path or query: 1 to 1023 bytes (WebAuthn §5.1), base64url.
    private static func credentialID(_ text: String) -> [UInt8]? {
        // 1023 bytes are 1364 characters: a longer text is refused before it is decoded.
        guard text.utf8.count <= 1364, let bytes = Base64URL.decode(text), (1...1023).contains(bytes.count) else { return nil }
        return bytes
    }

    /// The listing's page size when `limit` is not given, and its largest.
    static let defaultPage = 100
    static let maximumPage = 500

    @Sendable func revoke(_ request: Request, context: AppRequestContext) async throws -> Response {
        try self.authorize(request)
        guard let text = context.parameters.get("keyId"), let keyID = Base64URL.decode(text), keyID.count == 32 else {
            throw APIError.invalidRequest("keyId must be 32 bytes, base64url")
        }
        let now = self.now()
        do {
            try await self.store.revokeKey(keyID: keyID, at: now)
        } catch  where error.code == .unknownKey {
            throw APIError.unknownKey
        } catch {
            throw Self.storeFailure(error)
        }
        let key = try? await self.store.loadKey(keyID: keyID)
        return try JSONResponse.make(RevocationResponse(keyID: keyID, revokedAt: key?.revokedAt ?? now))
    }

    /// `POST /admin/passkeys/{credentialId}/revoke`: every later assertion with the passkey is
    /// refused (401 `passkey_revoked`); idempotent, the first revocation's time is kept.
    @Sendable func revokePasskey(_ request: Request, context: AppRequestContext) async throws -> Response {
        try self.authorize(request)
        guard let text = context.parameters.get("credentialId"), let credentialID = Self.credentialID(text) else {
            throw APIError.invalidRequest("credentialId must be 1 to 1023 bytes, base64url")
        }
        let now = self.now()
        do {
            try await self.store.revokePasskey(credentialID: credentialID, at: now)
        } catch  where error.code == .unknownKey {
            throw APIError.unknownPasskey
        } catch {
            throw Self.storeFailure(error)
        }
        let passkey = try? await self.store.loadPasskey(credentialID: credentialID)
        return try JSONResponse.make(PasskeyRevocationResponse(credentialID: credentialID, revokedAt: passkey?.revokedAt ?? now))
    }
}
