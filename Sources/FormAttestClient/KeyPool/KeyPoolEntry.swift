//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestForm
public import Foundation

/// A pre-attested key in the pool: the keyId, its attestation over a server-issued pool
/// challenge, and when it was made.
public struct KeyPoolEntry: Sendable, Hashable, Codable {
    /// The keyId as App Attest returns it (standard base64).
    public var keyId: String
    /// The attestation object (CBOR).
    public var attestation: Data
    /// The pool challenge the attestation was made over (the server issued it, purpose `pool`).
    public var challenge: String
    /// When the key was attested.
    public var createdAt: Date
    /// When the server said the pool challenge expires.
    public var challengeExpiresAt: Date?

    public init(keyId: String, attestation: Data, challenge: String, createdAt: Date, challengeExpiresAt: Date? = nil) {
        self.keyId = keyId
        self.attestation = attestation
        self.challenge = challenge
        self.createdAt = createdAt
        self.challengeExpiresAt = challengeExpiresAt
    }

    /// The on-disk metadata (`metadata.json`).
    struct Metadata: Codable {
        var keyId: String
        var createdAt: Date
        var challengeExpiresAt: Date?
        var format = 1
    }

    /// The entry's directory name: the keyId in base64url (a keyId in base64 may contain `/`).
    var directoryName: String {
        Base64URL.decode(self.keyId).map(Base64URL.encode) ?? self.keyId
    }
}
