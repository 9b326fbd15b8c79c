//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
public import CanonicalJSON
import Crypto
import FormAttestForm
public import Foundation
import RFC3339
public import X509

/// Evidence that one form was accepted: everything needed to prove, offline and years later, that
/// an Apple-attested key signed exactly these bytes (schemas/evidence-record.schema.json).
///
/// The device's own signatures are the evidence: the key's attestation (its certificate chain to
/// Apple's root, made over ``KeyAttestationEvidence/clientDataHash``) and, for a form signed by
/// an assertion, the assertion over SHA-256 of ``form``. What only the server can say (when it
/// verified, under which policy, for which user) is covered by the server's signature over the
/// whole record (``SignedEvidence``).
public struct EvidenceRecord: Sendable, Hashable {
    /// How the form was signed.
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        /// The form's hash was the clientDataHash of the key's attestation (a registering form).
        case attestation
        /// An assertion of a registered key signed the form.
        case assertion
        /// A pooled key: its attestation was made over a pool challenge, an assertion signed the form.
        case pooled
        /// A passkey alone signed the form (version 3): no App Attest key, so ``keyID``,
        /// ``appID``, ``environment``, ``counter``, ``keyAttestation`` and ``assertion`` are unused
        /// and not written.
        case passkey
    }

    /// The attestation that registered the key.
    public struct KeyAttestationEvidence: Sendable, Hashable {
        /// The CBOR attestation object, as the device sent it.
        public var object: [UInt8]
        /// The 32 bytes it was made over.
        public var clientDataHash: [UInt8]
        /// When the server verified it (its certificate chain is checked again at this time).
        public var verifiedAt: Date

        public init(object: [UInt8], clientDataHash: [UInt8], verifiedAt: Date) {
            self.object = object
            self.clientDataHash = clientDataHash
            self.verifiedAt = EvidenceRecord.recordable(verifiedAt)
        }
    }

    /// The policy in force when the form was accepted.
    public struct Policy: Sendable, Hashable {
        public var appIDs: [String]
        public var environments: [AppAttestEnvironment]
        /// SHA-256 of each trust anchor's SubjectPublicKeyInfo: the anchor's key, which a
        /// re-issued root keeps (a chain is validated to a name and a key, not to certificate bytes).
        public var trustAnchorKeyDigests: [[UInt8]]
        /// The form's accepted age and future skew, in seconds.
        public var formMaximumAge: Int
        public var formMaximumFutureSkew: Int
        /// Whether forms had to answer a server challenge.
        public var requireServerChallenge: Bool
        /// Whether the form's session was bound to the caller's (an identity token's `sid`).
        public var sessionBound: Bool

        public init(
            appIDs: [String], environments: [AppAttestEnvironment], trustAnchorKeyDigests: [[UInt8]], formMaximumAge: Int,
            formMaximumFutureSkew: Int, requireServerChallenge: Bool, sessionBound: Bool
        ) {
            self.appIDs = appIDs
            self.environments = environments.sorted { $0.rawValue < $1.rawValue }
            self.trustAnchorKeyDigests = trustAnchorKeyDigests
            self.formMaximumAge = formMaximumAge
            self.formMaximumFutureSkew = formMaximumFutureSkew
            self.requireServerChallenge = requireServerChallenge
            self.sessionBound = sessionBound
        }

        /// SHA-256 of a certificate's SubjectPublicKeyInfo: how a policy names its trust anchors.
        public static func keyDigest(of anchor: Certificate) -> [UInt8] {
            Array(SHA256.hash(data: anchor.publicKey.subjectPublicKeyInfoBytes))
        }
    }

    /// The format's first version, which ``Format/selfContained`` writes; a reader takes it,
    /// ``Format/referencingRegistration`` (version 2) and a record with a passkey (version 3), and
    /// refuses any other.
    public static let version = 1
    /// The version of a record with a ``passkey``: the App Attest members are present when an App
    /// Attest key signed too (``Kind/assertion``, its attestation carried or referenced as
    /// ``format`` says) and absent for ``Kind/passkey``; `amr` and `passkey` are added.
    public static let passkeyVersion = 3

    /// How a record carries its key's attestation.
    public enum Format: Int, Sendable, Hashable, CaseIterable {
        /// Version 1: the attestation (object, clientDataHash, verifiedAt) is in the record, which
        /// verifies alone (`serve --evidence-dir` without the log).
        case selfContained = 1
        /// Version 2: `keyRegistration` is base64url(SHA-256) of the key's registration document
        /// (``KeyRegistration``), stored once per key; reading the record needs that document.
        case referencingRegistration = 2
    }

    public var kind: Kind
    /// When the server accepted the form (milliseconds).
    public var verifiedAt: Date
    /// The user the form was accepted for.
    public var username: String
    /// The form's canonical (RFC 8785) bytes: exactly what the device signed the hash of.
    public var form: [UInt8]
    public var keyID: [UInt8]
    public var appID: String
    public var environment: AppAttestEnvironment
    /// The signed counter: 0 for ``Kind/attestation``.
    public var counter: UInt32
    public var keyAttestation: KeyAttestationEvidence
    /// The assertion that signed the form (``Kind/assertion`` and ``Kind/pooled``).
    public var assertion: [UInt8]?
    public var policy: Policy
    /// How the record carries the App Attest key's attestation (version 1 or 2; a version-3
    /// record carries `keyAttestation` or `keyRegistration` the same way): the attestation above
    /// is in memory either way.
    public var format: Format
    /// The passkey that signed the form, when one did (the record is then version 3).
    public var passkey: PasskeyEvidence?
    /// The id of the key's registration, when the caller already has it (``referencing(_:id:)``).
    private var knownRegistration = KnownRegistration()

    /// A registration and its id, known to the caller: not part of the record's value (it is
    /// equal to every other), and used only while it is the record's own registration.
    private struct KnownRegistration: Sendable, Hashable {
        var registration: KeyRegistration?
        var id: [UInt8] = []
        static func == (_: Self, _: Self) -> Bool { true }
        func hash(into hasher: inout Hasher) {}
    }

    /// This record as version 2, referencing `registration`, whose id the caller already has
    /// (a service that stored it): the record's bytes then use `id` instead of encoding and
    /// hashing the document again, as long as `registration` is the record's own (compared
    /// whole, so a record changed since never carries a stale reference).
    public func referencing(_ registration: KeyRegistration, id: [UInt8]) -> EvidenceRecord {
        var record = self
        record.format = .referencingRegistration
        record.knownRegistration = KnownRegistration(registration: registration, id: id)
        return record
    }

    /// The id of the key's registration this record references (version 2).
    var registrationID: [UInt8] {
        let registration = KeyRegistration(of: self)
        if self.knownRegistration.registration == registration { return self.knownRegistration.id }
        return registration.id
    }

    public init(
        kind: Kind, verifiedAt: Date, username: String, form: [UInt8], keyID: [UInt8], appID: String,
        environment: AppAttestEnvironment, counter: UInt32, keyAttestation: KeyAttestationEvidence, assertion: [UInt8]?, policy: Policy,
        format: Format = .selfContained, passkey: PasskeyEvidence? = nil
    ) {
        self.kind = kind
        self.verifiedAt = Self.recordable(verifiedAt)
        self.username = username
        self.form = form
        self.keyID = keyID
        self.appID = appID
        self.environment = environment
        self.counter = counter
        self.keyAttestation = keyAttestation
        self.assertion = assertion
        self.policy = policy
        self.format = format
        self.passkey = passkey
    }

    /// A form signed by a passkey alone (``Kind/passkey``, version 3).
    public init(passkeyOnly passkey: PasskeyEvidence, verifiedAt: Date, username: String, form: [UInt8], policy: Policy) {
        self.init(
            kind: .passkey, verifiedAt: verifiedAt, username: username, form: form, keyID: [], appID: "", environment: .production, counter: 0,
            keyAttestation: KeyAttestationEvidence(object: [], clientDataHash: [], verifiedAt: Date(timeIntervalSince1970: 0)), assertion: nil,
            policy: policy, passkey: passkey)
    }

    /// Whether an App Attest key signed the form (every kind but ``Kind/passkey``).
    public var signedByAppAttest: Bool { self.kind != .passkey }

    /// The `version` the record is written with.
    public var version: Int { self.passkey == nil ? self.format.rawValue : Self.passkeyVersion }

    /// The RFC 8176 `amr` of the record's factors, as its `amr` member states them (version 3).
    public var methodReferences: [String] {
        MethodReferences.of(appAttest: self.signedByAppAttest, passkey: self.passkey?.assertion)
    }

    /// SHA-256 of ``form``: the clientDataHash the device signed.
    public var formHash: [UInt8] { Array(SHA256.hash(data: self.form)) }

    /// A time as a record keeps it: whole milliseconds, so that it reads back equal.
    static func recordable(_ date: Date) -> Date {
        RFC3339UTC.millisecondPrecision(date)
    }

    // MARK: - JSON

    /// The record as JSON (its canonical bytes are what the server signs).
    public var json: JSONValue {
        func text(_ string: String) -> JSONValue { .string(JSONString(string)) }
        func binary(_ bytes: [UInt8]) -> JSONValue { text(Base64URL.encode(bytes)) }
        let attestation: (name: String, value: JSONValue) =
            switch self.format {
            case .selfContained: ("keyAttestation", self.keyAttestation.json)
            case .referencingRegistration: ("keyRegistration", binary(self.registrationID))
            }
        var members: [(name: String, value: JSONValue)] = [
            ("type", text(Self.type)),
            ("version", .number(Double(self.version))),
            ("kind", text(self.kind.rawValue)),
            ("verifiedAt", text(RFC3339UTC.format(self.verifiedAt))),
            ("username", text(self.username)),
            ("form", binary(self.form)),
            ("formHash", binary(self.formHash)),
        ]
        if self.signedByAppAttest {
            members += [
                ("keyId", binary(self.keyID)),
                ("appId", text(self.appID)),
                ("environment", text(self.environment.rawValue)),
                ("counter", .number(Double(self.counter))),
                attestation,
            ]
        }
        if let passkey = self.passkey {
            members += [("amr", .array(self.methodReferences.map(text))), ("passkey", passkey.json)]
        }
        members.append(
            (
                "policy",
                .object(
                    JSONObject(constantMembers: [
                        ("appIds", .array(self.policy.appIDs.map(text))),
                        ("environments", .array(self.policy.environments.map { text($0.rawValue) })),
                        ("trustAnchorKeyDigests", .array(self.policy.trustAnchorKeyDigests.map(binary))),
                        ("formMaximumAge", .number(Double(self.policy.formMaximumAge))),
                        ("formMaximumFutureSkew", .number(Double(self.policy.formMaximumFutureSkew))),
                        ("requireServerChallenge", .bool(self.policy.requireServerChallenge)),
                        ("sessionBound", .bool(self.policy.sessionBound)),
                    ])
                )
            ))
        if let assertion = self.assertion { members.append(("assertion", binary(assertion))) }
        return .object(JSONObject(constantMembers: members))
    }

    /// The record's `type` member.
    public static let type = "formattest-evidence"

    /// Finds a key's registration document by its id (SHA-256 of its bytes): the bytes, or nil
    /// when there is none. The reader checks what it returns; a resolver only fetches.
    public typealias RegistrationResolver = @Sendable (_ id: [UInt8]) -> [UInt8]?

    /// Reads a record, strictly: every member present with its type, no other member, binary
    /// fields in canonical base64url, times in RFC 3339 UTC, and `formHash` equal to SHA-256 of
    /// `form`. A version-2 record's registration comes from `registrations`: its bytes must hash
    /// to the record's `keyRegistration`, be a registration document, and name the record's key,
    /// app id and environment; its attestation then fills ``keyAttestation``.
    /// - Throws: ``EvidenceError/Code/malformedRecord`` naming the member;
    ///   ``EvidenceError/Code/registrationMissing`` or ``EvidenceError/Code/registrationMismatch``
    ///   for a version-2 record's registration.
    public init(json: JSONValue, registrations: RegistrationResolver? = nil) throws(EvidenceError) {
        var reader = try MemberReader(json, path: "record")
        guard try reader.string("type") == Self.type else { throw .malformed("record.type is not \(Self.type)") }
        let version = try reader.integer("version", maximum: 1_000)
        guard Format(rawValue: version) != nil || version == Self.passkeyVersion else {
            throw .malformed("record.version is not 1, 2 or 3")
        }
        guard let kind = Kind(rawValue: try reader.string("kind")) else { throw .malformed("record.kind is unknown") }
        self.kind = kind
        // Version 3 is a record with a passkey: an App Attest assertion beside it, or none.
        if version == Self.passkeyVersion {
            guard kind == .assertion || kind == .passkey else { throw .malformed("a version-3 record's kind is assertion or passkey") }
        } else if kind == .passkey {
            throw .malformed("a record of kind passkey is version 3")
        }
        self.verifiedAt = try reader.time("verifiedAt")
        self.username = try reader.string("username")
        self.form = try reader.binary("form")
        let formHash = try reader.binary("formHash")
        var registrationID: [UInt8]?
        // Filled below for a record signed by an App Attest key (from its registration, for one
        // that references it); a passkey alone leaves them unused.
        self.keyAttestation = KeyAttestationEvidence(object: [], clientDataHash: [], verifiedAt: Date(timeIntervalSince1970: 0))
        self.format = .selfContained
        (self.keyID, self.appID, self.environment, self.counter) = ([], "", .production, 0)
        if kind != .passkey {
            self.keyID = try reader.binary("keyId")
            self.appID = try reader.string("appId")
            guard let environment = AppAttestEnvironment(rawValue: try reader.string("environment")) else {
                throw .malformed("record.environment is unknown")
            }
            self.environment = environment
            self.counter = UInt32(try reader.integer("counter", maximum: Int(UInt32.max)))
            // Versions 1 and 2 say how the attestation is carried; version 3 carries it either way.
            switch (version, json["keyAttestation"], json["keyRegistration"]) {
            case (Format.selfContained.rawValue, _, _), (Self.passkeyVersion, .some, nil):
                self.keyAttestation = try KeyAttestationEvidence(json: try reader.member("keyAttestation"), path: "record.keyAttestation")
            case (Format.referencingRegistration.rawValue, _, _), (Self.passkeyVersion, nil, .some):
                let id = try reader.binary("keyRegistration")
                guard id.count == KeyRegistration.idLength else { throw .malformed("record.keyRegistration is not a SHA-256 digest") }
                registrationID = id
                self.format = .referencingRegistration
            default:
                throw .malformed("a version-3 record signed by an App Attest key carries exactly one of keyAttestation and keyRegistration")
            }
        }
        var passkeyMethods: JSONValue?
        self.passkey = nil
        if version == Self.passkeyVersion {
            passkeyMethods = try reader.member("amr")
            self.passkey = try PasskeyEvidence(json: try reader.member("passkey"), path: "record.passkey")
        }
        var policy = try MemberReader(try reader.member("policy"), path: "record.policy")
        let environments = try policy.strings("environments").map { name throws(EvidenceError) -> AppAttestEnvironment in
            guard let environment = AppAttestEnvironment(rawValue: name) else {
                throw .malformed("record.policy.environments has an unknown environment")
            }
            return environment
        }
        self.policy = Policy(
            appIDs: try policy.strings("appIds"),
            environments: environments,
            trustAnchorKeyDigests: try policy.binaries("trustAnchorKeyDigests"),
            formMaximumAge: try policy.integer("formMaximumAge", maximum: Int(Int32.max)),
            formMaximumFutureSkew: try policy.integer("formMaximumFutureSkew", maximum: Int(Int32.max)),
            requireServerChallenge: try policy.bool("requireServerChallenge"),
            sessionBound: try policy.bool("sessionBound")
        )
        try policy.finish()
        self.assertion = kind == .passkey ? nil : try reader.optionalBinary("assertion")
        try reader.finish()
        guard formHash == self.formHash else { throw .malformed("record.formHash is not SHA-256 of record.form") }
        guard (kind == .attestation || kind == .passkey) == (self.assertion == nil) else {
            throw .malformed(kind == .attestation ? "an attestation record carries no assertion" : "record.assertion is missing")
        }
        // `amr` states the factors' facts: it must be what the record's claims make of them.
        if let passkeyMethods, passkeyMethods != .array(self.methodReferences.map { .string(JSONString($0)) }) {
            throw .malformed("record.amr is not \(self.methodReferences), what the record's factors and passkey flags state")
        }
        if let registrationID {
            self.keyAttestation = try KeyRegistration.resolve(registrationID, with: registrations, for: self).attestation
        }
    }

    /// The registration a record's payload references: its id for a version-2 record, nil for
    /// version 1 (which carries its attestation). Reads only what it needs, to find the document
    /// (`evidence export`, `evidence audit`); verifying reads the whole record.
    /// - Throws: ``EvidenceError/Code/malformedRecord`` when the payload is not JSON, has no
    ///   known version, or a version-2 record has no valid `keyRegistration`.
    public static func registrationID(inPayload payload: [UInt8]) throws(EvidenceError) -> [UInt8]? {
        let json: JSONValue
        do {
            json = try CanonicalJSON.parse(
                payload, limits: CanonicalJSON.Limits(maximumSize: SignedEvidence.maximumSize, maximumDepth: SignedEvidence.maximumRecordDepth))
        } catch {
            throw .malformed("the payload is not JSON: \(error)")
        }
        switch json["version"] {
        case .number(1): return nil
        // A version-3 record references its App Attest key's registration, or carries it, or has
        // no App Attest key (its passkey's registration is always in the record).
        case .number(3) where json["keyRegistration"] == nil: return nil
        case .number(2), .number(3):
            guard let text = json["keyRegistration"]?.stringValue, let id = StrictBase64URL.decode(text), id.count == KeyRegistration.idLength else {
                throw .malformed("record.keyRegistration is not a canonical base64url SHA-256 digest")
            }
            return id
        default: throw .malformed("record.version is not 1, 2 or 3")
        }
    }
}

