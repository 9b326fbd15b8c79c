//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
public import CanonicalJSON
import Crypto
import FormAttestForm
import RFC3339

/// The iOS 27 / macOS 27 signals an attestation or assertion carried, the same in the HTTP
/// answers and `formattest verify --json`: `validationCategory` `{value, name}` (`name` null for
/// a number without a published name), `bundleVersion`, `cdHash` (lowercase hex, as `codesign`
/// prints it), `cdHashType` and `otherKeys`.
public struct SignalsResponse: APIResponse, Hashable {
    public static let schemaName = "Signals"

    public struct Category: Encodable, Sendable, Hashable {
        public var value: UInt32
        public var name: String?

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(self.value, forKey: .value)
            try container.encode(self.name, forKey: .name)  // null when unnamed: a fixed shape
        }

        enum CodingKeys: String, CodingKey { case value, name }
    }

    public var validationCategory: Category?
    public var bundleVersion: String?
    public var cdHash: String?
    public var cdHashType: UInt32?
    public var otherKeys: [String]

    public init(_ extensions: AuthenticatorExtensions) {
        self.validationCategory = extensions.validationCategory.map { Category(value: $0.rawValue, name: $0.name) }
        self.bundleVersion = extensions.bundleVersion
        self.cdHash = extensions.cdHash.map { hex($0) }
        self.cdHashType = extensions.cdHashType
        self.otherKeys = extensions.additionalEntries.keys.sorted()
    }
}

/// The attestation receipt's check, reported either way (it rejects only under
/// `--require-valid-receipt`); times RFC 3339 UTC with `fractionDigits` digits.
public struct ReceiptCheckResponse: APIResponse, Hashable {
    public static let schemaName = "ReceiptCheck"

    public var status: String
    public var code: String?
    public var message: String?
    public var type: String?
    public var environment: String?
    public var creationTime: String?
    public var expirationTime: String?
    public var riskMetric: Int?

    public init(_ summary: ReceiptCheck.Summary, fractionDigits: Int = 3) {
        self.status = summary.status
        self.code = summary.code
        self.message = summary.message
        self.type = summary.type
        self.environment = summary.environment
        self.creationTime = summary.creationTime.map { RFC3339UTC.format($0, fractionDigits: fractionDigits) }
        self.expirationTime = summary.expirationTime.map { RFC3339UTC.format($0, fractionDigits: fractionDigits) }
        self.riskMetric = summary.riskMetric
    }
}

/// What an answer says about the form's evidence record, when the service records evidence
/// (`evidenceId`, `evidenceArchived`, `evidence`).
public struct EvidenceFields: Sendable, Hashable {
    /// The record's id (base64url SHA-256 of its payload).
    public var id: String
    /// Whether the record was archived (nil without `--evidence-dir`).
    public var archived: Bool?
    /// The signed record itself (flattened JWS), when the answer carries it.
    public var envelope: JSONValue?
    /// The record's leaf index in the evidence log (nil without a log, or when appending failed).
    public var logIndex: UInt64?

    public init(id: String, archived: Bool?, envelope: JSONValue?, logIndex: UInt64? = nil) {
        self.id = id
        self.archived = archived
        self.envelope = envelope
        self.logIndex = logIndex
    }
}

/// The answer to `POST /api/appattest/attest` and `POST /api/appattest/register-pooled`: the
/// registered key, the receipt's check, the tokens, and the signals.
public struct RegisteredResponse: APIResponse {
    public static let schemaName = "Registered"

    public var verified = true
    /// base64url.
    public var keyId: String
    /// PEM.
    public var publicKey: String
    public var counter: UInt32
    public var appId: String
    public var environment: String
    /// SHA-256 of the form's RFC 8785 bytes, base64url.
    public var formHash: String
    public var receipt: ReceiptCheckResponse
    /// The tokens by format (`fido2Wrapper`, `serverAttestation`, `packedAttestation`), as
    /// ``FormAttestTokens/TokenFormatter`` builds them.
    public var formats: JSONValue
    /// The user's registrations in the last 30 days, this one included (a fraud signal).
    public var recentRegistrations: Int?
    public var extensions: SignalsResponse?
    /// The credential certificate's access-control extension (macOS 27), base64url.
    public var macosAccessControl: String?
    /// The form's evidence record: its id, whether it was archived, the signed record.
    public var evidenceId: String?
    public var evidenceArchived: Bool?
    /// The record's leaf index in the evidence log.
    public var evidenceLogIndex: UInt64?
    public var evidence: JSONValue?
    public var nextChallenge: ChallengeResponse?

