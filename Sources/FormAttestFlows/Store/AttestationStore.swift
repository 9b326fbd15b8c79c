//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
public import Foundation

/// What the flows need of the state FormAttest shares between verifier instances: attested keys
/// with their counters, issued challenges, and the hashes of forms already accepted.
///
/// Every operation is atomic on its own, and the two commits are atomic as a whole: a commit
/// either applies every part or none (so there is never a key without its replay record, nor a
/// consumed challenge without an accepted form). Correctness never depends on a background
/// expiry job: every read is given `now` and ignores records that expired by then.
///
/// Errors are ``StoreError``; an implementation that cannot reach its storage throws
/// ``StoreError/Code/unavailable`` and has changed nothing.
///
/// The flows take this protocol and nothing wider. ``OperationalAttestationStore`` adds what a
/// running service needs around them (rate limits, revocation, housekeeping, the health probe),
/// and ``StepwiseAttestationStore`` each part of the commits on its own (for the store contract).
public protocol AttestationStore: Sendable {
    /// The key with this keyId, or `nil`.
    func loadKey(keyID: [UInt8]) async throws(StoreError) -> StoredKey?

    /// Marks a key as requiring a new attestation (its validly signed counter went backwards: a
    /// cloned key or a restored device). The mark is permanent: the key is never accepted again.
    /// Idempotent.
    /// - Throws: ``StoreError/Code/unknownKey`` when no key has this keyId.
    func requireReattestation(keyID: [UInt8]) async throws(StoreError)

    /// The user's keys, active and revoked, oldest first, with their registrations' blobs. Every
    /// key of the user: for tools and tests; the service lists keys a page at a time
    /// (``OperationalAttestationStore/keys(username:after:limit:)``) and counts them with
    /// ``countKeys(username:_:)``.
    func keys(username: String) async throws(StoreError) -> [StoredKey]

    /// How many of the user's keys match `filter`, counted by the store without reading any key's
    /// registration (receipt, attestation object): a registration reports the user's recent
    /// registrations with it, however many keys the user has.
    func countKeys(username: String, _ filter: KeyCountFilter) async throws(StoreError) -> Int

    /// Compare-and-set of a key's receipt (after a risk-metric refresh): stores `receipt` only if
    /// the stored one is still `previous`, so that concurrent refreshes cannot overwrite a newer one.
    /// - Returns: `true` when stored, `false` when the stored receipt is no longer `previous`.
    /// - Throws: ``StoreError/Code/unknownKey`` when no key has this keyId.
    func replaceReceipt(keyID: [UInt8], previous: [UInt8], with receipt: [UInt8]) async throws(StoreError) -> Bool

    /// Records an issued challenge.
    /// - Throws: ``StoreError/Code/duplicateChallenge`` when the value was issued before.
    func issueChallenge(_ challenge: IssuedChallenge) async throws(StoreError)

    /// Whether an unexpired record of this form hash exists at `now`. Read-only: flows use it to
    /// name a rejection (a resubmitted form is a replay), never to decide an acceptance.
    func isFormHashRecorded(_ formHash: [UInt8], now: Date) async throws(StoreError) -> Bool

    /// Registers a key in one atomic step: consumes every claimed challenge, records the form
    /// hash and inserts the key, or does none of it. With ``RegistrationCommit/maximumActiveKeys``,
    /// the user's least recently used active keys beyond that number (the new one counted) are
    /// revoked at `now` in the same step.
    /// - Throws: the code of the first part that fails: ``StoreError/Code/challengeInvalid``,
    ///   ``StoreError/Code/replay`` or ``StoreError/Code/duplicateKey``.
    func commitRegistration(_ commit: RegistrationCommit) async throws(StoreError)

