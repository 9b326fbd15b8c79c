//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
public import Crypto
public import FormAttestFlows

/// What the tokens say about an attested key, from a fresh verification or from the store.
public struct AttestedCredential: Sendable {
    public var keyID: [UInt8]
    public var publicKey: P256.Signing.PublicKey
    public var appID: String
    public var environment: String

    public init(keyID: [UInt8], publicKey: P256.Signing.PublicKey, appID: String, environment: String) {
        self.keyID = keyID
        self.publicKey = publicKey
        self.appID = appID
        self.environment = environment
    }

    public init(_ attestation: VerifiedAttestation) {
        self.init(keyID: attestation.keyID, publicKey: attestation.publicKey, appID: attestation.appID, environment: attestation.environment.rawValue)
    }

    /// - Throws: when the stored point is not a valid P-256 key.
    public init(_ key: StoredKey) throws {
        self.init(
            keyID: key.keyID,
            publicKey: try P256.Signing.PublicKey(x963Representation: key.publicKey),
            appID: key.appID,
            environment: key.environment.rawValue
        )
    }

    /// The key as a COSE_Key (EC2, ES256, P-256), byte-identical to the one in authData.
    public var coseKey: [UInt8] {
        // A P-256 public key's x963 form is always 65 bytes starting with 04.
        (try? COSEKey(x963Representation: Array(self.publicKey.x963Representation)))?.cborEncoded ?? []
    }
}
