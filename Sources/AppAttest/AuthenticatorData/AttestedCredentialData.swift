//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CBOR

/// The attested credential data of an attestation's authenticator data.
public struct AttestedCredentialData: Sendable, Hashable {
    /// The 16-byte aaguid, which names Apple's environment.
    public let aaguid: [UInt8]
    /// The credential id; App Attest makes it the keyId.
    public let credentialID: [UInt8]
    /// The credential public key.
    public let publicKey: COSEKey
    /// Where the COSE key stood in the authenticator data.
    public let publicKeyRange: Range<Int>

    /// WebAuthn caps credential ids at 1023 bytes.
    static let maximumCredentialIDLength = 1023

    /// Reads attested credential data from the start of `bytes`.
    ///
    /// - Parameters:
    ///   - bytes: the bytes after the counter.
    ///   - offset: where `bytes` starts in the authenticator data (for error messages and ranges).
    /// - Returns: the value and the number of bytes it used.
    static func parse(_ bytes: ArraySlice<UInt8>, offset: Int) throws(AppAttestError) -> (Self, consumed: Int) {
        var rest = bytes
        guard rest.count >= 18 else {
            throw AppAttestError.malformedAuthenticatorData(
                "attested credential data at offset \(offset) is truncated (\(rest.count) byte(s))"
            )
        }
        let aaguid = Array(rest.prefix(16))
        rest = rest.dropFirst(16)
        let lengthBytes = rest.prefix(2)
        rest = rest.dropFirst(2)
        let credentialIDLength = lengthBytes.reduce(0) { ($0 << 8) | Int($1) }
        guard credentialIDLength <= Self.maximumCredentialIDLength, credentialIDLength <= rest.count else {
            throw AppAttestError.malformedAuthenticatorData(
                "credentialId length \(credentialIDLength) at offset \(offset + 16) exceeds the data"
            )
        }
        let credentialID = Array(rest.prefix(credentialIDLength))
        rest = rest.dropFirst(credentialIDLength)

        let keyOffset = offset + (bytes.count - rest.count)
        let decoded: (item: CBORItem, consumed: Int)
        do {
            decoded = try CBORDecoder.decodePrefix(rest)
        } catch {
            throw AppAttestError.malformedAuthenticatorData("COSE key at offset \(keyOffset): \(error.reason)")
        }
        let publicKey = try COSEKey(cbor: decoded.item)
        let credential = Self(
            aaguid: aaguid,
            credentialID: credentialID,
            publicKey: publicKey,
            publicKeyRange: keyOffset..<(keyOffset + decoded.consumed)
        )
        return (credential, bytes.count - rest.count + decoded.consumed)
    }
}
