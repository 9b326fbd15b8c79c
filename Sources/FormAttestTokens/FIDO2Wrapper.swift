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
        let aaguid = environment == "production"
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
            ("aaguid", .string(JSONString(Self.uuid(aaguid)))),
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

    static func object(_ members: [(name: String, value: JSONValue)]) -> JSONValue {
        .object(JSONObject(constantMembers: members))
    }

    /// 16 bytes as a UUID string, such as `61707061-7474-6573-7400-000000000000`.
    static func uuid(_ bytes: [UInt8]) -> String {
        let hex = AppAttest.hex(bytes)
        let groups = [8, 4, 4, 4, 12]
        var parts: [String] = []
        var index = hex.startIndex
        for length in groups {
            let end = hex.index(index, offsetBy: length)
            parts.append(String(hex[index..<end]))
            index = end
        }
        return parts.joined(separator: "-")
    }
}
