//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Foundation

/// A user's passkey (a WebAuthn credential) as stored: what its registration proved, and the
/// state its assertions move (the sign count, the backup state, the last use).
///
/// The store keeps it beside the user's App Attest keys, with the same lifecycle: listed a page
/// at a time, counted without its registration's blobs, revoked by an operator or by the per-user
/// limit (``PasskeyRegistrationCommit/maximumActiveCredentials``).
public struct StoredPasskey: Sendable, Hashable, Codable {
    /// The credential id (1 to 1023 bytes, WebAuthn §5.1).
    public var credentialID: [UInt8]
    /// The user it was registered for (the caller the service authenticated).
    public var username: String
    /// The WebAuthn user handle (`user.id`) the credential was created for: an assertion that
    /// returns a user handle must return this one.
    public var userHandle: [UInt8]
    /// The credential public key, as its exact COSE bytes.
    public var publicKey: [UInt8]
    /// The last sign count accepted (0 for authenticators without a counter, such as synced passkeys).
    public var signCount: UInt32
    /// The BE flag at registration: the credential may be synced.
    public var backupEligible: Bool
    /// The BS flag of the last accepted ceremony.
    public var backedUp: Bool
    /// The authenticator model's AAGUID (16 bytes; zeros when the authenticator hides it).
    public var aaguid: [UInt8]
    /// The transports the client reported at registration.
    public var transports: [String]
    /// The attestation statement format (`none`, `packed`, `fido-u2f`, `apple`…).
    public var format: String
    public var createdAt: Date
    public var lastUsed: Date
    /// Set by ``OperationalAttestationStore/revokePasskey(credentialID:at:)`` (an operator, or the per-user limit).
    public var revokedAt: Date?
    /// The registration as the client sent it, for evidence records; `nil` when not kept.
    public var registration: PasskeyRegistrationRecord?

    public init(
        credentialID: [UInt8],
        username: String,
        userHandle: [UInt8],
        publicKey: [UInt8],
        signCount: UInt32,
        backupEligible: Bool,
        backedUp: Bool,
        aaguid: [UInt8],
        transports: [String],
        format: String,
        createdAt: Date,
        lastUsed: Date,
        revokedAt: Date? = nil,
        registration: PasskeyRegistrationRecord? = nil
    ) {
        self.credentialID = credentialID
        self.username = username
        self.userHandle = userHandle
        self.publicKey = publicKey
        self.signCount = signCount
        self.backupEligible = backupEligible
        self.backedUp = backedUp
        self.aaguid = aaguid
        self.transports = transports
        self.format = format
        self.createdAt = createdAt
        self.lastUsed = lastUsed
        self.revokedAt = revokedAt
        self.registration = registration
    }
}

/// A passkey's registration as the client sent it: the attestation object and the exact
/// clientDataJSON bytes (with the passkey's ``StoredPasskey/createdAt``, everything needed to
/// verify the registration again).
public struct PasskeyRegistrationRecord: Sendable, Hashable, Codable {
    public var attestationObject: [UInt8]
    public var clientDataJSON: [UInt8]

    public init(attestationObject: [UInt8], clientDataJSON: [UInt8]) {
        self.attestationObject = attestationObject
        self.clientDataJSON = clientDataJSON
    }
}

/// What an accepted passkey assertion writes to its credential, in the same atomic step as the
/// form's replay record (``AssertionCommit/passkey``).
public struct PasskeyUse: Sendable, Hashable {
    public var credentialID: [UInt8]
    /// The sign count the assertion was verified against: the update is a compare-and-set on it,
    /// so of two assertions verified against the same stored state, one is committed.
    public var previousSignCount: UInt32
    /// The assertion's sign count (0 from an authenticator without a counter).
    public var signCount: UInt32
    /// The assertion's BS flag.
    public var backedUp: Bool

    public init(credentialID: [UInt8], previousSignCount: UInt32, signCount: UInt32, backedUp: Bool) {
        self.credentialID = credentialID
        self.previousSignCount = previousSignCount
        self.signCount = signCount
        self.backedUp = backedUp
    }
}

/// Everything a passkey registration writes.
public struct PasskeyRegistrationCommit: Sendable, Hashable {
    public var passkey: StoredPasskey
    /// The server challenges the registration answered (purpose ``ChallengePurpose/passkey``).
    public var challenges: [ChallengeClaim]
    public var now: Date
    /// At most this many active passkeys for the user after the commit (the least recently used
    /// others are revoked at `now` in the same step); `nil`: no limit.
    public var maximumActiveCredentials: Int?
    /// Registered as the user's first passkey, without another's approval (the user had no
    /// active passkey when the flows checked): the store refuses the commit
    /// (``StoreError/Code/passkeyExists``) if the user has an active passkey, or a passkey of
    /// another user handle, when it commits. Two first registrations raced past the flows'
    /// check otherwise both stored (red team r14 F1).
    public var firstPasskey: Bool

    public init(
        passkey: StoredPasskey, challenges: [ChallengeClaim], now: Date, maximumActiveCredentials: Int? = nil, firstPasskey: Bool = false
    ) {
        self.passkey = passkey
        self.challenges = challenges
        self.now = now
        self.maximumActiveCredentials = maximumActiveCredentials
        self.firstPasskey = firstPasskey
    }
}

/// What is listed and counted with a user's keys and passkeys alike: the listing's order (time of
/// registration, then id) and the states the counts filter by.
public protocol ListedCredential {
    /// The id the listing orders ties by: a key's keyId, a passkey's credential id.
    var listingID: [UInt8] { get }
    var createdAt: Date { get }
    /// Whether it may still sign (neither revoked nor marked for re-attestation).
    var isActive: Bool { get }
}

extension StoredKey: ListedCredential {
    public var listingID: [UInt8] { self.keyID }
    public var isActive: Bool { self.revokedAt == nil && !self.reattestationRequired }
}

extension StoredPasskey: ListedCredential {
    public var listingID: [UInt8] { self.credentialID }
    public var isActive: Bool { self.revokedAt == nil }
}

extension StoredPasskey {
    /// ``transports`` as one blob for a store without arrays (SQLite): each name as its UTF-8
    /// length (one byte) and bytes. Names longer than 255 bytes are not kept (no registered
    /// transport comes near; the flows keep the registered names only).
    public static func encodeTransports(_ transports: [String]) -> [UInt8] {
        var bytes: [UInt8] = []
        for name in transports {
            let utf8 = Array(name.utf8)
            guard let length = UInt8(exactly: utf8.count) else { continue }
            bytes.append(length)
            bytes += utf8
        }
        return bytes
    }

    /// The names ``encodeTransports(_:)`` wrote, or `nil` when `bytes` is not such a blob
    /// (a length past the end, invalid UTF-8): a store fails closed on it.
    public static func decodeTransports(_ bytes: [UInt8]) -> [String]? {
        var names: [String] = []
        var rest = bytes[...]
        while let length = rest.popFirst() {
            let name = rest.prefix(Int(length))
            guard name.count == Int(length), let text = String(validating: name, as: UTF8.self) else { return nil }
            names.append(text)
            rest = rest.dropFirst(Int(length))
        }
        return names
    }
}