extension EvidenceRecord.KeyAttestationEvidence {
    /// `{object, clientDataHash, verifiedAt}`: a version-1 record's `keyAttestation`, and a
    /// registration document's `attestation`.
    var json: JSONValue {
        .object(
            JSONObject(constantMembers: [
                ("object", .string(JSONString(Base64URL.encode(self.object)))),
                ("clientDataHash", .string(JSONString(Base64URL.encode(self.clientDataHash)))),
                ("verifiedAt", .string(JSONString(RFC3339UTC.format(self.verifiedAt)))),
            ])
        )
    }

    init(json: JSONValue, path: String) throws(EvidenceError) {
        var reader = try MemberReader(json, path: path)
        self.init(
            object: try reader.binary("object"), clientDataHash: try reader.binary("clientDataHash"), verifiedAt: try reader.time("verifiedAt"))
        try reader.finish()
    }
}

/// Reads an object's members strictly, remembering which were read so that ``finish()`` can
/// refuse any other.
struct MemberReader {
    private let object: JSONObject
    private let path: String
    private var read: Set<String> = []

    init(_ value: JSONValue, path: String) throws(EvidenceError) {
        guard case .object(let object) = value else { throw .malformed("\(path) is not an object") }
        self.object = object
        self.path = path
    }

    mutating func member(_ name: String) throws(EvidenceError) -> JSONValue {
        guard let value = self.object[name] else { throw .malformed("\(self.path).\(name) is missing") }
        self.read.insert(name)
        return value
    }

