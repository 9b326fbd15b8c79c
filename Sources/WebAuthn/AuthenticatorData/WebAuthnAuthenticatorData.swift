//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import CBOR

/// Authenticator data as WebAuthn §6.1 lays it out, read strictly by its flags:
///
/// ```
/// rpIdHash(32) | flags(1) | signCount(4, big-endian)
///   [AT] aaguid(16) | credentialIdLength(2, big-endian) | credentialId | credentialPublicKey (COSE)
///   [ED] extensions (one CBOR map)
/// ```
/// Nothing may follow the parts the flags announce, and a part the flags announce must be there.
/// (App Attest's authenticator data, whose extension map comes without the ED flag, has its own
/// reader in the `AppAttest` module.)
public struct WebAuthnAuthenticatorData: Sendable {
    /// The flags byte (WebAuthn §6.1): bit 0 UP, 2 UV, 3 BE, 4 BS, 6 AT, 7 ED.
    public let flags: UInt8

    /// UP: the user was present.
    public var userPresent: Bool { self.flags & 0x01 != 0 }
    /// UV: the user was verified (biometrics, PIN).
    public var userVerified: Bool { self.flags & 0x04 != 0 }
    /// BE: the credential may be backed up (a synced passkey).
    public var backupEligible: Bool { self.flags & 0x08 != 0 }
    /// BS: the credential is backed up.
    public var backedUp: Bool { self.flags & 0x10 != 0 }
    /// AT: attested credential data follows the counter.
    public var hasAttestedCredentialData: Bool { self.flags & 0x40 != 0 }
    /// ED: an extension map ends the data.
    public var hasExtensions: Bool { self.flags & 0x80 != 0 }

    /// The attested credential data of a registration.
    public struct AttestedCredential: Sendable {
        /// The authenticator model's AAGUID (16 bytes; all zero when not attested).
        public let aaguid: [UInt8]
        /// The credential id (at most 1023 bytes).
        public let credentialID: [UInt8]
        /// The credential public key.
        public let publicKey: CredentialPublicKey
    }

    /// The exact bytes.
    public let rawValue: [UInt8]
    /// SHA-256 of the relying party id.
    public let relyingPartyIDHash: [UInt8]
    /// The signature counter.
    public let signCount: UInt32
    /// Present exactly when the AT flag is set.
    public let attestedCredential: AttestedCredential?
    /// The extension map, present exactly when the ED flag is set.
    public let extensions: CBORItem?

    /// Parses authenticator data.
    ///
    /// - Throws: ``WebAuthnError/Code/malformedAuthenticatorData`` (with the offset),
    ///   ``WebAuthnError/Code/credentialIDTooLong``, ``WebAuthnError/Code/invalidPublicKey``,
    ///   ``WebAuthnError/Code/responseTooLarge``.
    public init(bytes: [UInt8]) throws(WebAuthnError) {
        guard bytes.count <= WebAuthnLimits.maximumAuthenticatorDataSize else {
            throw WebAuthnError(code: .responseTooLarge, reason: "authenticator data has \(bytes.count) bytes")
        }
        var reader = ByteReader(bytes)
        guard let rpIDHash = reader.read(32), let flagsByte = reader.read(1)?.first, let counter = reader.read(4) else {
            throw WebAuthnError.malformedAuthenticatorData("\(bytes.count) byte(s); at least 37 are required")
        }
        self.rawValue = bytes
        self.relyingPartyIDHash = rpIDHash
        self.flags = flagsByte
        self.signCount = counter.reduce(0) { ($0 << 8) | UInt32($1) }

        if flagsByte & 0x40 != 0 {
            guard let aaguid = reader.read(16), let lengthBytes = reader.read(2) else {
                throw WebAuthnError.malformedAuthenticatorData("attested credential data at offset 37 is truncated")
            }
            let length = Int(lengthBytes[0]) << 8 | Int(lengthBytes[1])
            guard length > 0 else {
                throw WebAuthnError.malformedAuthenticatorData("the credential id at offset 55 is empty")
            }
            guard length <= WebAuthnLimits.maximumCredentialIDLength else {
                throw WebAuthnError(code: .credentialIDTooLong, reason: "the credential id has \(length) bytes; at most 1023 are allowed")
            }
            guard let credentialID = reader.read(length) else {
                throw WebAuthnError.malformedAuthenticatorData("credential id length \(length) at offset 53 exceeds the data")
            }
            let keyBytes = try reader.readCBORItem(what: "the credential public key")
            let publicKey = try CredentialPublicKey(item: keyBytes.item, bytes: keyBytes.bytes)
            self.attestedCredential = AttestedCredential(aaguid: aaguid, credentialID: credentialID, publicKey: publicKey)
        } else {
            self.attestedCredential = nil
        }
        if flagsByte & 0x80 != 0 {
            let item = try reader.readCBORItem(what: "the extension map").item
            guard item.mapEntries != nil else {
                throw WebAuthnError.malformedAuthenticatorData("the ED flag is set and the extensions are not a CBOR map")
            }
            self.extensions = item
        } else {
            self.extensions = nil
        }
        guard reader.remaining == 0 else {
            throw WebAuthnError.malformedAuthenticatorData(
                "\(reader.remaining) trailing byte(s) at offset \(bytes.count - reader.remaining) that the flags do not announce"
            )
        }
    }
}

/// A forward-only reader over untrusted bytes: every read is bounded by what remains.
struct ByteReader {
    private var rest: ArraySlice<UInt8>
    private let total: Int

    init(_ bytes: [UInt8]) {
        self.rest = bytes[...]
        self.total = bytes.count
    }

    var remaining: Int { self.rest.count }

    /// The next `count` bytes, or `nil` (nothing consumed) when fewer remain.
    mutating func read(_ count: Int) -> [UInt8]? {
        guard count >= 0, self.rest.count >= count else { return nil }
        defer { self.rest = self.rest.dropFirst(count) }
        return Array(self.rest.prefix(count))
    }

    /// One CBOR item from the current position, with its exact bytes.
    mutating func readCBORItem(what: String) throws(WebAuthnError) -> (item: CBORItem, bytes: [UInt8]) {
        let offset = self.total - self.rest.count
        let decoded: (item: CBORItem, consumed: Int)
        do {
            decoded = try CBORDecoder.decodePrefix(self.rest, limits: .init(maximumDepth: 8, maximumItemCount: 256))
        } catch {
            throw WebAuthnError.malformedAuthenticatorData("\(what) at offset \(offset): \(error.reason)")
        }
        // decodePrefix consumed at most what remains.
        let bytes = self.read(decoded.consumed) ?? []
        return (decoded.item, bytes)
    }
}