    /// Accepts a form's signatures in one atomic step: consumes every claimed challenge, records
    /// the form hash, advances the App Attest key's counter (compare-and-set, strictly greater),
    /// together with its ``StoredKey/counterFormHash`` (the replay record's hash) and the key's
    /// ``StoredKey/lastSignals`` when the commit carries signals, and, when the commit carries a
    /// passkey's assertion (``AssertionCommit/passkey``), moves that credential's sign count
    /// (compare-and-set on the count the assertion was verified against), or does none of it.
    /// The one replay record is what refuses a form accepted once, whichever signatures it carries.
    /// - Throws: ``StoreError/Code/challengeInvalid``, ``StoreError/Code/replay``,
    ///   ``StoreError/Code/unknownKey`` (no such key or passkey, or a commit with neither) or
    ///   ``StoreError/Code/staleCounter`` (the key's counter or the passkey's sign count moved).
    func commitAssertion(_ commit: AssertionCommit) async throws(StoreError)

    /// The passkey with this credential id, or `nil`.
    func loadPasskey(credentialID: [UInt8]) async throws(StoreError) -> StoredPasskey?

    /// The user's passkeys, active and revoked, oldest first (by registration time, then credential id).
    func passkeys(username: String) async throws(StoreError) -> [StoredPasskey]

    /// What a passkey registration needs of the user's passkeys, read without any registration
    /// blob: the user handle their first passkey was created for (nil when they have none) and
    /// the credential ids of their active passkeys (at most ``PasskeyCredentials/maximumActive``).
    func passkeyCredentials(username: String) async throws(StoreError) -> PasskeyCredentials

    /// How many of the user's passkeys match `filter`, counted by the store without reading any
    /// registration blob.
    func countPasskeys(username: String, _ filter: KeyCountFilter) async throws(StoreError) -> Int

    /// Registers a passkey in one atomic step: consumes every claimed challenge and inserts the
    /// credential, or does neither. With ``PasskeyRegistrationCommit/maximumActiveCredentials``,
    /// the user's least recently used active passkeys beyond that number (the new one counted)
    /// are revoked at `now` in the same step.
    /// - Throws: ``StoreError/Code/challengeInvalid`` or ``StoreError/Code/duplicateKey`` (the
    ///   credential id is registered, to this user or another).
    func commitPasskeyRegistration(_ commit: PasskeyRegistrationCommit) async throws(StoreError)
}

/// What ``AttestationStore/passkeyCredentials(username:)`` reads: what registering another
/// passkey for a user needs, and no more (red team r5 F8: every registration read every passkey
/// of the user with its registration blob, revoked ones included).
public struct PasskeyCredentials: Sendable, Hashable {
    /// The most active credential ids read (a user's active passkeys are bounded by
    /// `max-passkeys-per-user`, which is at most this).
    public static let maximumActive = 1_000

    /// The user handle the user's first passkey (by registration time, then credential id) was
    /// created for; nil when the user has no passkey, active or revoked.
    public var userHandle: [UInt8]?
    /// The credential ids of the user's active passkeys, oldest first.
    public var activeCredentialIDs: [[UInt8]]

    public init(userHandle: [UInt8]?, activeCredentialIDs: [[UInt8]]) {
        self.userHandle = userHandle
        self.activeCredentialIDs = activeCredentialIDs
    }
}

/// Which of a user's keys ``AttestationStore/countKeys(username:_:)`` counts.
public enum KeyCountFilter: Sendable, Hashable {
    /// Every key, revoked ones included.
    case all
    /// Keys neither revoked nor marked for re-attestation.
    case active
    /// Keys registered at or after this time, revoked ones included.
    case createdSince(Date)

    /// Whether `key` (an App Attest key or a passkey) is counted.
    public func matches(_ key: some ListedCredential) -> Bool {
        switch self {
        case .all: true
        case .active: key.isActive
        case .createdSince(let date): key.createdAt >= date
        }
    }
}

/// Where a page of a user's keys (or passkeys) ends: the last one's registration time and keyId
/// (or credential id): they are listed by both, in that order.
public struct KeyPosition: Sendable, Hashable {
    public var createdAt: Date
    public var keyID: [UInt8]

    public init(createdAt: Date, keyID: [UInt8]) {
        self.createdAt = createdAt
        self.keyID = keyID
    }

    /// The position of `key` (an App Attest key or a passkey).
    public init(_ key: some ListedCredential) {
        self.init(createdAt: key.createdAt, keyID: key.listingID)
    }

    /// Whether `key` comes after this position in the listing's order.
    public func precedes(_ key: some ListedCredential) -> Bool {
        key.createdAt != self.createdAt ? key.createdAt > self.createdAt : self.keyID.lexicographicallyPrecedes(key.listingID)
    }
}

