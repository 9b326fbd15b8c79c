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
        // A page at a time (`limit`, default and at most ``maximumPage``), after the key `after`
        // names; the counts are the store's, of all the user's keys, and read no blob.
        // Decoded strictly, as every query string the service reads (a parameter named twice,
        // bad percent-encoding or invalid UTF-8: 400 `invalid_query`).
        let query = try QueryParameters(request)
        let limit: Int
        if let text = query.get("limit") {
            guard text.utf8.count <= 4, text.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }), let number = Int(text),
                (1...Self.maximumPage).contains(number)
            else {
                throw APIError.invalidRequest("limit must be a whole number from 1 to \(Self.maximumPage)")
            }
            limit = number
        } else {
            limit = Self.defaultPage
        }
        do {
            var position: KeyPosition?
            if let text = query.get("after") {
                guard let keyID = Base64URL.decode(text), keyID.count == 32 else {
                    throw APIError.invalidRequest("after must be a keyId (32 bytes, base64url) from the previous page's next")
                }
                guard let key = try await self.store.loadKey(keyID: keyID), Array(key.username.utf8) == Array(username.utf8) else {
                    throw APIError.invalidRequest("after must name one of this user's keys (the previous page's next)")
                }
                position = KeyPosition(key)
            }
            // One more than the page: whether there is a next one.
            var page = try await self.store.keys(username: username, after: position, limit: limit + 1)
            let more = page.count > limit
            if more { page.removeLast() }
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
            throw APIError(FlowError(code: .init(error.code), category: .storeUnavailable, reason: error.reason))
        }
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
        } catch where error.code == .unknownKey {
            throw APIError.unknownKey
        } catch {
            throw APIError(FlowError(code: .init(error.code), category: .storeUnavailable, reason: error.reason))
        }
        let key = try? await self.store.loadKey(keyID: keyID)
        return try JSONResponse.make(RevocationResponse(keyID: keyID, revokedAt: key?.revokedAt ?? now))
    }
}
