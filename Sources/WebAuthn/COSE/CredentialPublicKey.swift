//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CBOR
import Crypto
import X509
import _CryptoExtras

/// A credential public key in COSE form (RFC 9052/9053), with the one algorithm it verifies.
///
/// Accepted shapes, every other label, value or combination refused:
/// - EC2 `{1: 2, 3: -7, -1: 1, -2: x(32), -3: y(32)}` (ES256, P-256);
/// - OKP `{1: 1, 3: -8, -1: 6, -2: x(32)}` (EdDSA, Ed25519);
/// - RSA `{1: 3, 3: -257 | -37 | -38 | -65535, -1: n, -2: e}` (at least 2048 bits).
public struct CredentialPublicKey: Sendable {
    /// The algorithm the key signs with.
    public let algorithm: COSEAlgorithm
    /// The exact COSE bytes it was read from (what a store keeps and the CLI prints).
    public let cborEncoded: [UInt8]
    private let key: Key

    private enum Key: Sendable {
        case p256(P256.Signing.PublicKey)
        case ed25519(Curve25519.Signing.PublicKey)
        case rsa(_RSA.Signing.PublicKey)
    }

    private enum Label {
        static let keyType: Int64 = 1
        static let algorithm: Int64 = 3
        static let curve: Int64 = -1
        static let x: Int64 = -2
        static let y: Int64 = -3
        static let modulus: Int64 = -1
        static let exponent: Int64 = -2
    }

    /// Reads a COSE key from its exact bytes (a whole CBOR item, nothing after it).
    ///
    /// - Throws: ``WebAuthnError/Code/invalidPublicKey``.
    public init(cborEncoded bytes: [UInt8]) throws(WebAuthnError) {
        let item: CBORItem
        do {
            item = try CBORDecoder.decode(bytes, limits: .init(maximumDepth: 2, maximumItemCount: 16))
        } catch {
            throw WebAuthnError.invalidPublicKey("the COSE key is not one CBOR item: \(error.reason)")
        }
        try self.init(item: item, bytes: bytes)
    }

    /// Reads a COSE key already decoded from authenticator data.
    init(item: CBORItem, bytes: [UInt8]) throws(WebAuthnError) {
        guard let entries = item.mapEntries else {
            throw WebAuthnError.invalidPublicKey("the COSE key is not a CBOR map")
        }
        guard let keyType = item[integerKey: Label.keyType]?.integer, let alg = item[integerKey: Label.algorithm]?.integer else {
            throw WebAuthnError.invalidPublicKey("the COSE key lacks an integer kty (1) or alg (3)")
        }
        let algorithm = COSEAlgorithm(rawValue: alg)
        func bytesAt(_ label: Int64, _ name: String) throws(WebAuthnError) -> [UInt8] {
            guard let value = item[integerKey: label]?.byteString else {
                throw WebAuthnError.invalidPublicKey("the COSE key's \(name) (\(label)) is not a byte string")
            }
            return value
        }
        func expectLabels(_ labels: Set<Int64>) throws(WebAuthnError) {
            let present = entries.compactMap { $0.key.integer }
            guard present.count == entries.count, Set(present) == labels else {
                throw WebAuthnError.invalidPublicKey("the COSE key has labels other than \(labels.sorted()) for its kty")
            }
        }
        switch (keyType, algorithm) {
        case (2, .es256):
            try expectLabels([Label.keyType, Label.algorithm, Label.curve, Label.x, Label.y])
            guard item[integerKey: Label.curve]?.integer == 1 else {
                throw WebAuthnError.invalidPublicKey("an ES256 key's crv is not P-256 (1)")
            }
            let x = try bytesAt(Label.x, "x")
            let y = try bytesAt(Label.y, "y")
            guard x.count == 32, y.count == 32, let key = try? P256.Signing.PublicKey(x963Representation: [0x04] + x + y) else {
                throw WebAuthnError.invalidPublicKey("x and y are not a point of P-256")
            }
            self.key = .p256(key)
        case (1, .edDSA):
            try expectLabels([Label.keyType, Label.algorithm, Label.curve, Label.x])
            guard item[integerKey: Label.curve]?.integer == 6 else {
                throw WebAuthnError.invalidPublicKey("an EdDSA key's crv is not Ed25519 (6)")
            }
            let x = try bytesAt(Label.x, "x")
            guard x.count == 32, let key = try? Curve25519.Signing.PublicKey(rawRepresentation: x) else {
                throw WebAuthnError.invalidPublicKey("x is not a 32-byte Ed25519 key")
            }
            guard !Ed25519SmallOrder.contains(x) else {
                throw WebAuthnError.invalidPublicKey("x is an Ed25519 point of small order: a signature by no secret verifies with it")
            }
            self.key = .ed25519(key)
        case (3, .rs256), (3, .ps256), (3, .ps384), (3, .rs1):
            try expectLabels([Label.keyType, Label.algorithm, Label.modulus, Label.exponent])
            let modulus = try bytesAt(Label.modulus, "n")
            let exponent = try bytesAt(Label.exponent, "e")
            guard modulus.first != 0, exponent.first != 0, (1...8).contains(exponent.count), modulus.count <= 1024,
                let key = try? _RSA.Signing.PublicKey(n: modulus, e: exponent)
            else {
                throw WebAuthnError.invalidPublicKey("n and e are not an RSA key of at least 2048 bits in minimal form")
            }
            self.key = .rsa(key)
        default:
            throw WebAuthnError.invalidPublicKey("kty \(keyType) with \(algorithm) is not a supported COSE key")
        }
        self.algorithm = algorithm
        self.cborEncoded = bytes
    }