/// An attested key as stored.
public struct StoredKey: Sendable, Hashable, Codable {
    public var keyID: [UInt8]
    public var username: String
    /// The uncompressed P-256 point (65 bytes).
    public var publicKey: [UInt8]
    public var counter: UInt32
    public var appID: String
    /// Stored as its raw value (`development`, `production`); a store refuses to read any other
    /// (``StoreError/Code/unavailable``) rather than guess.
    public var environment: AppAttestEnvironment
    /// Apple's receipt, kept for receipt validation and risk-metric refreshes.
    public var receipt: [UInt8]
    public var createdAt: Date
    public var lastUsed: Date
    /// Set by ``AttestationStore/requireReattestation(keyID:)``: the key is refused for good.
    public var reattestationRequired: Bool
    /// Set by ``OperationalAttestationStore/revokeKey(keyID:at:)`` (an operator, or the per-user limit).
    public var revokedAt: Date?
    /// The iOS 27 signals of the last attestation or assertion of this key that carried any
    /// (`nil`: none yet, such as every key of a device before iOS 27).
    public var lastSignals: KeySignals?
    /// The attestation that registered the key, as the device sent it: what an evidence record
    /// carries so that the key can be proven Apple-attested offline, years later. `nil` for keys
    /// registered before FormAttest kept it.
    public var attestation: KeyAttestation?
    /// The hash of the form whose accepted signature set ``counter``: the registering form (an
    /// attestation's counter is 0; a pooled key's first assertion signs its form), then each
    /// accepted assertion's form, written with the counter by the same atomic update. It is what
    /// lets the flows prove a clone: an honest device signs each counter value once, so the same
    /// counter over a different form is two devices. `nil` when not known (keys stored before
    /// FormAttest kept it, or a counter moved by ``StepwiseAttestationStore/advanceCounter(keyID:to:lastUsed:)``).
    public var counterFormHash: [UInt8]?

    public init(
        keyID: [UInt8],
        username: String,
        publicKey: [UInt8],
        counter: UInt32,
        appID: String,
        environment: AppAttestEnvironment,
        receipt: [UInt8],
        createdAt: Date,
        lastUsed: Date,
        reattestationRequired: Bool = false,
        revokedAt: Date? = nil,
        lastSignals: KeySignals? = nil,
        attestation: KeyAttestation? = nil,
        counterFormHash: [UInt8]? = nil
    ) {
        self.keyID = keyID
        self.username = username
        self.publicKey = publicKey
        self.counter = counter
        self.appID = appID
        self.environment = environment
        self.receipt = receipt
        self.createdAt = createdAt
        self.lastUsed = lastUsed
        self.reattestationRequired = reattestationRequired
        self.revokedAt = revokedAt
        self.lastSignals = lastSignals
        self.attestation = attestation
        self.counterFormHash = counterFormHash
    }
}

/// The attestation that registered a key: the CBOR attestation object and the clientDataHash it
/// was made over (a form's hash, or a pool challenge). With the key's ``StoredKey/createdAt`` (the
/// time it was verified at), it is everything needed to verify it again.
public struct KeyAttestation: Sendable, Hashable, Codable {
    public var object: [UInt8]
    /// 32 bytes.
    public var clientDataHash: [UInt8]

    public init(object: [UInt8], clientDataHash: [UInt8]) {
        self.object = object
        self.clientDataHash = clientDataHash
    }
}

/// The iOS 27 signals one attestation or assertion carried, as a key keeps them: what an operator
/// looks at to see which builds and distribution channels its keys sign from. At least one field
/// is set (a map without any of these signals is not recorded).
public struct KeySignals: Sendable, Hashable, Codable {
    /// `apple_validation_category_01` as its number (4: App Store, ...).
    public var validationCategory: UInt32?
    /// `apple_bundle_version_01`, as sent.
    public var bundleVersion: String?
    /// `apple_cd_hash_hash_01`.
    public var cdHash: [UInt8]?
    /// `apple_cd_hash_type_01` (2: SHA-256).
    public var cdHashType: UInt32?