    mutating func string(_ name: String) throws(EvidenceError) -> String {
        guard let string = try self.member(name).stringValue else { throw .malformed("\(self.path).\(name) is not a string") }
        return string
    }

    mutating func bool(_ name: String) throws(EvidenceError) -> Bool {
        guard case .bool(let value) = try self.member(name) else { throw .malformed("\(self.path).\(name) is not a boolean") }
        return value
    }

    mutating func integer(_ name: String, maximum: Int) throws(EvidenceError) -> Int {
        guard case .number(let number) = try self.member(name), number >= 0, number <= Double(maximum), number.rounded(.towardZero) == number else {
            throw .malformed("\(self.path).\(name) is not an integer from 0 to \(maximum)")
        }
        return Int(number)
    }

    mutating func time(_ name: String) throws(EvidenceError) -> Date {
        guard let time = RFC3339UTC.parse(try self.string(name)) else { throw .malformed("\(self.path).\(name) is not an RFC 3339 UTC time") }
        return time
    }

    mutating func binary(_ name: String) throws(EvidenceError) -> [UInt8] {
        guard let bytes = StrictBase64URL.decode(try self.string(name)) else {
            throw .malformed("\(self.path).\(name) is not canonical base64url")
        }
        return bytes
    }

    mutating func optionalBinary(_ name: String) throws(EvidenceError) -> [UInt8]? {
        self.object[name] == nil ? nil : try self.binary(name)
    }