    /// The key of an attestation certificate, to verify a statement signed with `algorithm`.
    ///
    /// - Throws: ``WebAuthnError/Code/attestationCertificateInvalid`` when the certificate's key
    ///   is not of the kind `algorithm` needs.
    /// - Parameter allowingRS1: RS1 (RSASSA-PKCS1-v1_5 with SHA-1) only where real authenticators
    ///   still use it: `tpm` statements (Windows Hello); every other format refuses it.
    init(certificateKey: Certificate.PublicKey, algorithm: COSEAlgorithm, allowingRS1: Bool = false) throws(WebAuthnError) {
        if algorithm == .rs1 && !allowingRS1 {
            throw WebAuthnError(code: .algorithmNotAllowed, reason: "RS1 (SHA-1) is accepted inside tpm attestation statements only")
        }
        switch algorithm {
        case .es256:
            guard let key = P256.Signing.PublicKey(certificateKey) else {
                throw WebAuthnError(code: .attestationCertificateInvalid, reason: "alg ES256 needs a P-256 certificate key")
            }
            self.key = .p256(key)
        case .edDSA:
            guard let key = Curve25519.Signing.PublicKey(certificateKey) else {
                throw WebAuthnError(code: .attestationCertificateInvalid, reason: "alg EdDSA needs an Ed25519 certificate key")
            }
            guard !Ed25519SmallOrder.contains(Array(key.rawRepresentation)) else {
                throw WebAuthnError(code: .attestationCertificateInvalid, reason: "the certificate's Ed25519 key is a point of small order")
            }
            self.key = .ed25519(key)
        case .rs256, .ps256, .ps384, .rs1:
            guard let key = _RSA.Signing.PublicKey(certificateKey) else {
                throw WebAuthnError(code: .attestationCertificateInvalid, reason: "alg \(algorithm) needs an RSA certificate key")
            }
            self.key = .rsa(key)
        default:
            throw WebAuthnError(code: .algorithmNotAllowed, reason: "the statement's alg \(algorithm.rawValue) is not supported")
        }
        self.algorithm = algorithm
        self.cborEncoded = []
    }

    /// The uncompressed point `04 ‖ x ‖ y` of an ES256 key, `nil` for other keys.
    public var p256X963Representation: [UInt8]? {
        guard case .p256(let key) = self.key else { return nil }
        return Array(key.x963Representation)
    }

    /// The modulus and public exponent of an RSA key (big-endian, no leading zeros), `nil` for other keys.
    var rsaPrimitives: (modulus: [UInt8], exponent: [UInt8])? {
        guard case .rsa(let key) = self.key, let primitives = try? key.getKeyPrimitives() else { return nil }
        return (Array(primitives.modulus), Array(primitives.publicExponent))
    }

    /// Whether `other` is the same public key (whatever the algorithm each verifies with).
    func isSameKey(as other: CredentialPublicKey) -> Bool {
        switch (self.key, other.key) {
        case (.p256(let mine), .p256(let theirs)): return mine.x963Representation == theirs.x963Representation
        case (.ed25519(let mine), .ed25519(let theirs)): return mine.rawRepresentation == theirs.rawRepresentation
        case (.rsa, .rsa):
            guard let mine = self.rsaPrimitives, let theirs = other.rsaPrimitives else { return false }
            return mine.modulus == theirs.modulus && mine.exponent == theirs.exponent
        default: return false
        }
    }

    /// Whether `signature` is this key's signature over `data` with ``algorithm``.
    ///
    /// ES256 signatures are DER (as WebAuthn sends them), EdDSA raw 64 bytes, RSA raw.
    public func isValidSignature(_ signature: [UInt8], for data: [UInt8]) -> Bool {
        switch self.key {
        case .p256(let key):
            guard let parsed = try? P256.Signing.ECDSASignature(derRepresentation: signature) else { return false }
            return key.isValidSignature(parsed, for: data)
        case .ed25519(let key):
            return key.isValidSignature(signature, for: data)
        case .rsa(let key):
            let parsed = _RSA.Signing.RSASignature(rawRepresentation: signature)
            switch self.algorithm {
            case .rs256: return key.isValidSignature(parsed, for: SHA256.hash(data: data), padding: .insecurePKCS1v1_5)
            case .ps256: return key.isValidSignature(parsed, for: SHA256.hash(data: data), padding: .PSS)
            case .ps384: return key.isValidSignature(parsed, for: SHA384.hash(data: data), padding: .PSS)
            case .rs1: return key.isValidSignature(parsed, for: Insecure.SHA1.hash(data: data), padding: .insecurePKCS1v1_5)
            default: return false
            }
        }
    }
}