    public init(
        _ attestation: VerifiedAttestation, counter: UInt32, formHash: [UInt8], formats: JSONValue, recentRegistrations: Int?,
        evidence: EvidenceFields?, nextChallenge: ChallengeResponse?
    ) {
        self.keyId = Base64URL.encode(attestation.keyID)
        self.publicKey = attestation.publicKey.pemRepresentation
        self.counter = counter
        self.appId = attestation.appID
        self.environment = attestation.environment.rawValue
        self.formHash = Base64URL.encode(formHash)
        self.receipt = ReceiptCheckResponse(attestation.receiptCheck.summary)
        self.formats = formats
        self.recentRegistrations = recentRegistrations
        self.extensions = attestation.extensions.map(SignalsResponse.init)
        self.macosAccessControl = attestation.accessControl.map { Base64URL.encode($0) }
        (self.evidenceId, self.evidenceArchived, self.evidence) = (evidence?.id, evidence?.archived, evidence?.envelope)
        self.evidenceLogIndex = evidence?.logIndex
        self.nextChallenge = nextChallenge
    }

    enum CodingKeys: String, CodingKey {
        case verified, keyId, publicKey, counter, appId, environment, formHash, receipt, formats, recentRegistrations, extensions
        case macosAccessControl, evidenceId, evidenceArchived, evidenceLogIndex, evidence
        case nextChallenge = "next_challenge"
    }
}

/// The answer to `POST /api/appattest/assert`: the key, its new counter, the token, the signals.
public struct AssertedResponse: APIResponse {
    public static let schemaName = "Asserted"

    public var verified = true
    /// base64url.
    public var keyId: String
    public var counter: UInt32
    /// SHA-256 of the form's RFC 8785 bytes, base64url.
    public var formHash: String
    public var formats: JSONValue
    public var extensions: SignalsResponse?
    /// The form's evidence record: its id, whether it was archived, the signed record.
    public var evidenceId: String?
    public var evidenceArchived: Bool?
    /// The record's leaf index in the evidence log.
    public var evidenceLogIndex: UInt64?
    public var evidence: JSONValue?
    public var nextChallenge: ChallengeResponse?

    public init(
        keyID: [UInt8], counter: UInt32, formHash: [UInt8], formats: JSONValue, extensions: AuthenticatorExtensions?, evidence: EvidenceFields?,
        nextChallenge: ChallengeResponse?
    ) {
        self.keyId = Base64URL.encode(keyID)
        self.counter = counter
        self.formHash = Base64URL.encode(formHash)
        self.formats = formats
        self.extensions = extensions.map(SignalsResponse.init)
        (self.evidenceId, self.evidenceArchived, self.evidence) = (evidence?.id, evidence?.archived, evidence?.envelope)
        self.evidenceLogIndex = evidence?.logIndex
        self.nextChallenge = nextChallenge
    }

    enum CodingKeys: String, CodingKey {
        case verified, keyId, counter, formHash, formats, extensions, evidenceId, evidenceArchived, evidenceLogIndex, evidence
        case nextChallenge = "next_challenge"
    }

    /// The value ``JSONValueEncoder`` makes of the `Encodable` conformance (absent optionals
    /// omitted), built member by member: every accepted form is answered with one, and `Codable`'s
    /// containers cost more than the members (ResponseConformanceTests holds the two equal). The
    /// member names are the ``CodingKeys``.
    public func jsonValue() throws -> JSONValue {
        func string(_ string: String) -> JSONValue { .string(JSONString(string)) }
        var members: [(name: String, value: JSONValue)] = [
            (CodingKeys.verified.rawValue, .bool(self.verified)),
            (CodingKeys.keyId.rawValue, string(self.keyId)),
            (CodingKeys.counter.rawValue, .number(Double(self.counter))),
            (CodingKeys.formHash.rawValue, string(self.formHash)),
            (CodingKeys.formats.rawValue, self.formats),
        ]
        members.reserveCapacity(10)
        if let extensions = self.extensions { members.append((CodingKeys.extensions.rawValue, try extensions.jsonValue())) }
        if let evidenceId = self.evidenceId { members.append((CodingKeys.evidenceId.rawValue, string(evidenceId))) }
        if let evidenceArchived = self.evidenceArchived { members.append((CodingKeys.evidenceArchived.rawValue, .bool(evidenceArchived))) }
        if let index = self.evidenceLogIndex { members.append((CodingKeys.evidenceLogIndex.rawValue, .number(Double(index)))) }
        if let evidence = self.evidence { members.append((CodingKeys.evidence.rawValue, evidence)) }
        if let nextChallenge = self.nextChallenge { members.append((CodingKeys.nextChallenge.rawValue, nextChallenge.jsonValue())) }
        return .object(JSONObject(constantMembers: members))
    }
}

/// `POST /api/dev/simulate`'s answer (development only): the simulated device's output.
public struct SimulatedResponse: APIResponse, Hashable {
    public static let schemaName = "Simulated"

    /// base64url.
    public var keyId: String
    /// base64url.
    public var clientDataHash: String
    public var attestationObject: String?
    public var assertion: String?

    /// An attestation of a new key (`assertion` nil) or an assertion by `keyID`.
    public init(keyID: [UInt8], clientDataHash: [UInt8], attestationObject: [UInt8]? = nil, assertion: [UInt8]? = nil) {
        self.keyId = Base64URL.encode(keyID)
        self.clientDataHash = Base64URL.encode(clientDataHash)
        self.attestationObject = attestationObject.map { Base64URL.encode($0) }
        self.assertion = assertion.map { Base64URL.encode($0) }
    }
}
