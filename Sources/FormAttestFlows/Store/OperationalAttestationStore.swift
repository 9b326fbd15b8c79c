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

    /// Insert-if-absent of an accepted form's hash until `record.expiresAt`.
    /// - Throws: ``StoreError/Code/replay`` when an unexpired record with this hash exists.
    func recordFormHash(_ record: ReplayRecord, now: Date) async throws(StoreError)

    /// Deletes at most `limit` records that expired at or before `now`, in one short atomic step
    /// (housekeeping only; reads already ignore expired records).
    ///
    /// The bound is what keeps housekeeping off the request path: a store that has to delete a
    /// large backlog does it in many small steps, between which other writes run (the service's
    /// purge calls this until a step deletes fewer than `limit`). Records are taken oldest expiry
    /// first, challenges, then form hashes, then rate-limit windows; no live record is ever
    /// deleted, and a step that fails deletes nothing.
    /// - Parameter limit: the most records one call deletes, in all tables together (at least 1).
    /// - Returns: how many records were deleted (fewer than `limit`: no expired record is left),
    ///   and how long the deletion held the writer.
    func purgeExpired(now: Date, limit: Int) async throws(StoreError) -> PurgeStep

    /// Closes the store: lets the calls already running finish, then releases what the store
    /// holds (connections, the client pool, the database file). Every later call throws
    /// ``StoreError/Code/unavailable`` and changes nothing. Idempotent. The HTTP service calls it
    /// when it shuts down, after its servers drained.
    func shutdown() async
}

/// What one step of ``OperationalAttestationStore/purgeExpired(now:limit:)`` did.
public struct PurgeStep: Sendable, Hashable {
    /// The records deleted; fewer than the step's limit: no expired record is left.
    public var deleted: Int
    /// How long the deletion itself held the store's writer: not the wait for the writer, nor the
    /// commit's sync, which the writes of the same transaction share. The service's purge sizes
    /// its steps, and rests between them, by this.
    public var duration: Duration

    public init(deleted: Int, duration: Duration) {
        self.deleted = deleted
        self.duration = duration
    }
}