    mutating func strings(_ name: String) throws(EvidenceError) -> [String] {
        guard case .array(let values) = try self.member(name) else { throw .malformed("\(self.path).\(name) is not an array") }
        var strings: [String] = []
        for value in values {
            guard let string = value.stringValue else { throw .malformed("\(self.path).\(name) holds a non-string") }
            strings.append(string)
        }
        return strings
    }

    /// An array of integers from -2^53 to 2^53 (COSE algorithm identifiers are negative).
    mutating func integers(_ name: String) throws(EvidenceError) -> [Int64] {
        guard case .array(let values) = try self.member(name) else { throw .malformed("\(self.path).\(name) is not an array") }
        var integers: [Int64] = []
        for value in values {
            guard case .number(let number) = value, abs(number) <= 9_007_199_254_740_992, number.rounded(.towardZero) == number else {
                throw .malformed("\(self.path).\(name) holds a value that is not an integer")
            }
            integers.append(Int64(number))
        }
        return integers
    }

    mutating func binaries(_ name: String) throws(EvidenceError) -> [[UInt8]] {
        var values: [[UInt8]] = []
        for string in try self.strings(name) {
            guard let bytes = StrictBase64URL.decode(string) else { throw .malformed("\(self.path).\(name) holds non-canonical base64url") }
            values.append(bytes)
        }
        return values
    }

    /// Refuses members that were not read.
    func finish() throws(EvidenceError) {
        for member in self.object.members where !self.read.contains(member.name.string) {
            throw .malformed("\(self.path) has an unknown member \(member.name.string)")
        }
    }
}

/// base64url without padding, in its one canonical spelling: a text that decodes but would be
/// encoded differently (unused bits set, padding, the standard alphabet) is refused, so that no
/// two texts carry the same bytes.
enum StrictBase64URL {
    static func decode(_ text: String) -> [UInt8]? {
        guard let bytes = Base64URL.decode(text), Base64URL.encode(bytes) == text else { return nil }
        return bytes
    }
}
