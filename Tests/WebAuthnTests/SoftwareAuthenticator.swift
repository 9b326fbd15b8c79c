//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CBOR
import Crypto
import Foundation
import SwiftASN1
import WebAuthn
import X509
import _CryptoExtras

/// A software authenticator: builds registration and authentication responses in the
/// `PublicKeyCredential.toJSON()` shape with swift-crypto keys, so that a test can change exactly
/// one thing of a valid response.
struct SoftwareAuthenticator {
    /// A small CA for attestation certificates (`packed` with x5c, `fido-u2f`, `apple`).
    struct AttestationCA {
        let rootKey = P256.Signing.PrivateKey()
        let root: Certificate
        static let validity = Date(timeIntervalSince1970: 1_700_000_000)...Date(timeIntervalSince1970: 2_000_000_000)

        init() {
            let name = try! DistinguishedName { CommonName("WebAuthn test root") }
            self.root = try! Certificate(
                version: .v3,
                serialNumber: .init(),
                publicKey: .init(self.rootKey.publicKey),
                notValidBefore: Self.validity.lowerBound,
                notValidAfter: Self.validity.upperBound,
                issuer: name,
                subject: name,
                signatureAlgorithm: .ecdsaWithSHA256,
                extensions: try! Certificate.Extensions {
                    Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                },
                issuerPrivateKey: .init(self.rootKey)
            )
        }

        /// The root's DER.
        func rootDER() throws -> [UInt8] {
            var serializer = DER.Serializer()
            try serializer.serialize(self.root)
            return serializer.serializedBytes
        }

        /// A leaf for `key`, issued by the root.
        func leaf(
            for key: P256.Signing.PublicKey,
            subject: DistinguishedName? = nil,
            extensions: [Certificate.Extension] = [],
            certificateAuthority: Bool = false
        ) -> [UInt8] {
            self.leaf(forPublicKey: .init(key), subject: subject, extensions: extensions, certificateAuthority: certificateAuthority)
        }

        /// A leaf for any key (an RSA one), issued by the root.
        func leaf(
            forPublicKey key: Certificate.PublicKey,
            subject: DistinguishedName? = nil,
            extensions: [Certificate.Extension] = [],
            certificateAuthority: Bool = false
        ) -> [UInt8] {
            let defaultSubject = try! DistinguishedName {
                CountryName("SE")
                OrganizationName("Test Vendor")
                OrganizationalUnitName("Authenticator Attestation")
                CommonName("Test Authenticator")
            }
            var all = try! Certificate.Extensions {
                Critical(
                    certificateAuthority
                        ? BasicConstraints.isCertificateAuthority(maxPathLength: nil) : BasicConstraints.notCertificateAuthority
                )
            }
            for item in extensions { try! all.append(item) }
            let certificate = try! Certificate(
                version: .v3,
                serialNumber: .init(),
                publicKey: key,
                notValidBefore: Self.validity.lowerBound,
                notValidAfter: Self.validity.upperBound,
                issuer: self.root.subject,
                subject: subject ?? defaultSubject,
                signatureAlgorithm: .ecdsaWithSHA256,
                extensions: all,
                issuerPrivateKey: .init(self.rootKey)
            )
            var serializer = DER.Serializer()
            try! serializer.serialize(certificate)
            return serializer.serializedBytes
        }
    }

    enum Format {
        case none
        case packedSelf
        case packedX5C
        case fidoU2F
        case apple
        case androidKey
    }

    static let ca = AttestationCA()
    /// A time inside the CA's validity.
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    var rpID = "example.com"
    var origin = "https://example.com"
    var challenge: [UInt8] = Array(repeating: 0xC5, count: 32)
    var credentialKey = P256.Signing.PrivateKey()
    var credentialID: [UInt8] = Array(0..<32)
    var aaguid: [UInt8] = Array(repeating: 0xA7, count: 16)
    var signCount: UInt32 = 0
    var flags: UInt8 = 0x01 | 0x04  // UP, UV (AT is added for registrations)
    var format = Format.none

    // Single-change hooks, each nil or default in a valid response.
    var clientDataType: String?
    var clientDataExtra = ""
    var challengeText: String?
    var rpIDHash: [UInt8]?
    var rawID: [UInt8]?
    var attestationKey = P256.Signing.PrivateKey()
    var attestationSubject: DistinguishedName?
    var attestationExtensions: [Certificate.Extension]?
    var attestationIsCA = false
    var corruptAttestationSignature = false
    var userHandle: [UInt8]?
    var signatureOverride: [UInt8]?
    var appleNonceOverride: [UInt8]?
    var appleCertificateKey: P256.Signing.PublicKey?
    var omitAttestedCredential = false
    var certificatesAfterLeaf: [[UInt8]] = []
    var leafOverride: [UInt8]?
    var packedSelfAlgorithm: Int64 = -7
    /// A packed x5c statement by an RSA attestation key, with this COSE algorithm (-257 RS256,
    /// -65535 RS1: the signature then over SHA-1).
    var packedX5CRSA: (key: _RSA.Signing.PrivateKey, algorithm: Int64)?
    var extraStatementMember = false
    /// android-key: the certificate (and the signature) are `attestationKey`'s, not the credential key's.
    var androidKeyCertifiesAttestationKey = false

