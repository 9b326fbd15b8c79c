//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Foundation

/// A store whose commit parts can also be applied one at a time: inserting a key, advancing a
/// counter, consuming a challenge. The flows never do (they write through the atomic commits
/// only); the store contract checks each part on its own with these, and test fixtures seed
/// state with them. Every store conforms.
public protocol StepwiseAttestationStore: OperationalAttestationStore {
    /// Inserts a key.
    /// - Throws: ``StoreError/Code/duplicateKey`` when a key with this keyId exists.
    func insertKey(_ key: StoredKey) async throws(StoreError)

    /// Compare-and-set: stores `counter` only if the stored counter is strictly smaller, and
    /// clears ``StoredKey/counterFormHash`` with it (no form is known for this counter).
    /// - Returns: `true` when stored, `false` when the stored counter is already ≥ `counter`.
    /// - Throws: ``StoreError/Code/unknownKey`` when no key has this keyId.
    func advanceCounter(keyID: [UInt8], to counter: UInt32, lastUsed: Date) async throws(StoreError) -> Bool

    /// Consumes a challenge exactly once: it must exist, be unused, unexpired at `now`, and match
    /// the claim's purpose and user. Of concurrent consumers of one challenge, one wins.
    /// - Throws: ``StoreError/Code/challengeInvalid`` otherwise, changing nothing.
    func consumeChallenge(_ claim: ChallengeClaim, now: Date) async throws(StoreError)
}
