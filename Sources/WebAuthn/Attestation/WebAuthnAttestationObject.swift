//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import CBOR

/// A WebAuthn attestation object (§6.5): the CBOR map `{fmt, attStmt, authData}`, nothing else.
public struct WebAuthnAttestationObject: Sendable {
    /// The attestation statement format identifier (`none`, `packed`, ...).
    public let format: String
    /// The attestation statement, a CBOR map whose syntax the format defines.
    public let statement: CBORItem
    /// The authenticator data.
    public let authenticatorData: WebAuthnAuthenticatorData

    /// Parses an attestation object.
    ///
    /// - Throws: ``WebAuthnError/Code/responseTooLarge``, ``WebAuthnError/Code/malformedAttestation``
    ///   and the authenticator data's errors.
    public init(bytes: [UInt8]) throws(WebAuthnError) {
        guard bytes.count <= WebAuthnLimits.maximumAttestationObjectSize else {
            throw WebAuthnError(code: .responseTooLarge, reason: "the attestation object has \(bytes.count) bytes")
        }
        let item: CBORItem
        do {
            item = try CBORDecoder.decode(bytes, limits: .init(maximumDepth: 8, maximumItemCount: 512))
        } catch {
            throw WebAuthnError.malformedAttestation("the attestation object is not one strict CBOR item: \(error.reason)")
        }
        guard let entries = item.mapEntries else {
            throw WebAuthnError.malformedAttestation("the attestation object is not a CBOR map")
        }
        let names = entries.compactMap { $0.key.textString }
        guard names.count == entries.count, Set(names) == ["fmt", "attStmt", "authData"] else {
            throw WebAuthnError.malformedAttestation("the attestation object's keys are not exactly fmt, attStmt and authData")
        }
        guard let format = item[textKey: "fmt"]?.textString else {
            throw WebAuthnError.malformedAttestation("fmt is not a text string")
        }
        guard let statement = item[textKey: "attStmt"], statement.mapEntries != nil else {
            throw WebAuthnError.malformedAttestation("attStmt is not a CBOR map")
        }
        guard let authData = item[textKey: "authData"]?.byteString else {
            throw WebAuthnError.malformedAttestation("authData is not a byte string")
        }
        self.format = format
        self.statement = statement
        self.authenticatorData = try WebAuthnAuthenticatorData(bytes: authData)
    }
}