    /// COSE ES256 key of the credential.
    var cosePublicKey: [UInt8] { Self.coseKey(self.credentialKey.publicKey) }

    static func coseKey(_ key: P256.Signing.PublicKey) -> [UInt8] {
        let point = Array(key.x963Representation)
        var serializer = CBORSerializer()
        try! serializer.appendMap([
            (.integer(1), { $0.appendInteger(2) }),
            (.integer(3), { $0.appendInteger(-7) }),
            (.integer(-1), { $0.appendInteger(1) }),
            (.integer(-2), { $0.appendByteString(point[1..<33]) }),
            (.integer(-3), { $0.appendByteString(point[33..<65]) }),
        ])
        return serializer.bytes
    }

    func clientDataJSON(type: String) -> [UInt8] {
        let challenge = self.challengeText ?? WebAuthnBase64.encode(self.challenge)
        let text = #"{"type":"\#(self.clientDataType ?? type)","challenge":"\#(challenge)","origin":"\#(self.origin)"\#(self.clientDataExtra)}"#
        return Array(text.utf8)
    }

    func authenticatorData(attested: Bool) -> [UInt8] {
        var bytes = self.rpIDHash ?? Array(SHA256.hash(data: Array(self.rpID.utf8)))
        let attested = attested && !self.omitAttestedCredential
        bytes.append(attested ? self.flags | 0x40 : self.flags)
        bytes += withUnsafeBytes(of: self.signCount.bigEndian, Array.init)
        if attested {
            bytes += self.aaguid
            bytes += [UInt8(self.credentialID.count >> 8), UInt8(self.credentialID.count & 0xFF)]
            bytes += self.credentialID
            bytes += self.cosePublicKey
        }
        return bytes
    }

    /// The attestation object bytes.
    func attestationObject(clientDataHash: [UInt8]) -> [UInt8] {
        let authData = self.authenticatorData(attested: true)
        let signed = authData + clientDataHash
        var statement: [(key: CBORSerializer.MapKey, value: (inout CBORSerializer) throws -> Void)] = []
        func sign(_ key: P256.Signing.PrivateKey, _ data: [UInt8]) -> [UInt8] {
            var signature = Array(try! key.signature(for: data).derRepresentation)
            if self.corruptAttestationSignature { signature[signature.count - 1] ^= 0x01 }
            return signature
        }
        let extra = self.certificatesAfterLeaf
        let override = self.leafOverride
        func x5c(_ leaf: [UInt8]) -> (inout CBORSerializer) throws -> Void {
            { serializer in
                serializer.appendArrayHeader(count: 1 + extra.count)
                serializer.appendByteString(override ?? leaf)
                for certificate in extra { serializer.appendByteString(certificate) }
            }
        }
        switch self.format {
        case .none:
            break
        case .packedSelf:
            let signature = sign(self.credentialKey, signed)
            let algorithm = self.packedSelfAlgorithm
            statement = [(.text("alg"), { $0.appendInteger(algorithm) }), (.text("sig"), { $0.appendByteString(signature) })]
        case .packedX5C:
            let aaguidExtension = Certificate.Extension(
                oid: [1, 3, 6, 1, 4, 1, 45724, 1, 1, 4],
                critical: false,
                value: [0x04, 0x10] + self.aaguid[...]
            )
            var algorithm: Int64 = -7
            var key = Certificate.PublicKey(self.attestationKey.publicKey)
            var signature = sign(self.attestationKey, signed)
            if let rsa = self.packedX5CRSA {
                algorithm = rsa.algorithm
                key = Certificate.PublicKey(rsa.key.publicKey)
                signature =
                    rsa.algorithm == -65535
                    ? Array(try! rsa.key.signature(for: Insecure.SHA1.hash(data: signed), padding: .insecurePKCS1v1_5).rawRepresentation)
                    : Array(try! rsa.key.signature(for: SHA256.hash(data: signed), padding: .insecurePKCS1v1_5).rawRepresentation)
            }
            let leaf = Self.ca.leaf(
                forPublicKey: key,
                subject: self.attestationSubject,
                extensions: self.attestationExtensions ?? [aaguidExtension],
                certificateAuthority: self.attestationIsCA
            )
            statement = [
                (.text("alg"), { $0.appendInteger(algorithm) }),
                (.text("sig"), { $0.appendByteString(signature) }),
                (.text("x5c"), x5c(leaf)),
            ]
        case .fidoU2F:
            let leaf = Self.ca.leaf(for: self.attestationKey.publicKey)
            let rpIDHash = Array(authData.prefix(32))
            let data = [0x00] + rpIDHash + clientDataHash + self.credentialID + Array(self.credentialKey.publicKey.x963Representation)
            let signature = sign(self.attestationKey, data)
            statement = [
                (.text("sig"), { $0.appendByteString(signature) }),
                (.text("x5c"), x5c(leaf)),
            ]
        case .apple:
            let nonce = self.appleNonceOverride ?? Array(SHA256.hash(data: signed))
            let nonceExtension = Certificate.Extension(
                oid: [1, 2, 840, 113_635, 100, 8, 2],
                critical: false,
                value: [0x30, 0x24, 0xA1, 0x22, 0x04, 0x20] + nonce[...]
            )
            let leaf = Self.ca.leaf(for: self.appleCertificateKey ?? self.credentialKey.publicKey, extensions: [nonceExtension])
            statement = [(.text("x5c"), x5c(leaf))]
        case .androidKey:
            // The key description: versions and security levels, attestationChallenge, an empty
            // uniqueId, an empty software list and a TEE list with purpose [1] {SIGN} and origin
            // [702] GENERATED.
            let description: [UInt8] =
                [0x30, 0x42, 0x02, 0x01, 0x02, 0x0A, 0x01, 0x00, 0x02, 0x01, 0x01, 0x0A, 0x01, 0x00, 0x04, 0x20] + clientDataHash
                + [0x04, 0x00, 0x30, 0x00, 0x30, 0x0E, 0xA1, 0x05, 0x31, 0x03, 0x02, 0x01, 0x02, 0xBF, 0x85, 0x3E, 0x03, 0x02, 0x01, 0x00]
            let keyDescription = Certificate.Extension(oid: [1, 3, 6, 1, 4, 1, 11129, 2, 1, 17], critical: false, value: description[...])
            let key = self.androidKeyCertifiesAttestationKey ? self.attestationKey : self.credentialKey
            let leaf = Self.ca.leaf(for: key.publicKey, extensions: [keyDescription])
            let signature = sign(key, signed)
            statement = [
                (.text("alg"), { $0.appendInteger(-7) }),
                (.text("sig"), { $0.appendByteString(signature) }),
                (.text("x5c"), x5c(leaf)),
            ]
        }
        if self.extraStatementMember {
            statement.append((.text("extra"), { $0.appendInteger(0) }))
        }
        let formatName =
            switch self.format {
            case .none: "none"
            case .packedSelf, .packedX5C: "packed"
            case .fidoU2F: "fido-u2f"
            case .apple: "apple"
            case .androidKey: "android-key"
            }
        var serializer = CBORSerializer()
        try! serializer.appendMap([
            (.text("fmt"), { $0.appendTextString(formatName) }),
            (.text("attStmt"), { try $0.appendMap(statement) }),
            (.text("authData"), { $0.appendByteString(authData) }),
        ])
        return serializer.bytes
    }

