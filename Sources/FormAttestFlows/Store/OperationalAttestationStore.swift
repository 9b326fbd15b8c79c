//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Foundation

/// A store as a running service uses it: the flows' ``AttestationStore``, plus rate-limit
/// counting, operators' revocation, housekeeping, the health probe's write, and an orderly
/// shutdown.
///
/// The same rules hold: every operation is atomic, and errors are ``StoreError``.
public protocol OperationalAttestationStore: AttestationStore {
    /// Revokes a key: every later assertion with it is refused (401 `key_revoked`). Idempotent:
    /// the first revocation's time is kept.
    /// - Throws: ``StoreError/Code/unknownKey`` when no key has this keyId.
    func revokeKey(keyID: [UInt8], at date: Date) async throws(StoreError)

    /// At most `limit` of the user's keys after `position` (from the first when `nil`), ordered
    /// by registration time then keyId: the operators' paged listing. Pass the last key's
    /// position to get the next page.
    func keys(username: String, after position: KeyPosition?, limit: Int) async throws(StoreError) -> [StoredKey]

    /// Revokes a passkey: every later assertion with it is refused. Idempotent: the first
    /// revocation's time is kept.
    /// - Throws: ``StoreError/Code/unknownKey`` when no passkey has this credential id.
    func revokePasskey(credentialID: [UInt8], at date: Date) async throws(StoreError)

    /// At most `limit` of the user's passkeys after `position` (from the first when `nil`),
    /// ordered by registration time then credential id, as ``keys(username:after:limit:)``.
    func passkeys(username: String, after position: KeyPosition?, limit: Int) async throws(StoreError) -> [StoredPasskey]

    /// Adds one request to a rate-limit window and returns the window's count after it,
    /// atomically (across instances sharing the store): two concurrent callers never both see
    /// the same count.
    func countRequest(in window: RateLimitWindow) async throws(StoreError) -> Int

    /// Takes one request back out of a rate-limit window, atomically, never below zero: for a
    /// budget that bounds what is stored, a request that stored nothing gives back what it spent.
    /// A window that does not exist (expired, purged) stays absent.
    func refundRequest(in window: RateLimitWindow) async throws(StoreError)

    /// Insert-if-absent of an accepted form's hash until `record.expiresAt`.
    /// - Throws: ``StoreError/Code/replay`` when an unexpired record with this hash exists.
    func recordFormHash(_ record: ReplayRecord, now: Date) async throws(StoreError)

    /// Deletes at most `limit` records that expired at or before `now`, in one short atomic step
    /// (housekeeping only; reads already ignore expired records).
    ///
    /// The bound is what keeps housekeeping off the request path: a store that has to delete a
    /// large backlog does it in many small steps, between which other writes run (the service's
    /// purge calls this, with the same `now`, until a step says it is ``PurgeStep/complete``). No
    /// live record is ever deleted, and a step that fails deletes nothing. The order within a pass
    /// is the store's: the memory and MongoDB stores take the oldest expiry first (challenges,
    /// form hashes, rate-limit windows); the SQLite store takes challenges and rate-limit windows
    /// that way and sweeps its form hashes in key order, so that a step rewrites a few adjacent
    /// pages rather than one page for every record (docs/performance.md, "Sustained operation").
    /// - Parameters:
    ///   - now: the time a record's expiry is compared with.
    ///   - limit: the most records one call deletes, in all tables together (at least 1).
    /// - Returns: how many records were deleted, whether nothing expired as of `now` is left, and
    ///   how long the step held the writer.
    func purgeExpired(now: Date, limit: Int) async throws(StoreError) -> PurgeStep

    /// Deletes at most `limit` App Attest keys and passkeys revoked at or before `cutoff`, each
    /// with its registration (receipt, attestation object; a passkey's attestation object and
    /// clientDataJSON), oldest revocation first (keys, then passkeys), in one short atomic step
    /// through an index on the revocation time: the retention of revoked credentials.
    ///
    /// As ``purgeExpired(now:limit:)``: housekeeping in small steps that the service's purge calls,
    /// with the same `cutoff`, until one says it is ``PurgeStep/complete``; a step that fails
    /// deletes nothing. An active key or passkey (no revocation time) is never deleted, nor one
    /// marked for re-attestation but not revoked. A deleted key is then unknown to every
    /// operation, exactly as a keyId never registered.
    ///
    /// The caller chooses `cutoff` no later than the start of every window the store's counts
    /// look back over (``KeyCountFilter/createdSince(_:)``): a key revoked before that window
    /// was created before it too, so no count the service makes changes when it goes.
    /// - Parameters:
    ///   - cutoff: the latest revocation time deleted.
    ///   - limit: the most keys and passkeys one call deletes, together (at least 1).
    func purgeRevoked(before cutoff: Date, limit: Int) async throws(StoreError) -> PurgeStep

    /// Closes the store: lets the calls already running finish, then releases what the store
    /// holds (connections, the client pool, the database file). Every later call throws
    /// ``StoreError/Code/unavailable`` and changes nothing. Idempotent. The HTTP service calls it
    /// when it shuts down, after its servers drained.
    func shutdown() async
}

/// What one step of ``OperationalAttestationStore/purgeExpired(now:limit:)`` did.
public struct PurgeStep: Sendable, Hashable {
    /// The records deleted (at most the step's limit).
    public var deleted: Int
    /// How long the step held the store's writer, as the store can tell: on SQLite the step's own
    /// transaction from `BEGIN` to the end of its `COMMIT` (the sync included); elsewhere the
    /// deletion's round trips. The service's purge sizes its steps, and rests between them, by this.
    public var duration: Duration
    /// Whether the pass is over: no record that expired as of the step's `now` is left (for the
    /// stores that take the oldest expiry first, the step deleted fewer than its limit; for a
    /// sweep in key order, the sweep reached the end of every table).
    public var complete: Bool
    /// Where ``duration`` went, for stores that can tell (SQLite); `nil` elsewhere.
    public var phases: Phases?

    /// A step's time split into its phases (SQLite: `BEGIN IMMEDIATE`, the statements, `COMMIT`).
    public struct Phases: Sendable, Hashable {
        /// Waiting for the write lock (another connection holding it: a checkpoint, another process).
        public var lockWait: Duration
        /// The step's statements, inside the transaction.
        public var statements: Duration
        /// The commit: the log's write and sync.
        public var commit: Duration

        public init(lockWait: Duration, statements: Duration, commit: Duration) {
            self.lockWait = lockWait
            self.statements = statements
            self.commit = commit
        }
    }

    public init(deleted: Int, duration: Duration, complete: Bool, phases: Phases? = nil) {
        self.deleted = deleted
        self.duration = duration
        self.complete = complete
        self.phases = phases
    }
}
