//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
public import CanonicalJSON
import FormAttestForm
public import Foundation
import RFC3339

/// The FIDO2-shaped wrapper of a verified App Attest attestation (schemas/fido2-wrapper.schema.json).
///
/// An apple-appattest attestation cannot honestly become a FIDO2 `packed` attestation (the device
/// never signed one). The wrapper keeps the original attestation untouched under `original`, and
/// presents the attested key under `credential` in the shape WebAuthn servers store, claiming
/// nothing the data does not support: no UP/UV flags, no invented attestation statement.
public enum FIDO2Wrapper {
    /// The wrapper's `type`.
    public static let type = "wrapped-attestation"
    /// The wrapper format's version.
    public static let version = 1

    /// Builds the wrapper.
    ///
    /// - Parameters:
    ///   - credential: the verified key.
    ///   - attestationObject: the attestation object exactly as received.
    ///   - clientDataHash: the bytes it was verified over.
    ///   - counter: the key's current signature counter (0 right after attestation).
    ///   - verifiedAt: when it was verified.
    /// - Returns: the document; serialize it with `canonicalBytes` (RFC 8785).
    public static func make(
        credential: AttestedCredential,
        attestationObject: [UInt8],
        clientDataHash: [UInt8],
        counter: UInt32,
        verifiedAt: Date
    ) -> JSONValue {
        let keyID = Base64URL.encode(credential.keyID)
        let environment = credential.environment
        let aaguid =
            environment == "production"
            ? Array("appattest".utf8) + [UInt8](repeating: 0, count: 7)
            : Array("appattestdevelop".utf8)
        let original = Self.object([
            ("fmt", .string(JSONString("apple-appattest"))),
            ("attestationObject", .string(JSONString(Base64URL.encode(attestationObject)))),
            ("keyId", .string(JSONString(keyID))),
            ("clientDataHash", .string(JSONString(Base64URL.encode(clientDataHash)))),
            ("appId", .string(JSONString(credential.appID))),
            ("environment", .string(JSONString(environment))),
            ("verifiedAt", .string(JSONString(RFC3339UTC.format(verifiedAt)))),
        ])
        let publicCredential = Self.object([
            ("id", .string(JSONString(keyID))),
            ("rawId", .string(JSONString(keyID))),
            ("type", .string(JSONString("public-key"))),
            ("publicKey", .string(JSONString(Base64URL.encode(credential.coseKey)))),
            ("publicKeyAlgorithm", .number(-7)),
            ("aaguid", .string(JSONString(uuidString(aaguid)))),
            ("signCount", .number(Double(counter))),
            ("transports", .array([.string(JSONString("internal"))])),
            ("attestationFormat", .string(JSONString("apple-appattest"))),
        ])
        return Self.object([
            ("type", .string(JSONString(Self.type))),
            ("version", .number(Double(Self.version))),
            ("original", original),
            ("credential", publicCredential),
        ])
    }

    /// A verified passkey registration, as ``make(passkey:)`` states it.
    public struct PasskeyRegistration: Sendable, Hashable {
        /// The credential id.
        public var credentialID: [UInt8]
        /// The credential public key, its exact COSE bytes.
        public var publicKey: [UInt8]
        /// Its COSE algorithm (`-7` ES256, `-8` EdDSA, `-257` RS256, `-37` PS256, `-38` PS384).
        public var algorithm: Int64
        /// The authenticator model's AAGUID (16 bytes).
        public var aaguid: [UInt8]
        public var signCount: UInt32
        /// The transports kept (WebAuthn's registered names).
        public var transports: [String]
        /// The attestation statement format (`none`, `packed`, `fido-u2f`, `apple`, `tpm`, `android-key`).
        public var format: String
        /// The BE and BS flags of the registration.
        public var backupEligible: Bool
        public var backedUp: Bool
        /// Whether the attestation chain reached a configured anchor; `nil` for formats without
        /// certificates (`none`, packed self attestation).
        public var attestationAnchored: Bool?
        /// The attestation object and clientDataJSON, the exact bytes the client sent.
        public var attestationObject: [UInt8]
        public var clientDataJSON: [UInt8]
        /// The relying party id the registration was verified for.
        public var relyingPartyID: String
        public var verifiedAt: Date

        public init(
            credentialID: [UInt8], publicKey: [UInt8], algorithm: Int64, aaguid: [UInt8], signCount: UInt32, transports: [String],
            format: String, backupEligible: Bool, backedUp: Bool, attestationAnchored: Bool?, attestationObject: [UInt8],
            clientDataJSON: [UInt8], relyingPartyID: String, verifiedAt: Date
        ) {
            self.credentialID = credentialID
            self.publicKey = publicKey
            self.algorithm = algorithm
            self.aaguid = aaguid
            self.signCount = signCount
            self.transports = transports
            self.format = format
            self.backupEligible = backupEligible
            self.backedUp = backedUp
            self.attestationAnchored = attestationAnchored
            self.attestationObject = attestationObject
            self.clientDataJSON = clientDataJSON
            self.relyingPartyID = relyingPartyID
            self.verifiedAt = verifiedAt
        }
    }

    /// The wrapper's passkey counterpart: a verified WebAuthn registration in the same shape, so a
    /// system that stores App Attest keys from the wrapper stores passkeys the same way.
    ///
    /// Unlike App Attest's, a passkey's attestation is a WebAuthn one already: `original` keeps it
    /// as the client sent it (the attestation object and the exact clientDataJSON bytes, which
    /// carry the challenge and origin), for anyone to verify again. `credential` adds the BE and
    /// BS flags a WebAuthn server stores with a credential; it states no UV flag (a property of
    /// one ceremony, not of the credential).
    public static func make(passkey: PasskeyRegistration) -> JSONValue {
        let credentialID = Base64URL.encode(passkey.credentialID)
        var original: [(name: String, value: JSONValue)] = [
            ("fmt", .string(JSONString(passkey.format))),
            ("attestationObject", .string(JSONString(Base64URL.encode(passkey.attestationObject)))),
            ("clientDataJSON", .string(JSONString(Base64URL.encode(passkey.clientDataJSON)))),
            ("credentialId", .string(JSONString(credentialID))),
            ("rpId", .string(JSONString(passkey.relyingPartyID))),
            ("verifiedAt", .string(JSONString(RFC3339UTC.format(passkey.verifiedAt)))),
        ]
        if let anchored = passkey.attestationAnchored {
            original.append(("attestationAnchored", .bool(anchored)))
        }
        let publicCredential = Self.object([
            ("id", .string(JSONString(credentialID))),
            ("rawId", .string(JSONString(credentialID))),
            ("type", .string(JSONString("public-key"))),
            ("publicKey", .string(JSONString(Base64URL.encode(passkey.publicKey)))),
            ("publicKeyAlgorithm", .number(Double(passkey.algorithm))),
            ("aaguid", .string(JSONString(uuidString(passkey.aaguid)))),
            ("signCount", .number(Double(passkey.signCount))),
            ("transports", .array(passkey.transports.map { .string(JSONString($0)) })),
            ("attestationFormat", .string(JSONString(passkey.format))),
            ("backupEligible", .bool(passkey.backupEligible)),
            ("backedUp", .bool(passkey.backedUp)),
        ])
        return Self.object([
            ("type", .string(JSONString(Self.type))),
            ("version", .number(Double(Self.version))),
            ("original", Self.object(original)),
            ("credential", publicCredential),
        ])
    }

    static func object(_ members: [(name: String, value: JSONValue)]) -> JSONValue {
        .object(JSONObject(constantMembers: members))
    }
}