    /// A registration response in the `toJSON()` shape.
    func registrationJSON() -> [UInt8] {
        let clientData = self.clientDataJSON(type: "webauthn.create")
        let object = self.attestationObject(clientDataHash: Array(SHA256.hash(data: clientData)))
        let id = WebAuthnBase64.encode(self.rawID ?? self.credentialID)
        let text = """
            {"id":"\(id)","rawId":"\(id)","type":"public-key","clientExtensionResults":{},\
            "authenticatorAttachment":"platform","response":{"clientDataJSON":"\(WebAuthnBase64.encode(clientData))",\
            "attestationObject":"\(WebAuthnBase64.encode(object))","transports":["internal","hybrid"]}}
            """
        return Array(text.utf8)
    }

    /// An authentication response in the `toJSON()` shape.
    func authenticationJSON() -> [UInt8] {
        let clientData = self.clientDataJSON(type: "webauthn.get")
        let authData = self.authenticatorData(attested: false)
        let signature =
            self.signatureOverride
            ?? Array(try! self.credentialKey.signature(for: authData + Array(SHA256.hash(data: clientData))).derRepresentation)
        let id = WebAuthnBase64.encode(self.rawID ?? self.credentialID)
        let handle = self.userHandle.map { #","userHandle":"\#(WebAuthnBase64.encode($0))""# } ?? ""
        let text = """
            {"id":"\(id)","rawId":"\(id)","type":"public-key","clientExtensionResults":{},"response":{\
            "clientDataJSON":"\(WebAuthnBase64.encode(clientData))","authenticatorData":"\(WebAuthnBase64.encode(authData))",\
            "signature":"\(WebAuthnBase64.encode(signature))"\(handle)}}
            """
        return Array(text.utf8)
    }

    /// The policy this authenticator's responses pass.
    func policy(requireUserVerification: Bool = false, anchored: Bool = false) -> WebAuthnPolicy {
        WebAuthnPolicy(
            relyingPartyID: "example.com",
            allowedOrigins: ["https://example.com"],
            requireUserVerification: requireUserVerification,
            trustAnchors: anchored ? [Self.ca.root] : []
        )
    }
}
