//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import CanonicalJSON
import FormAttestForm

// Request bodies → the flows' requests, in one place: the HTTP service and the request fuzz target
// decode with exactly these rules. Every failure is a `FlowError` of category `.malformedInput`
// (400), and the first bad field, in the order the fields are read, is the one reported.

extension FormFlows {
    /// The deepest nesting of a request body (the form inside may nest 16 of these levels).
    public static let maximumBodyDepth = 32

    /// Parses a request body with the strict RFC 8785 parser, never a lenient decoder: a body
    /// (and so a `form`) with duplicate names or lone surrogates is refused as a whole.
    ///
    /// Numbers are exact: the form inside is canonicalized from this parse, so a number rounded
    /// here would reach the flows already rounded (and verify as a value nobody wrote).
    ///
    /// - Throws: ``FlowError`` `form_inexact_number` (a number RFC 8785 would change),
    ///   `invalid_json` (anything else the parser refuses, the size and depth limits included) or
    ///   `invalid_request` (JSON, but not an object), each `.malformedInput`.
    public static func parseBody(_ bytes: some Collection<UInt8>, maximumSize: Int) throws(FlowError) -> JSONValue {
        let value: JSONValue
        do {
            value = try CanonicalJSON.parse(
                bytes,
                limits: .init(maximumSize: maximumSize, maximumDepth: Self.maximumBodyDepth, exactNumbers: true)
            )
        } catch  where error.code == .inexactNumber {
            throw FlowError(code: .init(FormError.Code.inexactNumber), category: .malformedInput, reason: error.description)
        } catch {
            throw FlowError(code: .invalidJSON, category: .malformedInput, reason: error.description)
        }
        guard case .object = value else { throw RequestFields.invalid("the body must be a JSON object") }
        return value
    }

    /// The fields of a parsed request body, each read by the rule every endpoint shares.
    public struct RequestFields: Sendable {
        /// The body (a JSON object, as ``FormFlows/parseBody(_:maximumSize:)`` returns it).
        public let value: JSONValue
        /// The user the caller's credential names (an identity provider's token), who acts
        /// whatever the body's `username` says: the caller's authentication checked that one
        /// against it before. `nil`: the body's `username` is the user.
        public let actingUser: String?

        public init(_ value: JSONValue, actingUser: String? = nil) {
            self.value = value
            self.actingUser = actingUser
        }

        static func invalid(_ reason: String) -> FlowError {
            FlowError(code: .invalidRequest, category: .malformedInput, reason: reason)
        }

        /// A string field of 1 to `maximumLength` UTF-8 bytes.
        public func string(_ name: String, maximumLength: Int = 256) throws(FlowError) -> String {
            guard let text = self.value[name]?.stringValue, !text.isEmpty, text.utf8.count <= maximumLength else {
                throw Self.invalid("\(name) must be a non-empty string of at most \(maximumLength) bytes")
            }
            return text
        }

        /// The acting user (``actingUser``), else the `username` field, by ``Username``'s rule (no
        /// control characters).
        public func username() throws(FlowError) -> String {
            if let actingUser = self.actingUser { return actingUser }
            guard let text = self.value["username"]?.stringValue else {
                throw Self.invalid("username must be a string")
            }
            if let problem = Username.problem(text) { throw Self.invalid(problem) }
            return text
        }

        /// A binary field, in base64url or standard base64, not empty.
        public func bytes(_ name: String) throws(FlowError) -> [UInt8] {
            guard let text = self.value[name]?.stringValue, let bytes = Base64URL.decode(text), !bytes.isEmpty else {
                throw Self.invalid("\(name) must be base64url or base64")
            }
            return bytes
        }

        /// A binary field that may be absent or `null`.
        public func optionalBytes(_ name: String) throws(FlowError) -> [UInt8]? {
            guard let field = self.value[name], field != .null else { return nil }
            return try self.bytes(name)
        }

