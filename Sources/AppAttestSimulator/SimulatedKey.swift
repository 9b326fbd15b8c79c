//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Crypto

/// A key pair held by the simulated Secure Enclave.
public struct SimulatedKey: Sendable {
    /// The private key (a real device never reveals it).
    public let privateKey: P256.Signing.PrivateKey
    /// The public key.
    public var publicKey: P256.Signing.PublicKey { self.privateKey.publicKey }
    /// SHA-256 of the uncompressed public point, as App Attest's `generateKey` returns it.
    public let keyID: [UInt8]

    public init(privateKey: P256.Signing.PrivateKey) {
        self.privateKey = privateKey
        self.keyID = Array(SHA256.hash(data: Array(privateKey.publicKey.x963Representation)))
    }
}
