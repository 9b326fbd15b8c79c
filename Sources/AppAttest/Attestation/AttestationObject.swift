//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CBOR

/// An `apple-appattest` attestation object, parsed but not verified.
///
/// The CBOR map must hold exactly `fmt`, `attStmt` and `authData`; `attStmt` exactly `x5c`
/// (an array of byte strings) and `receipt` (a byte string). Unknown keys are rejected.
public struct AttestationObject: Sendable, Hashable {
    /// The only format App Attest produces.
    public static let appleFormat = "apple-appattest"

    /// `fmt`.
    public let format: String
    /// The `apple-appattest` attestation statement.
    public let statement: AppleAppAttestStatement
    /// `authData`, parsed; its ``AuthenticatorData/rawValue`` holds the exact bytes.
    public let authenticatorData: AuthenticatorData
    /// Parses an attestation object.
    ///
    /// - Throws: ``AppAttestError/Code/attestationTooLarge`` over ``AppAttestLimits/maximumAttestationSize``;
    ///   ``AppAttestError/Code/malformedAttestation`` for bad CBOR or structure;
    ///   ``AppAttestError/Code/unsupportedFormat`` when `fmt` is not `apple-appattest`;
    ///   ``AppAttestError/Code/malformedAuthenticatorData`` for bad authenticator data.
    public init(cborEncoded bytes: some Collection<UInt8>) throws(AppAttestError) {
        guard bytes.count <= AppAttestLimits.maximumAttestationSize else {
            throw AppAttestError(
                code: .attestationTooLarge,
                reason: "\(bytes.count) bytes; the limit is \(AppAttestLimits.maximumAttestationSize)"
            )
        }
        let root: CBORItem
        do {
            root = try CBORDecoder.decode(bytes)
        } catch {
            throw AppAttestError.malformedAttestation("CBOR: \(error.reason)")
        }
        guard let entries = root.mapEntries else {
            throw AppAttestError.malformedAttestation("the attestation object is not a CBOR map")
        }
        try Self.requireExactTextKeys(entries, ["fmt", "attStmt", "authData"], in: "the attestation object")
        guard let format = root[textKey: "fmt"]?.textString else {
            throw AppAttestError.malformedAttestation("fmt is not a text string")
        }
        guard format == Self.appleFormat else {
            throw AppAttestError(code: .unsupportedFormat, reason: "fmt is \"\(format)\", not \"\(Self.appleFormat)\"")
        }
        guard let statementItem = root[textKey: "attStmt"] else {
            throw AppAttestError.malformedAttestation("attStmt is missing")
        }
        guard let authData = root[textKey: "authData"]?.byteString else {
            throw AppAttestError.malformedAttestation("authData is not a byte string")
        }
        self.format = format
        self.statement = try AppleAppAttestStatement(cbor: statementItem)
        self.authenticatorData = try AuthenticatorData(bytes: authData, kind: .attestation)
    }

    /// Rejects a map whose text keys are not exactly `expected` (duplicates are already impossible).
    static func requireExactTextKeys(_ entries: [CBORMapEntry], _ expected: Set<String>, in context: String) throws(AppAttestError) {
        let keys = entries.map { $0.key.textString }
        for key in keys {
            guard let key else {
                throw AppAttestError.malformedAttestation("\(context) has a key that is not a text string")
            }
            guard expected.contains(key) else {
                throw AppAttestError.malformedAttestation("\(context) has an unexpected key \"\(key)\"")
            }
        }
        guard keys.count == expected.count else {
            let missing = expected.subtracting(keys.compactMap { $0 }).sorted()
            throw AppAttestError.malformedAttestation("\(context) lacks \(missing.joined(separator: ", "))")
        }
    }
}