        /// The `form` object, as the canonical bytes the flows parse again.
        public func form() throws(FlowError) -> [UInt8] {
            guard let form = self.value["form"], case .object = form else {
                throw Self.invalid("form must be a JSON object")
            }
            return form.canonicalBytes
        }

        /// The `form` object's canonical bytes: `prepared`'s when there is one (built once).
        func form(_ prepared: SignedForm?) throws(FlowError) -> [UInt8] {
            if let prepared { return prepared.canonicalBytes }
            return try self.form()
        }

        /// The `form` object as a ``SignedForm`` made from this parse (the form is not parsed
        /// again, and its canonical bytes are built once), when it is a form that
        /// `SignedForm(jsonBytes:)` accepts from those canonical bytes: within
        /// ``SignedForm/limits`` (the canonical bytes' size, the nesting; the body's parse already
        /// refused duplicate names, lone surrogates and inexact numbers) and with a valid
        /// timestamp. `nil` otherwise: the flows then parse the bytes and name what is wrong.
        func preparedForm() -> SignedForm? {
            guard let form = self.value["form"], case .object = form, Self.nesting(form) <= SignedForm.limits.maximumDepth,
                let signed = try? SignedForm(value: form), signed.canonicalBytes.count <= SignedForm.limits.maximumSize
            else { return nil }
            return signed
        }

        /// Nesting as the strict parser counts it: 1 for an object or array of scalars.
        private static func nesting(_ value: JSONValue) -> Int {
            switch value {
            case .object(let object): 1 + (object.members.lazy.map { Self.nesting($0.value) }.max() ?? 0)
            case .array(let elements): 1 + (elements.lazy.map(Self.nesting).max() ?? 0)
            default: 0
            }
        }
    }
}

extension FormFlows.AttestRequest {
    /// `{username, keyId, attestationObject, form, localChallenge?}`; `localChallenge` is the
    /// clientDataHash the client says it attested over (absent or `null`: not checked).
    public init(body: JSONValue, actingUser: String? = nil) throws(FlowError) {
        let fields = FormFlows.RequestFields(body, actingUser: actingUser)
        let prepared = fields.preparedForm()
        let username = try fields.username()
        let keyID = try fields.bytes("keyId")
        let attestationObject = try fields.bytes("attestationObject")
        let form = try fields.form(prepared)
        self.init(
            username: username,
            keyID: keyID,
            attestationObject: attestationObject,
            form: form,
            claimedClientDataHash: try fields.optionalBytes("localChallenge")
        )
        self.preparedForm = prepared
    }
}

extension FormFlows.AssertRequest {
    /// `{username, keyId, assertion, form}`.
    public init(body: JSONValue, actingUser: String? = nil) throws(FlowError) {
        let fields = FormFlows.RequestFields(body, actingUser: actingUser)
        let prepared = fields.preparedForm()
        let username = try fields.username()
        let keyID = try fields.bytes("keyId")
        let assertion = try fields.bytes("assertion")
        let form = try fields.form(prepared)
        self.init(username: username, keyID: keyID, assertion: assertion, form: form)
        self.preparedForm = prepared
    }
}

extension FormFlows.PooledRequest {
    /// `{username, keyId, attestationObject, poolChallenge, assertion, form}`.
    public init(body: JSONValue, actingUser: String? = nil) throws(FlowError) {
        let fields = FormFlows.RequestFields(body, actingUser: actingUser)
        let prepared = fields.preparedForm()
        let username = try fields.username()
        let keyID = try fields.bytes("keyId")
        let attestationObject = try fields.bytes("attestationObject")
        let poolChallenge = try fields.bytes("poolChallenge")
        let assertion = try fields.bytes("assertion")
        let form = try fields.form(prepared)
        self.init(
            username: username, keyID: keyID, attestationObject: attestationObject, poolChallenge: poolChallenge, assertion: assertion, form: form
        )
        self.preparedForm = prepared
    }
}
