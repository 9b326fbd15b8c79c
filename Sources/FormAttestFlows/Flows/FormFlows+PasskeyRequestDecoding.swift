//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import CanonicalJSON
import FormAttestForm

// The passkey requests' bodies, by the rules of FormFlows+RequestDecoding.swift (the same field
// readers; every failure is `invalid_request`, 400).

extension FormFlows.RequestFields {
    /// An object member that may be absent or `null` (a `PublicKeyCredential.toJSON()`), as the
    /// bytes of its canonical serialization: its binary members are base64url strings, so their
    /// bytes (clientDataJSON above all) are the client's, unchanged.
    public func optionalObject(_ name: String) throws(FlowError) -> [UInt8]? {
        guard let field = self.value[name], field != .null else { return nil }
        guard case .object = field else { throw Self.invalid("\(name) must be a JSON object (PublicKeyCredential.toJSON())") }
        return field.canonicalBytes
    }
}

extension FormFlows.ConfirmRequest {
    /// `{username, keyId?, assertion?, passkey?, form}`: `keyId` and `assertion` together (an App
    /// Attest assertion), `passkey` a passkey assertion in `PublicKeyCredential.toJSON()`'s
    /// shape, at least one of the two.
    public init(body: JSONValue, actingUser: String? = nil) throws(FlowError) {
        let fields = FormFlows.RequestFields(body, actingUser: actingUser)
        let prepared = fields.preparedForm()
        let username = try fields.username()
        let keyID = try fields.optionalBytes("keyId")
        let assertion = try fields.optionalBytes("assertion")
        let passkey = try fields.optionalObject("passkey")
        let form = try fields.form(prepared)
        var appAttest: FormFlows.AppAttestSignature?
        switch (keyID, assertion) {
        case (let keyID?, let assertion?): appAttest = FormFlows.AppAttestSignature(keyID: keyID, assertion: assertion)
        case (nil, nil): appAttest = nil
        default: throw FormFlows.RequestFields.invalid("keyId and assertion go together (an App Attest assertion)")
        }
        guard appAttest != nil || passkey != nil else {
            throw FormFlows.RequestFields.invalid("the request carries no signature: send keyId and assertion, passkey, or both")
        }
        self.init(username: username, appAttest: appAttest, passkey: passkey, form: form)
        self.preparedForm = prepared
    }
}

extension FormFlows.PasskeyRegistrationRequest {
    /// `{username, challenge, userHandle, credential, approval?}`: the passkey challenge and user
    /// handle (base64url) the credential was created with, the registration response in
    /// `PublicKeyCredential.toJSON()`'s shape, and for a user who has a passkey, an assertion of it
    /// over the same challenge in that shape.
    public init(body: JSONValue, actingUser: String? = nil) throws(FlowError) {
        let fields = FormFlows.RequestFields(body, actingUser: actingUser)
        let username = try fields.username()
        let challenge = try fields.bytes("challenge")
        let userHandle = try fields.bytes("userHandle")
        guard let credential = try fields.optionalObject("credential") else {
            throw FormFlows.RequestFields.invalid("credential must be a JSON object (PublicKeyCredential.toJSON())")
        }
        self.init(
            username: username, challenge: challenge, userHandle: userHandle, response: credential, approval: try fields.optionalObject("approval"))
    }
}
