//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON

/// The members a WebAuthn response shares in the `PublicKeyCredential.toJSON()` shape, read strictly.
///
/// `id` and `rawId` must name the same bytes; `type` must be `public-key`; binary members are
/// base64url (standard base64 and padding accepted); `clientExtensionResults` and
/// `authenticatorAttachment`, when present, must have their types. Members the verifier does not
/// use (`publicKey`, `publicKeyAlgorithm` that `toJSON()` adds, a library's own) are ignored.
struct PublicKeyCredentialJSON {
    let rawID: [UInt8]
    let response: JSONObjectMembers
    let authenticatorAttachment: String?

    init(bytes: some Collection<UInt8>) throws(WebAuthnError) {
        let value = try strictJSONObject(
            bytes,
            limit: WebAuthnLimits.maximumResponseSize,
            what: "the response",
            malformed: .malformedResponse
        )
        guard let type = value.stringBytes("type"), type.elementsEqual("public-key".utf8) else {
            throw WebAuthnError.malformedResponse("the response's type is not \"public-key\"")
        }
        let id = try Self.binary(value, "id", what: "id")
        let rawID = try Self.binary(value, "rawId", what: "rawId")
        guard id == rawID else {
            throw WebAuthnError.malformedResponse("id and rawId name different credentials")
        }
        guard let response = value["response"], response.kind == .object else {
            throw WebAuthnError.malformedResponse("the response has no object member \"response\"")
        }
        switch value["clientExtensionResults"]?.kind {
        case nil, .object: break
        default: throw WebAuthnError.malformedResponse("clientExtensionResults is not an object")
        }
        switch value["authenticatorAttachment"] {
        case nil: self.authenticatorAttachment = nil
        case let attachment? where attachment.kind == .null: self.authenticatorAttachment = nil
        case let attachment? where attachment.kind == .string:
            self.authenticatorAttachment = String(decoding: value.string(attachment), as: UTF8.self)
        default: throw WebAuthnError.malformedResponse("authenticatorAttachment is not a string")
        }
        self.rawID = rawID
        self.response = value.object(response)
    }

    /// A required binary member of `object`, decoded straight from the input's bytes.
    static func binary(_ object: JSONObjectMembers, _ name: String, what: String, limit: Int = WebAuthnLimits.maximumResponseSize)
        throws(WebAuthnError) -> [UInt8]
    {
        guard let text = object.stringBytes(name) else {
            throw WebAuthnError.malformedResponse("\(what) is missing or not a string")
        }
        guard let bytes = WebAuthnBase64.decode(utf8: text) else {
            throw WebAuthnError.malformedResponse("\(what) is not base64url or base64")
        }
        guard bytes.count <= limit else {
            throw WebAuthnError(code: .responseTooLarge, reason: "\(what) has \(bytes.count) bytes; the limit is \(limit)")
        }
        return bytes
    }
}

/// A registration response (`navigator.credentials.create()`, `toJSON()` shape).
public struct RegistrationResponse: Sendable {
    /// The credential id the client reported (`rawId`).
    public let rawID: [UInt8]
    /// The exact clientDataJSON bytes.
    public let clientDataJSON: [UInt8]
    /// The attestation object's bytes.
    public let attestationObject: [UInt8]
    /// `response.transports`, when given.
    public let transports: [String]
    /// `authenticatorAttachment`, when given.
    public let authenticatorAttachment: String?

    /// Parses the JSON of a registration response.
    ///
    /// - Throws: ``WebAuthnError/Code/malformedResponse`` or ``WebAuthnError/Code/responseTooLarge``.
    public init(json bytes: some Collection<UInt8>) throws(WebAuthnError) {
        let credential = try PublicKeyCredentialJSON(bytes: bytes)
        let response = credential.response
        self.rawID = credential.rawID
        self.authenticatorAttachment = credential.authenticatorAttachment
        self.clientDataJSON = try PublicKeyCredentialJSON.binary(
            response, "clientDataJSON", what: "response.clientDataJSON", limit: WebAuthnLimits.maximumClientDataSize)
        self.attestationObject = try PublicKeyCredentialJSON.binary(
            response, "attestationObject", what: "response.attestationObject", limit: WebAuthnLimits.maximumAttestationObjectSize)
        switch response["transports"] {
        case nil: self.transports = []
        case let items? where items.kind == .null: self.transports = []
        case let items? where items.kind == .array:
            var transports: [String] = []
            for item in response.elements(items) {
                guard item.kind == .string else {
                    throw WebAuthnError.malformedResponse("response.transports holds a value that is not a string")
                }
                transports.append(String(decoding: response.string(item), as: UTF8.self))
            }
            self.transports = transports
        default: throw WebAuthnError.malformedResponse("response.transports is not an array")
        }
    }

    /// A registration response from its parts, as a relying party kept them (an evidence record
    /// re-verified offline): the same bytes the verifier checks, without the JSON around them.
    public init(
        rawID: [UInt8], clientDataJSON: [UInt8], attestationObject: [UInt8], transports: [String] = [], authenticatorAttachment: String? = nil
    ) {
        self.rawID = rawID
        self.clientDataJSON = clientDataJSON
        self.attestationObject = attestationObject
        self.transports = transports
        self.authenticatorAttachment = authenticatorAttachment
    }
}

/// An authentication response (`navigator.credentials.get()`, `toJSON()` shape).
public struct AuthenticationResponse: Sendable {
    /// The credential id the client reported (`rawId`).
    public let rawID: [UInt8]
    /// The exact clientDataJSON bytes.
    public let clientDataJSON: [UInt8]
    /// The exact authenticator data bytes.
    public let authenticatorData: [UInt8]
    /// The signature over authenticatorData ‖ SHA-256(clientDataJSON).
    public let signature: [UInt8]
    /// `response.userHandle`, when given (discoverable credentials return it).
    public let userHandle: [UInt8]?

    /// Parses the JSON of an authentication response.
    ///
    /// - Throws: ``WebAuthnError/Code/malformedResponse`` or ``WebAuthnError/Code/responseTooLarge``.
    public init(json bytes: some Collection<UInt8>) throws(WebAuthnError) {
        let credential = try PublicKeyCredentialJSON(bytes: bytes)
        let response = credential.response
        self.rawID = credential.rawID
        self.clientDataJSON = try PublicKeyCredentialJSON.binary(
            response, "clientDataJSON", what: "response.clientDataJSON", limit: WebAuthnLimits.maximumClientDataSize)
        self.authenticatorData = try PublicKeyCredentialJSON.binary(
            response, "authenticatorData", what: "response.authenticatorData", limit: WebAuthnLimits.maximumAuthenticatorDataSize)
        self.signature = try PublicKeyCredentialJSON.binary(
            response, "signature", what: "response.signature", limit: WebAuthnLimits.maximumSignatureSize)
        switch response["userHandle"]?.kind {
        case nil, .null: self.userHandle = nil
        default:
            self.userHandle = try PublicKeyCredentialJSON.binary(
                response, "userHandle", what: "response.userHandle", limit: WebAuthnLimits.maximumUserHandleSize)
        }
    }

    /// An authentication response from its parts, as a relying party kept them (an evidence
    /// record re-verified offline): the same bytes the verifier checks, without the JSON around them.
    public init(rawID: [UInt8], clientDataJSON: [UInt8], authenticatorData: [UInt8], signature: [UInt8], userHandle: [UInt8]?) {
        self.rawID = rawID
        self.clientDataJSON = clientDataJSON
        self.authenticatorData = authenticatorData
        self.signature = signature
        self.userHandle = userHandle
    }
}
