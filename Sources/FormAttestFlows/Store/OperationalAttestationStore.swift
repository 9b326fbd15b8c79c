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

    /// Adds one request to a rate-limit window and returns the window's count after it,
    /// atomically (across instances sharing the store): two concurrent callers never both see
    /// the same count.
    func countRequest(in window: RateLimitWindow) async throws(StoreError) -> Int

    /// Insert-if-absent of an accepted form's hash until `record.expiresAt`.
    /// - Throws: ``StoreError/Code/replay`` when an unexpired record with this hash exists.
    func recordFormHash(_ record: ReplayRecord, now: Date) async throws(StoreError)

    /// Deletes records that expired before `now` (housekeeping only; reads already ignore them).
    /// - Returns: how many records were deleted.
    func purgeExpired(now: Date) async throws(StoreError) -> Int

    /// Closes the store: lets the calls already running finish, then releases what the store
    /// holds (connections, the client pool, the database file). Every later call throws
    /// ``StoreError/Code/unavailable`` and changes nothing. Idempotent. The HTTP service calls it
    /// when it shuts down, after its servers drained.
    func shutdown() async
}
