//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
public import Crypto

/// What the tokens say about an attested key, from a fresh verification or from the store.
public struct AttestedCredential: Sendable {
    public var keyID: [UInt8]
    public let publicKey: P256.Signing.PublicKey
    /// ``publicKey``'s uncompressed point (X9.63: `04 || x || y`, 65 bytes), kept: the JWS's `cnf`
    /// and the COSE key are written from it, and serializing the key again for every answer showed
    /// in a profile of the service.
    public let publicKeyPoint: [UInt8]
    public var appID: String
    public var environment: String

    public init(keyID: [UInt8], publicKey: P256.Signing.PublicKey, appID: String, environment: String) {
        self.keyID = keyID
        self.publicKey = publicKey
        self.publicKeyPoint = Array(publicKey.x963Representation)
        self.appID = appID
        self.environment = environment
    }

    /// From a key and its point, both at hand (the flows parse the stored point to verify with it):
    /// nothing is parsed or serialized again. `publicKeyPoint` must be `publicKey`'s X9.63 point.
    package init(keyID: [UInt8], publicKey: P256.Signing.PublicKey, publicKeyPoint: [UInt8], appID: String, environment: String) {
        self.keyID = keyID
        self.publicKey = publicKey
        self.publicKeyPoint = publicKeyPoint
        self.appID = appID
        self.environment = environment
    }

    public init(_ attestation: VerifiedAttestation) {
        // A verified attestation's COSE key is its certificate's key, point for point (the
        // verifier's step 9 compares the two), so its point needs no serializing of the key
        // again (an EC conversion per line in `wrap --batch`).
        guard let point = attestation.authenticatorData.attestedCredentialData?.publicKey.x963Representation else {
            self.init(
                keyID: attestation.keyID, publicKey: attestation.publicKey, appID: attestation.appID, environment: attestation.environment.rawValue)
            return
        }
        self.init(
            keyID: attestation.keyID, publicKey: attestation.publicKey, publicKeyPoint: point, appID: attestation.appID,
            environment: attestation.environment.rawValue
        )
    }

    /// The key as a COSE_Key (EC2, ES256, P-256), byte-identical to the one in authData.
    public var coseKey: [UInt8] {
        // A P-256 public key's x963 form is always 65 bytes starting with 04.
        (try? COSEKey(x963Representation: self.publicKeyPoint))?.cborEncoded ?? []
    }
}
