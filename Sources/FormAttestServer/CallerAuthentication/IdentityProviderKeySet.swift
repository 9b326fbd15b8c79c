//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import Foundation
import JWTKit

/// An identity provider's JWKS (RFC 7517), read key by key: the keys this service can verify a
/// token's signature with are kept, and every other key is skipped with its reason, so that one
/// foreign key (an encryption key, an X25519 or secp256k1 key, a certificate-only entry) never
/// makes the whole set refused.
///
/// The set is read with the strict RFC 8785 parser (duplicate members refused); each kept key is
/// handed to jwt-kit as the canonical bytes of that one key.
///
/// Keys are told apart by `kid` and key type: a provider may publish an EC and an RSA key under
/// one `kid` (RFC 7517 §4.5 asks only that keys of one type differ by kid), and a token's `alg`
/// names the type. Only keys a token could not tell apart (one `kid`, one type) are dropped, each
/// with its reason (r3 F5).
struct IdentityProviderKeySet {
    /// A key kept: its `kid`, the JWK as jwt-kit reads it, its type and its `alg` when it names one.
    struct Key {
        let kid: String
        let jwk: JWK
        let type: JWK.KeyType
        let algorithm: String?

        var index: Index { Index(kid: self.kid, type: self.type.rawValue) }
    }

    /// What tells a key from the others: its `kid` and its key type (the token's `alg` names the type).
    struct Index: Hashable {
        let kid: String
        let type: String
    }

    /// A key skipped, by its `kid` when it has one, and why.
    struct Skipped: Error, Hashable {
        let kid: String?
        let reason: String
    }

    /// Why a set is refused as a whole: not JSON, no `keys` array, or no key to verify with.
    struct Refused: Error, CustomStringConvertible {
        let description: String
    }

    let keys: [Key]
    let skipped: [Skipped]

    /// The signature algorithms this service verifies, with the key type and curve each needs.
    static let signatureAlgorithms: [String: (kty: String, crv: String?)] = [
        "ES256": ("EC", "P-256"), "RS256": ("RSA", nil), "EdDSA": ("OKP", "Ed25519"),
    ]

    init(json bytes: [UInt8]) throws(Refused) {
        let value: JSONValue
        do {
            value = try CanonicalJSON.parse(bytes, limits: .init(maximumSize: IdentityProviderKeySets.maximumSize, maximumDepth: 16))
        } catch {
            throw Refused(description: "the key set is not strict JSON: \(error.reason)")
        }
        guard case .object = value, case .array(let entries)? = value["keys"] else {
            throw Refused(description: "the key set has no keys array")
        }
        var keys: [Key] = []
        var skipped: [Skipped] = []
        var seen: Set<Index> = []
        var ambiguous: Set<Index> = []
        for entry in entries {
            switch Self.read(entry) {
            case .failure(let skip):
                skipped.append(skip)
            case .success(let key):
                guard seen.insert(key.index).inserted else {
                    // Two keys of one type under one kid: a token cannot tell them apart.
                    if ambiguous.insert(key.index).inserted {
                        // The first of them, kept until now, goes too.
                        skipped.append(Skipped(kid: key.kid, reason: "another \(key.type.rawValue) key of the set has this kid"))
                    }
                    skipped.append(Skipped(kid: key.kid, reason: "another \(key.type.rawValue) key of the set has this kid"))
                    keys.removeAll { $0.index == key.index }
                    continue
                }
                keys.append(key)
            }
        }
        guard !keys.isEmpty else {
            throw Refused(description: "the key set holds no key this service can verify a signature with (\(skipped.count) skipped)")
        }
        self.keys = keys
        self.skipped = skipped
    }

    /// One entry: a key this service verifies signatures with, or why it is skipped.
    static func read(_ entry: JSONValue) -> Result<Key, Skipped> {
        guard case .object = entry else { return .failure(Skipped(kid: nil, reason: "the entry is not a JSON object")) }
        let named = entry["kid"]?.stringValue
        func skip(_ reason: String) -> Result<Key, Skipped> { .failure(Skipped(kid: named, reason: reason)) }
        guard let kid = named, !kid.isEmpty else { return skip("the key has no kid") }
        if let use = entry["use"] {
            guard use.stringValue == "sig" else { return skip("the key's use is not sig") }
        }
        if let operations = entry["key_ops"] {
            guard case .array(let items) = operations, items.allSatisfy({ $0.stringValue != nil }) else {
                return skip("the key's key_ops is not an array of strings")
            }
            guard items.contains(where: { $0.stringValue == "verify" }) else { return skip("the key's key_ops does not include verify") }
        }
        guard let kty = entry["kty"]?.stringValue else { return skip("the key has no kty") }
        let crv = entry["crv"]?.stringValue
        let algorithm = entry["alg"]?.stringValue
        if entry["alg"] != nil {
            guard let algorithm, let needs = Self.signatureAlgorithms[algorithm] else {
                return skip("the key's alg is not ES256, RS256 or EdDSA")
            }
            guard needs.kty == kty else { return skip("the key's alg \(algorithm) does not fit its kty \(kty)") }
        }
        let type: JWK.KeyType
        let parameters: [String]
        switch kty {
        case "EC":
            guard crv == "P-256" else { return skip("the EC key's curve is not P-256") }
            type = .ecdsa
            parameters = ["x", "y"]
        case "RSA":
            type = .rsa
            parameters = ["n", "e"]
        case "OKP":
            guard crv == "Ed25519" else { return skip("the OKP key's curve is not Ed25519") }
            type = .octetKeyPair
            parameters = ["x"]
        default:
            return skip("the key type is not EC, RSA or OKP")
        }
        for name in parameters where entry[name]?.stringValue?.isEmpty ?? true {
            return skip("the key has no public key parameter \(name) (a certificate alone is not read)")
        }
        if entry["d"] != nil { return skip("the entry holds a private key") }
        let jwk: JWK
        do {
            jwk = try JSONDecoder().decode(JWK.self, from: Data(entry.canonicalBytes))
        } catch {
            return skip("jwt-kit cannot read the key")
        }
        return .success(Key(kid: kid, jwk: jwk, type: type, algorithm: algorithm))
    }
}
