//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto

/// What an attestation or an assertion signs, in each of the ways FormAttest's tools name it,
/// and the one derivation of its clientDataHash (the 32 bytes the app passed to App Attest).
///
/// A ``SignedForm`` hashes its RFC 8785 bytes, as the HTTP flows do; a challenge hashes its
/// UTF-8 bytes; raw client data hashes itself; an exact hash is used as given.
public enum ClientData: Sendable, Hashable {
    /// The exact clientDataHash bytes.
    case hash([UInt8])
    /// A challenge text: clientDataHash = SHA-256(UTF-8 bytes of the text).
    case challenge(String)
    /// Client data bytes as the app hashed them: clientDataHash = SHA-256(bytes).
    case bytes([UInt8])
    /// A form: clientDataHash = SHA-256(RFC 8785 form), ``SignedForm/clientDataHash``.
    case form(SignedForm)

    /// The clientDataHash the attestation or assertion must sign.
    public var clientDataHash: [UInt8] {
        switch self {
        case .hash(let bytes): return bytes
        case .challenge(let text): return Array(SHA256.hash(data: Array(text.utf8)))
        case .bytes(let bytes): return Array(SHA256.hash(data: bytes))
        case .form(let form): return form.clientDataHash
        }
    }
}
