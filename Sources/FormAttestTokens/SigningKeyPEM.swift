//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Crypto
import SwiftASN1

/// Why a signing key cannot be used: one line that names the file and what is wrong with it.
public struct SigningKeyError: Error, Sendable, Hashable, CustomStringConvertible {
    public let description: String
    /// There is no key at all (rather than a key that cannot be used): one must be created.
    public let isMissing: Bool

    public init(_ description: String, isMissing: Bool = false) {
        self.description = description
        self.isMissing = isMissing
    }
}

/// Reading a P-256 private key from PEM text, as `openssl` and FormAttest write it.
///
/// Accepted: PKCS#8 (`PRIVATE KEY`, what FormAttest writes and `openssl genpkey` makes) and SEC1
/// (`EC PRIVATE KEY`, what `openssl ecparam -name prime256v1 -genkey` makes), with or without the
/// `EC PARAMETERS` block before it. The key's curve is read from the key (or from that block) and
/// must be P-256 (prime256v1): a key on any other curve is refused by name, never reinterpreted
/// as a P-256 scalar (a secp256k1 key has the same length).
public enum SigningKeyPEM {
    static let ecPublicKey: ASN1ObjectIdentifier = [1, 2, 840, 10045, 2, 1]
    static let curves: [ASN1ObjectIdentifier: String] = [
        [1, 2, 840, 10045, 3, 1, 7]: "P-256",
        [1, 3, 132, 0, 34]: "P-384",
        [1, 3, 132, 0, 35]: "P-521",
        [1, 3, 132, 0, 10]: "secp256k1",
        [1, 2, 840, 10045, 3, 1, 1]: "P-192",
        [1, 3, 132, 0, 33]: "P-224",
    ]
    static let otherAlgorithms: [ASN1ObjectIdentifier: String] = [
        [1, 2, 840, 113549, 1, 1, 1]: "an RSA key",
        [1, 3, 101, 112]: "an Ed25519 key",
        [1, 3, 101, 113]: "an Ed448 key",
        [1, 3, 101, 110]: "an X25519 key",
    ]

    /// The P-256 private key in `pem`; `source` names it in errors (a path).
    public static func privateKey(pem: String, source: String) throws(SigningKeyError) -> P256.Signing.PrivateKey {
        let documents: [PEMDocument]
        do {
            documents = try PEMDocument.parseMultiple(pemString: pem)
        } catch {
            throw SigningKeyError("\(source) is not PEM text")
        }
        let keys = documents.filter { $0.discriminator == "PRIVATE KEY" || $0.discriminator == "EC PRIVATE KEY" }
        guard keys.count == 1, let key = keys.first else {
            throw SigningKeyError(
                keys.isEmpty
                    ? "\(source) holds no PRIVATE KEY or EC PRIVATE KEY block"
                        + (documents.isEmpty ? "" : " (found: \(documents.map(\.discriminator).joined(separator: ", ")))")
                    : "\(source) holds \(keys.count) private keys; give one"
            )
        }
        var oids = Self.objectIdentifiers(in: key.derBytes)
        if let parameters = documents.first(where: { $0.discriminator == "EC PARAMETERS" }) {
            oids += Self.objectIdentifiers(in: parameters.derBytes)
        }
        if let other = oids.lazy.compactMap({ Self.otherAlgorithms[$0] }).first {
            throw SigningKeyError("\(source) holds \(other); the signing key must be EC P-256 (ES256)")
        }
        if key.discriminator == "PRIVATE KEY", !oids.contains(Self.ecPublicKey) {
            throw SigningKeyError("\(source) is not an EC private key; the signing key must be EC P-256 (ES256)")
        }
        let named = Set(oids.compactMap { Self.curves[$0] })
        guard !named.isEmpty else {
            let unknown = oids.first { $0 != Self.ecPublicKey }.map { " (\($0))" } ?? ""
            throw SigningKeyError("\(source) names no known curve\(unknown); the signing key must be EC P-256 (prime256v1)")
        }
        guard named == ["P-256"] else {
            throw SigningKeyError("\(source) is a \(named.sorted().joined(separator: "/")) key; the signing key must be EC P-256 (prime256v1)")
        }
        do {
            return try P256.Signing.PrivateKey(pemRepresentation: key.pemString)
        } catch {
            throw SigningKeyError("\(source) is not a valid P-256 private key")
        }
    }

    /// Every object identifier in a DER value's constructed nodes (the algorithm and curve of
    /// PKCS#8, the `[0]` parameters of SEC1, the OID of an `EC PARAMETERS` block); none when the
    /// bytes are not DER, which the key's own parse then refuses.
    static func objectIdentifiers(in der: [UInt8]) -> [ASN1ObjectIdentifier] {
        guard let root = try? DER.parse(der) else { return [] }
        var found: [ASN1ObjectIdentifier] = []
        func walk(_ node: ASN1Node) {
            switch node.content {
            case .constructed(let children):
                for child in children { walk(child) }
            case .primitive:
                if node.identifier == .objectIdentifier, let oid = try? ASN1ObjectIdentifier(derEncoded: node) {
                    found.append(oid)
                }
            }
        }
        walk(root)
        return found
    }
}
