//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// A registration that passed every step of §7.1: what a relying party stores.
public struct VerifiedRegistration: Sendable {
    /// The credential id.
    public let credentialID: [UInt8]
    /// The credential public key (its exact COSE bytes in ``CredentialPublicKey/cborEncoded``).
    public let publicKey: CredentialPublicKey
    /// The sign count at registration.
    public let signCount: UInt32
    /// The attestation format.
    public let format: AttestationFormat
    /// The authenticator model's AAGUID (16 bytes).
    public let aaguid: [UInt8]
    /// The UV flag.
    public let userVerified: Bool
    /// The BE flag: the credential may be synced.
    public let backupEligible: Bool
    /// The BS flag: the credential is backed up.
    public let backedUp: Bool
    /// Whether the attestation certificate chain reached a configured trust anchor; `nil` when the
    /// format carries no certificate (`none`, packed self attestation).
    public let attestationAnchored: Bool?
    /// The transports the client reported.
    public let transports: [String]
    /// `authenticatorAttachment`, when the client reported it.
    public let authenticatorAttachment: String?

    /// The AAGUID in its usual spelling, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (lower case).
    public var aaguidString: String {
        let hex = self.aaguid.map { byte in
            let digits = Array("0123456789abcdef".utf8)
            return String(decoding: [digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]], as: UTF8.self)
        }
        return [hex[0..<4], hex[4..<6], hex[6..<8], hex[8..<10], hex[10..<16]].map { $0.joined() }.joined(separator: "-")
    }
}

/// An assertion that passed every step of §7.2.
public struct VerifiedAuthentication: Sendable {
    /// The credential id the client reported.
    public let credentialID: [UInt8]
    /// The new sign count (store it; 0 for authenticators without a counter, such as synced passkeys).
    public let signCount: UInt32
    /// The UV flag.
    public let userVerified: Bool
    /// The BE flag.
    public let backupEligible: Bool
    /// The BS flag (may change between assertions; store the latest).
    public let backedUp: Bool
    /// The userHandle the client returned, when it did.
    public let userHandle: [UInt8]?
}