    public init(validationCategory: UInt32? = nil, bundleVersion: String? = nil, cdHash: [UInt8]? = nil, cdHashType: UInt32? = nil) {
        self.validationCategory = validationCategory
        self.bundleVersion = bundleVersion
        self.cdHash = cdHash
        self.cdHashType = cdHashType
    }

    /// Whether no field is set.
    public var isEmpty: Bool {
        self.validationCategory == nil && self.bundleVersion == nil && self.cdHash == nil && self.cdHashType == nil
    }
}

/// What a challenge is for.
public enum ChallengePurpose: String, Sendable, Hashable, Codable, CaseIterable {
    /// Answered by one signed form (default lifetime 120 s).
    case form
    /// Attested by a pooled key for an app extension (default lifetime 30 days).
    case pool
    /// Answered by one passkey registration (WebAuthn's server challenge; default lifetime 120 s).
    case passkey
}

/// A challenge the server issued.
public struct IssuedChallenge: Sendable, Hashable, Codable {
    /// 32 random bytes.
    public var value: [UInt8]
    public var purpose: ChallengePurpose
    /// The user it was issued to, when it was issued to one.
    public var username: String?
    public var issuedAt: Date
    public var expiresAt: Date

    public init(value: [UInt8], purpose: ChallengePurpose, username: String?, issuedAt: Date, expiresAt: Date) {
        self.value = value
        self.purpose = purpose
        self.username = username
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
    }
}

/// A request to consume a challenge.
public struct ChallengeClaim: Sendable, Hashable {
    public var value: [UInt8]
    public var purpose: ChallengePurpose
    /// The requesting user; a challenge issued to a user is only consumed by that user.
    public var username: String?

    public init(value: [UInt8], purpose: ChallengePurpose, username: String?) {
        self.value = value
        self.purpose = purpose
        self.username = username
    }

    /// Whether `challenge` may be consumed by this claim at `now` (unused-ness is the store's).
    public func matches(_ challenge: IssuedChallenge, now: Date) -> Bool {
        challenge.value == self.value && challenge.purpose == self.purpose && now < challenge.expiresAt
            && (challenge.username == nil || challenge.username.map { Array($0.utf8) } == self.username.map { Array($0.utf8) })
    }
}

/// The hash of an accepted form, kept until it could no longer be accepted anyway.
public struct ReplayRecord: Sendable, Hashable, Codable {
    public var formHash: [UInt8]
    public var expiresAt: Date

    public init(formHash: [UInt8], expiresAt: Date) {
        self.formHash = formHash
        self.expiresAt = expiresAt
    }
}

/// Everything a key registration writes.
public struct RegistrationCommit: Sendable, Hashable {
    public var key: StoredKey
    public var replay: ReplayRecord
    public var challenges: [ChallengeClaim]
    public var now: Date
    /// At most this many active keys for the user after the commit; `nil`: no limit.
    public var maximumActiveKeys: Int?

    public init(key: StoredKey, replay: ReplayRecord, challenges: [ChallengeClaim], now: Date, maximumActiveKeys: Int? = nil) {
        self.key = key
        self.replay = replay
        self.challenges = challenges
        self.now = now
        self.maximumActiveKeys = maximumActiveKeys
    }
}

/// One fixed window of a rate limit: `id` names what is counted (a digest of the endpoint and
/// the user or the client address: no username is stored in the clear), `start` the window.
public struct RateLimitWindow: Sendable, Hashable {
    /// 32 bytes.
    public var id: [UInt8]
    public var start: Date
    /// When the window's record may be deleted (its end).
    public var expiresAt: Date

    public init(id: [UInt8], start: Date, expiresAt: Date) {
        self.id = id
        self.start = start
        self.expiresAt = expiresAt
    }
}

/// Everything an accepted form's signatures write: an App Attest assertion's, a passkey
/// assertion's, or both, with the form's one replay record.
public struct AssertionCommit: Sendable, Hashable {
    /// The App Attest key whose counter moves; `nil` when a passkey alone signed the form.
    public var keyID: [UInt8]?
    /// The App Attest assertion's counter (unused without ``keyID``).
    public var counter: UInt32
    public var replay: ReplayRecord
    public var challenges: [ChallengeClaim]
    public var now: Date
    /// The signals the assertion carried: they become the key's ``StoredKey/lastSignals``, with
    /// the counter. `nil` (an assertion without them) leaves the stored ones as they are.
    public var signals: KeySignals?
    /// The passkey assertion over the same form, when the request carried one: its credential's
    /// sign count moves in the same atomic step.
    public var passkey: PasskeyUse?

