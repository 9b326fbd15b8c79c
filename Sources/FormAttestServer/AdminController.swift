//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
public import CanonicalJSON
import FormAttestClient
public import FormAttestFlows
public import Foundation
import HTTPTypes
import Hummingbird
import RFC3339

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
            throw APIError(FlowError(code: error.code.identifier, category: .storeUnavailable, reason: error.reason))
        }
        return JSONResponse.make(DeviceKeyListing.json(username: username, keys: keys, now: self.now(), registrationWindow: self.registrationWindow))
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
            throw APIError(status: .notFound, code: "unknown_key", message: "no key has this keyId")
        } catch {
            throw APIError(FlowError(code: error.code.identifier, category: .storeUnavailable, reason: error.reason))
        }
        let key = try? await self.store.loadKey(keyID: keyID)
        return JSONResponse.make(
            .object(JSONObject(constantMembers: [
                ("keyId", .string(JSONString(Base64URL.encode(keyID)))),
                ("revokedAt", .string(JSONString(RFC3339UTC.format(key?.revokedAt ?? now)))),
            ]))
        )
    }
}

/// A user's keys as JSON, the same for the admin API and `formattest device-keys list --json`.
public enum DeviceKeyListing {
    public static func json(username: String, keys: [StoredKey], now: Date, registrationWindow: TimeInterval = 30 * 86_400) -> JSONValue {
        let since = now.addingTimeInterval(-registrationWindow)
        let entries: [JSONValue] = keys.map { key in
            var members: [(name: String, value: JSONValue)] = [
                ("keyId", .string(JSONString(Base64URL.encode(key.keyID)))),
                ("appId", .string(JSONString(key.appID))),
                ("environment", .string(JSONString(key.environment.rawValue))),
                ("counter", .number(Double(key.counter))),
                ("createdAt", .string(JSONString(RFC3339UTC.format(key.createdAt)))),
                ("lastUsed", .string(JSONString(RFC3339UTC.format(key.lastUsed)))),
                ("reattestationRequired", .bool(key.reattestationRequired)),
                ("status", .string(JSONString(key.revokedAt != nil ? "revoked" : key.reattestationRequired ? "requires_reattestation" : "active"))),
            ]
            if let revokedAt = key.revokedAt { members.append(("revokedAt", .string(JSONString(RFC3339UTC.format(revokedAt))))) }
            return .object(JSONObject(constantMembers: members))
        }
        return .object(
            JSONObject(constantMembers: [
                ("username", .string(JSONString(username))),
                ("keys", .array(entries)),
                ("activeKeys", .number(Double(keys.filter { $0.revokedAt == nil && !$0.reattestationRequired }.count))),
                ("recentRegistrations", .number(Double(keys.filter { $0.createdAt >= since }.count))),
            ])
        )
    }
}
