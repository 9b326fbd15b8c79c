//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
public import FormAttestFlows
import FormAttestForm
public import Foundation
import RFC3339

/// A user's keys: `GET /admin/users/{username}/keys` and `formattest device-keys list --json`.
public struct KeyListingResponse: APIResponse, Hashable {
    public static let schemaName = "KeyListing"

    public struct Key: Encodable, Sendable, Hashable {
        /// base64url.
        public var keyId: String
        public var appId: String
        public var environment: String
        public var counter: UInt32
        public var createdAt: String
        public var lastUsed: String
        public var reattestationRequired: Bool
        /// `active`, `requires_reattestation` or `revoked`.
        public var status: String
        public var revokedAt: String?

        public init(_ key: StoredKey) {
            self.keyId = Base64URL.encode(key.keyID)
            self.appId = key.appID
            self.environment = key.environment.rawValue
            self.counter = key.counter
            self.createdAt = RFC3339UTC.format(key.createdAt)
            self.lastUsed = RFC3339UTC.format(key.lastUsed)
            self.reattestationRequired = key.reattestationRequired
            self.status = key.revokedAt != nil ? "revoked" : key.reattestationRequired ? "requires_reattestation" : "active"
            self.revokedAt = key.revokedAt.map { RFC3339UTC.format($0) }
        }
    }

    public var username: String
    /// One page of the user's keys (every key, without paging), oldest first.
    public var keys: [Key]
    /// Keys neither revoked nor awaiting re-attestation (of all the user's keys, not the page's).
    public var activeKeys: Int
    /// Keys created within `registrationWindow` before now (likewise).
    public var recentRegistrations: Int
    /// Every key of the user, revoked ones included; present on a paged listing.
    public var totalKeys: Int?
    /// Pass as `after` for the next page; absent on the last page.
    public var next: String?

    /// Every key of the user in one listing (the command line's `device-keys list`).
    public init(username: String, keys: [StoredKey], now: Date, registrationWindow: TimeInterval = 30 * 86_400) {
        let since = now.addingTimeInterval(-registrationWindow)
        self.username = username
        self.keys = keys.map(Key.init)
        self.activeKeys = keys.filter { $0.revokedAt == nil && !$0.reattestationRequired }.count
        self.recentRegistrations = keys.filter { $0.createdAt >= since }.count
    }

    /// One page of a user's keys, with the counts the store made of all of them.
    public init(username: String, page: [StoredKey], activeKeys: Int, recentRegistrations: Int, totalKeys: Int, next: [UInt8]?) {
        self.username = username
        self.keys = page.map(Key.init)
        self.activeKeys = activeKeys
        self.recentRegistrations = recentRegistrations
        self.totalKeys = totalKeys
        self.next = next.map(Base64URL.encode)
    }
}

/// `POST /admin/keys/{keyId}/revoke`'s answer.
public struct RevocationResponse: APIResponse, Hashable {
    public static let schemaName = "Revocation"

    /// base64url.
    public var keyId: String
    public var revokedAt: String

    public init(keyID: [UInt8], revokedAt: Date) {
        self.keyId = Base64URL.encode(keyID)
        self.revokedAt = RFC3339UTC.format(revokedAt)
    }
}

/// A user's passkeys: `GET /admin/users/{username}/passkeys`, a page at a time like the keys.
public struct PasskeyListingResponse: APIResponse, Hashable {
    public static let schemaName = "PasskeyListing"

    public struct Passkey: Encodable, Sendable, Hashable {
        /// base64url.
        public var credentialId: String
        /// The attestation statement format it was registered with.
        public var format: String
        /// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
        public var aaguid: String
        public var signCount: UInt32
        public var backupEligible: Bool
        public var backedUp: Bool
        public var transports: [String]
        public var createdAt: String
        public var lastUsed: String
        /// `active` or `revoked`.
        public var status: String
        public var revokedAt: String?

        public init(_ passkey: StoredPasskey) {
            self.credentialId = Base64URL.encode(passkey.credentialID)
            self.format = passkey.format
            self.aaguid = uuidString(passkey.aaguid)
            self.signCount = passkey.signCount
            self.backupEligible = passkey.backupEligible
            self.backedUp = passkey.backedUp
            self.transports = passkey.transports
            self.createdAt = RFC3339UTC.format(passkey.createdAt)
            self.lastUsed = RFC3339UTC.format(passkey.lastUsed)
            self.status = passkey.revokedAt == nil ? "active" : "revoked"
            self.revokedAt = passkey.revokedAt.map { RFC3339UTC.format($0) }
        }
    }

    public var username: String
    /// One page of the user's passkeys, oldest first.
    public var passkeys: [Passkey]
    /// Passkeys not revoked (of all the user's passkeys, not the page's).
    public var activePasskeys: Int
    /// Passkeys registered within `registrationWindow` before now (likewise).
    public var recentRegistrations: Int
    /// Every passkey of the user, revoked ones included.
    public var totalPasskeys: Int
    /// Pass as `after` for the next page; absent on the last page.
    public var next: String?

    public init(username: String, page: [StoredPasskey], activePasskeys: Int, recentRegistrations: Int, totalPasskeys: Int, next: [UInt8]?) {
        self.username = username
        self.passkeys = page.map(Passkey.init)
        self.activePasskeys = activePasskeys
        self.recentRegistrations = recentRegistrations
        self.totalPasskeys = totalPasskeys
        self.next = next.map(Base64URL.encode)
    }
}

/// `POST /admin/passkeys/{credentialId}/revoke`'s answer.
public struct PasskeyRevocationResponse: APIResponse, Hashable {
    public static let schemaName = "PasskeyRevocation"

    /// base64url.
    public var credentialId: String
    public var revokedAt: String

    public init(credentialID: [UInt8], revokedAt: Date) {
        self.credentialId = Base64URL.encode(credentialID)
        self.revokedAt = RFC3339UTC.format(revokedAt)
    }
}
