//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CBOR

/// An EC2 P-256 ES256 COSE key (RFC 9052/9053), the only kind App Attest produces.
///
/// Encoded as `{1: 2 (kty EC2), 3: -7 (alg ES256), -1: 1 (crv P-256), -2: x, -3: y}`; any other
/// key, value or extra entry is rejected.
public struct COSEKey: Sendable, Hashable {
    /// The x coordinate, 32 bytes.
    public let x: [UInt8]
    /// The y coordinate, 32 bytes.
    public let y: [UInt8]

    /// COSE labels and values used here.
    enum Label {
        static let keyType: Int64 = 1
        static let algorithm: Int64 = 3
        static let curve: Int64 = -1
        static let x: Int64 = -2
        static let y: Int64 = -3
        static let keyTypeEC2: Int64 = 2
        static let algorithmES256: Int64 = -7
        static let curveP256: Int64 = 1
    }

    /// Creates a key from its coordinates.
    ///
    /// - Throws: ``AppAttestError/Code/invalidPublicKey`` unless both are 32 bytes.
    public init(x: [UInt8], y: [UInt8]) throws(AppAttestError) {
        guard x.count == 32, y.count == 32 else {
            throw AppAttestError(code: .invalidPublicKey, reason: "P-256 coordinates must be 32 bytes each")
        }
        self.x = x
        self.y = y
    }

    /// Creates a key from the uncompressed point `04 || x || y`.
    public init(x963Representation bytes: [UInt8]) throws(AppAttestError) {
        guard bytes.count == 65, bytes.first == 0x04 else {
            throw AppAttestError(code: .invalidPublicKey, reason: "an uncompressed P-256 point has 65 bytes, 04 first")
        }
        try self.init(x: Array(bytes[1..<33]), y: Array(bytes[33..<65]))
    }

    /// Reads a key from a decoded CBOR map.
    ///
    /// - Throws: ``AppAttestError/Code/malformedAuthenticatorData`` for any deviation.
    init(cbor item: CBORItem) throws(AppAttestError) {
        guard let entries = item.mapEntries else {
            throw AppAttestError.malformedAuthenticatorData("the credential public key is not a CBOR map")
        }
        guard entries.count == 5 else {
            throw AppAttestError.malformedAuthenticatorData(
                "the COSE key has \(entries.count) entries; an EC2 P-256 key has exactly 5"
            )
        }
        guard item[integerKey: Label.keyType]?.integer == Label.keyTypeEC2 else {
            throw AppAttestError.malformedAuthenticatorData("COSE kty is not EC2 (2)")
        }
        guard item[integerKey: Label.algorithm]?.integer == Label.algorithmES256 else {
            throw AppAttestError.malformedAuthenticatorData("COSE alg is not ES256 (-7)")
        }
        guard item[integerKey: Label.curve]?.integer == Label.curveP256 else {
            throw AppAttestError.malformedAuthenticatorData("COSE crv is not P-256 (1)")
        }
        guard let x = item[integerKey: Label.x]?.byteString, let y = item[integerKey: Label.y]?.byteString,
            x.count == 32, y.count == 32
        else {
            throw AppAttestError.malformedAuthenticatorData("COSE x and y must be 32-byte byte strings")
        }
        self.x = x
        self.y = y
    }

    /// The uncompressed SEC 1 point `04 || x || y` (65 bytes); SHA-256 of it is App Attest's keyId.
    public var x963Representation: [UInt8] { [0x04] + self.x + self.y }

    /// The deterministic CBOR encoding (77 bytes), byte-identical to Apple's.
    public var cborEncoded: [UInt8] {
        var serializer = CBORSerializer()
        // Keys are distinct constants, so the map can never hold a duplicate.
        try? serializer.appendMap([
            (.integer(Label.keyType), { $0.appendInteger(Label.keyTypeEC2) }),
            (.integer(Label.algorithm), { $0.appendInteger(Label.algorithmES256) }),
            (.integer(Label.curve), { $0.appendInteger(Label.curveP256) }),
            (.integer(Label.x), { $0.appendByteString(self.x) }),
            (.integer(Label.y), { $0.appendByteString(self.y) }),
        ])
        return serializer.bytes
    }
}
