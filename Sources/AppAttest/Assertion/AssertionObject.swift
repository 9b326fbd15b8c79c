//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CBOR

/// An App Attest assertion, parsed but not verified: `{signature, authenticatorData}`.
public struct AssertionObject: Sendable, Hashable {
    /// The DER-encoded ECDSA P-256 signature over SHA-256(nonce).
    public let signature: [UInt8]
    /// The authenticator data: 37 bytes, optionally followed by one CBOR map (iOS 27).
    public let authenticatorData: AuthenticatorData
    /// Parses an assertion.
    ///
    /// - Throws: ``AppAttestError/Code/assertionTooLarge`` over ``AppAttestLimits/maximumAssertionSize``;
    ///   ``AppAttestError/Code/malformedAssertion`` for bad CBOR or structure;
    ///   ``AppAttestError/Code/malformedAuthenticatorData`` for bad authenticator data.
    public init(cborEncoded bytes: some Collection<UInt8>) throws(AppAttestError) {
        guard bytes.count <= AppAttestLimits.maximumAssertionSize else {
            throw AppAttestError(
                code: .assertionTooLarge,
                reason: "\(bytes.count) bytes; the limit is \(AppAttestLimits.maximumAssertionSize)"
            )
        }
        let root: CBORItem
        do {
            root = try CBORDecoder.decode(bytes)
        } catch {
            throw AppAttestError.malformedAssertion("CBOR: \(error.reason)")
        }
        guard let entries = root.mapEntries else {
            throw AppAttestError.malformedAssertion("the assertion is not a CBOR map")
        }
        let keys = Set(entries.compactMap { $0.key.textString })
        guard entries.count == 2, keys == ["signature", "authenticatorData"] else {
            throw AppAttestError.malformedAssertion("the assertion must hold exactly signature and authenticatorData")
        }
        guard let signature = root[textKey: "signature"]?.byteString else {
            throw AppAttestError.malformedAssertion("signature is not a byte string")
        }
        guard let authData = root[textKey: "authenticatorData"]?.byteString else {
            throw AppAttestError.malformedAssertion("authenticatorData is not a byte string")
        }
        self.signature = signature
        self.authenticatorData = try AuthenticatorData(bytes: authData, kind: .assertion)
    }
}