    public init(
        keyID: [UInt8]?,
        counter: UInt32,
        replay: ReplayRecord,
        challenges: [ChallengeClaim],
        now: Date,
        signals: KeySignals? = nil,
        passkey: PasskeyUse? = nil
    ) {
        self.keyID = keyID
        self.counter = counter
        self.replay = replay
        self.challenges = challenges
        self.now = now
        self.signals = signals
        self.passkey = passkey
    }

    /// A form signed by a passkey alone.
    public init(passkey: PasskeyUse, replay: ReplayRecord, challenges: [ChallengeClaim], now: Date) {
        self.init(keyID: nil, counter: 0, replay: replay, challenges: challenges, now: now, passkey: passkey)
    }
}

/// The one error type of the stores.
public struct StoreError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Backing: String, Hashable, Sendable, CaseIterable {
            case duplicateKey = "duplicate_key"
            case unknownKey = "unknown_key"
            case staleCounter = "stale_counter"
            case duplicateChallenge = "duplicate_challenge"
            case challengeInvalid = "challenge_invalid"
            case replay = "replay"
            case revoked = "revoked"
            case keyRevoked = "key_revoked"
            case passkeyExists = "passkey_exists"
            case unavailable = "store_unavailable"
        }

        fileprivate let backing: Backing
        fileprivate init(_ backing: Backing) { self.backing = backing }

        /// Every code of the stores (the error table in docs/errors.md is generated from them).
        public static var allCases: [Code] { Backing.allCases.map(Code.init) }

        public var identifier: String { self.backing.rawValue }
        /// What the code means, in a line (as the flows answer it, docs/errors.md is generated from
        /// the flows' code: the renamed ones are the flows' own).
        public var summary: String {
            switch self.backing {
            case .duplicateKey: "the keyId or credential id is stored already"
            case .unknownKey: "no stored key has this keyId"
            case .staleCounter: "another commit advanced the key's counter first (the compare-and-set refused this one)"
            case .duplicateChallenge: "the challenge was issued already"
            case .challengeInvalid: "the challenge is unknown, expired, used, or for another purpose or user"
            case .replay: "this form was accepted already"
            case .revoked: "the passkey was revoked before the commit"
            case .passkeyExists: "the user registered a passkey since this registration was checked: it needs that passkey's approval"
            case .keyRevoked: "the key was revoked (by an operator, or as the least recently used beyond the per-user limit)"
            case .unavailable: "the store failed; nothing was written (fail closed)"
            }
        }

        public var description: String { self.backing.rawValue }

        public static let duplicateKey = Code(.duplicateKey)
        public static let unknownKey = Code(.unknownKey)
        public static let staleCounter = Code(.staleCounter)
        public static let duplicateChallenge = Code(.duplicateChallenge)
        public static let challengeInvalid = Code(.challengeInvalid)
        public static let replay = Code(.replay)
        /// The passkey was revoked before the commit (after the flows loaded it): its revocation
        /// is checked in the commit's compare-and-set, not only when it is loaded.
        public static let revoked = Code(.revoked)
        /// The App Attest key was revoked before the commit (after the flows loaded it), as
        /// ``revoked`` for a passkey.
        public static let keyRevoked = Code(.keyRevoked)
        /// A first passkey's commit found the user with an active passkey, or one of another user
        /// handle, registered since the flows checked (``PasskeyRegistrationCommit/firstPasskey``).
        public static let passkeyExists = Code(.passkeyExists)
        /// The storage could not be reached or failed; nothing was changed.
        public static let unavailable = Code(.unavailable)
    }

    public let code: Code
    public let reason: String

    public init(code: Code, reason: String) {
        self.code = code
        self.reason = reason
    }

    public var description: String { "\(self.code.identifier): \(self.reason)" }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(self.code) }
}
