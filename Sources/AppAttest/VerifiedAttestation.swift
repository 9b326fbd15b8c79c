//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Crypto
public import Foundation
public import X509

/// What a successful attestation verification establishes.
public struct VerifiedAttestation: Sendable {
    /// The keyId: SHA-256 of the attested key's uncompressed point (32 bytes).
    public let keyID: [UInt8]
    /// The attested P-256 key; every later assertion must verify with it.
    public let publicKey: P256.Signing.PublicKey
    /// The app id whose hash matched rpIdHash.
    public let appID: String
    /// The environment the aaguid names.
    public let environment: AppAttestEnvironment
    /// The counter (always 0 for an attestation).
    public let counter: UInt32
    /// Apple's receipt (CMS), kept for receipt validation and risk-metric refreshes.
    public let receipt: [UInt8]
    /// Whether the receipt verified (signature, chain to Apple Root CA - G3, same app id, key and
    /// clientDataHash). Reported whether or not ``AppAttestPolicy/requireValidReceipt`` is set.
    public let receiptCheck: ReceiptCheck
    /// The OS version from the credential certificate (extension 1.2.840.113635.100.8.7), when present.
    public let osVersion: String?
    /// The iOS 27 authenticator data extensions, when present.
    public let extensions: AuthenticatorExtensions?
    /// The DER value of the credential certificate's access-control extension
    /// (1.2.840.113635.100.8.6, macOS 27's "ACL blob"), when present.
    public let accessControl: [UInt8]?
    /// The parsed authenticator data.
    public let authenticatorData: AuthenticatorData
    /// The credential certificate, then the intermediate, as received in x5c.
    public let certificateChain: [Certificate]
    /// The time the chain was verified at.
    public let verificationTime: Date
}

/// What a successful assertion verification establishes.
public struct VerifiedAssertion: Sendable {
    /// The counter the device signed; store it and require a greater one next time.
    public let counter: UInt32
    /// The app id whose hash matched rpIdHash.
    public let appID: String
    /// The key that signed.
    public let publicKey: P256.Signing.PublicKey
    /// The iOS 27 authenticator data extensions, when present.
    public let extensions: AuthenticatorExtensions?
    /// The parsed authenticator data.
    public let authenticatorData: AuthenticatorData

    /// The keyId of the key that signed (SHA-256 of its uncompressed point), computed when asked
    /// for: callers look keys up by it, so they have it already, and serializing the point costs a
    /// field inversion, which a profile of `assertion.verify` found to be a large part of the
    /// verification beyond the signature check (docs/performance.md).
    public var keyID: [UInt8] { Array(SHA256.hash(data: Array(self.publicKey.x963Representation))) }
}
