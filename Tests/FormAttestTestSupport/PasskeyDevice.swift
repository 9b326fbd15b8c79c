//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CBOR
public import Crypto
import FormAttestForm
public import WebAuthn

/// A platform authenticator in software for the flows', the service's and the system tests: one ES256 credential, `none`
/// attestation, and the `PublicKeyCredential.toJSON()` shape a browser or iOS sends. Each field
/// is one thing a test may change.
public struct PasskeyDevice: Sendable {
    public static let rpID = "bank.example"
    public static let origin = "https://bank.example"

    public var key = P256.Signing.PrivateKey()
    public var credentialID: [UInt8]
    public var signCount: UInt32 = 0
    /// UP and UV by default (0x01 | 0x04); BE (0x08) and BS (0x10) for a synced passkey.
    public var flags: UInt8 = 0x01 | 0x04
    public var origin = Self.origin
    /// The user handle the assertion returns (`nil`: none, as a client may).
    public var userHandle: [UInt8]?
    /// The transports the registration reports (one name WebAuthn does not register).
    public var transports = ["internal", "hybrid", "carrier-pigeon"]
    /// A `fido-u2f` attestation instead of `none`: the attestation key and its certificate (DER),
    /// which the caller issues (a chain the verifier checks against its anchors).
    public var u2fAttestation: (key: P256.Signing.PrivateKey, certificate: [UInt8])?

    public init(id: UInt8 = 1) {
        self.credentialID = [UInt8](repeating: id, count: 16)
    }

    public static func policy() -> WebAuthnPolicy {
        WebAuthnPolicy(relyingPartyID: Self.rpID, allowedOrigins: [Self.origin])
    }

    private func authenticatorData(attested: Bool) -> [UInt8] {
        var bytes = Array(SHA256.hash(data: Array(Self.rpID.utf8)))
        bytes.append(attested ? self.flags | 0x40 : self.flags)
        bytes += withUnsafeBytes(of: self.signCount.bigEndian, Array.init)
        if attested {
            bytes += [UInt8](repeating: 0, count: 16)
            bytes += [UInt8(self.credentialID.count >> 8), UInt8(self.credentialID.count & 0xFF)]
            bytes += self.credentialID
            let point = Array(self.key.publicKey.x963Representation)
            var cose = CBORSerializer()
            try? cose.appendMap([
                (.integer(1), { $0.appendInteger(2) }),
                (.integer(3), { $0.appendInteger(-7) }),
                (.integer(-1), { $0.appendInteger(1) }),
                (.integer(-2), { $0.appendByteString(point[1..<33]) }),
                (.integer(-3), { $0.appendByteString(point[33..<65]) }),
            ])
            bytes += cose.bytes
        }
        return bytes
    }

    private func clientData(type: String, challenge: [UInt8]) -> [UInt8] {
        Array(#"{"type":"\#(type)","challenge":"\#(Base64URL.encode(challenge))","origin":"\#(self.origin)","crossOrigin":false}"#.utf8)
    }

    /// `navigator.credentials.create()`'s answer to `challenge`.
    public func register(challenge: [UInt8]) -> [UInt8] {
        let clientData = self.clientData(type: "webauthn.create", challenge: challenge)
        var object = CBORSerializer()
        let authData = self.authenticatorData(attested: true)
        var format = "none"
        var statement: [(key: CBORSerializer.MapKey, value: (inout CBORSerializer) throws -> Void)] = []
        if let (key, certificate) = self.u2fAttestation {
            // FIDO U2F's signed data (WebAuthn §8.6): 0x00 ‖ rpIdHash ‖ clientDataHash ‖ credentialId ‖ the key's point.
            let signed =
                [0x00] + Array(authData.prefix(32)) + Array(SHA256.hash(data: clientData)) + self.credentialID
                + Array(self.key.publicKey.x963Representation)
            let signature = (try? key.signature(for: signed).derRepresentation).map(Array.init) ?? []
            format = "fido-u2f"
            statement = [
                (.text("sig"), { $0.appendByteString(signature) }),
                (
                    .text("x5c"),
                    {
                        $0.appendArrayHeader(count: 1); $0.appendByteString(certificate)
                    }
                ),
            ]
        }
        try? object.appendMap([
            (.text("fmt"), { $0.appendTextString(format) }),
            (.text("attStmt"), { try $0.appendMap(statement) }),
            (.text("authData"), { $0.appendByteString(authData) }),
        ])
        let id = Base64URL.encode(self.credentialID)
        return Array(
            """
            {"id":"\(id)","rawId":"\(id)","type":"public-key","clientExtensionResults":{},"authenticatorAttachment":"platform",\
            "response":{"clientDataJSON":"\(Base64URL.encode(clientData))","attestationObject":"\(Base64URL.encode(object.bytes))",\
            "transports":[\(self.transports.map { "\"\($0)\"" }.joined(separator: ","))]}}
            """.utf8)
    }

    /// `navigator.credentials.get()`'s answer to `challenge` (for a form: its clientDataHash).
    /// Moves the counter first when the authenticator keeps one.
    public mutating func sign(challenge: [UInt8]) -> [UInt8] {
        if self.signCount > 0 { self.signCount += 1 }
        let clientData = self.clientData(type: "webauthn.get", challenge: challenge)
        let authData = self.authenticatorData(attested: false)
        let signature = (try? self.key.signature(for: authData + Array(SHA256.hash(data: clientData))).derRepresentation).map(Array.init) ?? []
        let id = Base64URL.encode(self.credentialID)
        let handle = self.userHandle.map { #","userHandle":"\#(Base64URL.encode($0))""# } ?? ""
        return Array(
            """
            {"id":"\(id)","rawId":"\(id)","type":"public-key","clientExtensionResults":{},"response":{\
            "clientDataJSON":"\(Base64URL.encode(clientData))","authenticatorData":"\(Base64URL.encode(authData))",\
            "signature":"\(Base64URL.encode(signature))"\(handle)}}
            """.utf8)
    }
}
