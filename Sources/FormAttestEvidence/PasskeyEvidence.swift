//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import FormAttestForm
public import Foundation
import RFC3339
public import WebAuthn
import X509

/// The passkey that signed a form (a version-3 record's `passkey`): its registration as the
/// client sent it, the form's assertion, and the relying-party policy both were checked under, so
/// that ``SignedEvidence`` re-runs the WebAuthn verifier on both offline, years later.
///
/// The credential's public key is not a member: it is read from the registration's attested
/// credential data, which its attestation statement signs, so a record cannot name another key.
public struct PasskeyEvidence: Sendable, Hashable {
    /// The WebAuthn registration response (§7.1) as received.
    public struct Registration: Sendable, Hashable {
        /// The exact clientDataJSON bytes the client sent.
        public var clientDataJSON: [UInt8]
        /// The exact attestation object.
        public var attestationObject: [UInt8]
        /// The one-time server challenge it answered (its clientDataJSON must name it).
        public var challenge: [UInt8]
        /// When the server verified it: its attestation certificates are checked at this time.
        public var verifiedAt: Date

        public init(clientDataJSON: [UInt8], attestationObject: [UInt8], challenge: [UInt8], verifiedAt: Date) {
            self.clientDataJSON = clientDataJSON
            self.attestationObject = attestationObject
            self.challenge = challenge
            self.verifiedAt = EvidenceRecord.recordable(verifiedAt)
        }
    }

    /// The assertion over the form (§7.2), whose challenge is SHA-256 of the form, and what the
    /// server concluded of it.
    public struct Assertion: Sendable, Hashable {
        /// The credential id the client sent (`rawId`): must be the registered credential's.
        public var credentialID: [UInt8]
        public var clientDataJSON: [UInt8]
        public var authenticatorData: [UInt8]
        public var signature: [UInt8]
        /// `response.userHandle`, when the client returned one.
        public var userHandle: [UInt8]?
        /// The stored sign count the assertion was checked against.
        public var previousSignCount: UInt32
        /// The claims: the sign count and flags of the signed authenticator data.
        public var signCount: UInt32
        public var userVerified: Bool
        public var backupEligible: Bool
        public var backedUp: Bool

        public init(
            credentialID: [UInt8], clientDataJSON: [UInt8], authenticatorData: [UInt8], signature: [UInt8], userHandle: [UInt8]?,
            previousSignCount: UInt32, signCount: UInt32, userVerified: Bool, backupEligible: Bool, backedUp: Bool
        ) {
            self.credentialID = credentialID
            self.clientDataJSON = clientDataJSON
            self.authenticatorData = authenticatorData
            self.signature = signature
            self.userHandle = userHandle
            self.previousSignCount = previousSignCount
            self.signCount = signCount
            self.userVerified = userVerified
            self.backupEligible = backupEligible
            self.backedUp = backedUp
        }
    }

    /// The relying-party policy in force when the form was accepted.
    public struct Policy: Sendable, Hashable {
        public var relyingPartyID: String
        /// The accepted origins (sorted).
        public var origins: [String]
        /// The accepted top-level origins (sorted; empty refuses any `topOrigin`).
        public var topOrigins: [String]
        public var allowCrossOrigin: Bool
        /// The COSE algorithms accepted for a credential's key (sorted).
        public var algorithms: [Int64]
        /// Whether the form's factor policy required user verification (the UV flag).
        public var requireUserVerification: Bool

        public init(
            relyingPartyID: String, origins: [String], topOrigins: [String] = [], allowCrossOrigin: Bool = false, algorithms: [Int64],
            requireUserVerification: Bool
        ) {
            self.relyingPartyID = relyingPartyID
            self.origins = origins.sorted()
            self.topOrigins = topOrigins.sorted()
            self.allowCrossOrigin = allowCrossOrigin
            self.algorithms = algorithms.sorted()
            self.requireUserVerification = requireUserVerification
        }

        /// A verifier policy's members, with what the form's factor policy required.
        public init(_ policy: WebAuthnPolicy, requireUserVerification: Bool) {
            self.init(
                relyingPartyID: policy.relyingPartyID, origins: Array(policy.allowedOrigins), topOrigins: Array(policy.allowedTopOrigins),
                allowCrossOrigin: policy.allowCrossOrigin, algorithms: policy.credentialAlgorithms.map(\.rawValue),
                requireUserVerification: requireUserVerification)
        }

        /// The verifier policy to re-verify with: the recorded members, UV not required by the
        /// verifier (the record's claims are checked against the flag instead), and `anchors`.
        func verifierPolicy(anchors: [Certificate]) -> WebAuthnPolicy {
            WebAuthnPolicy(
                relyingPartyID: self.relyingPartyID, allowedOrigins: Set(self.origins), requireUserVerification: false,
                allowCrossOrigin: self.allowCrossOrigin, allowedTopOrigins: Set(self.topOrigins),
                credentialAlgorithms: Set(self.algorithms.map(COSEAlgorithm.init(rawValue:))), trustAnchors: anchors)
        }
    }

    /// The registered credential's id.
    public var credentialID: [UInt8]
    /// The WebAuthn user handle (`user.id`) the credential was registered for.
    public var userHandle: [UInt8]
    public var registration: Registration
    public var assertion: Assertion
    public var policy: Policy

    public init(credentialID: [UInt8], userHandle: [UInt8], registration: Registration, assertion: Assertion, policy: Policy) {
        self.credentialID = credentialID
        self.userHandle = userHandle
        self.registration = registration
        self.assertion = assertion
        self.policy = policy
    }

    // MARK: - JSON

    var json: JSONValue {
        func text(_ string: String) -> JSONValue { .string(JSONString(string)) }
        func binary(_ bytes: [UInt8]) -> JSONValue { text(Base64URL.encode(bytes)) }
        var assertion: [(name: String, value: JSONValue)] = [
            ("credentialId", binary(self.assertion.credentialID)),
            ("clientDataJSON", binary(self.assertion.clientDataJSON)),
            ("authenticatorData", binary(self.assertion.authenticatorData)),
            ("signature", binary(self.assertion.signature)),
            ("previousSignCount", .number(Double(self.assertion.previousSignCount))),
            ("signCount", .number(Double(self.assertion.signCount))),
            ("userVerified", .bool(self.assertion.userVerified)),
            ("backupEligible", .bool(self.assertion.backupEligible)),
            ("backedUp", .bool(self.assertion.backedUp)),
        ]
        if let userHandle = self.assertion.userHandle { assertion.append(("userHandle", binary(userHandle))) }
        return .object(
            JSONObject(constantMembers: [
                ("credentialId", binary(self.credentialID)),
                ("userHandle", binary(self.userHandle)),
                (
                    "registration",
                    .object(
                        JSONObject(constantMembers: [
                            ("clientDataJSON", binary(self.registration.clientDataJSON)),
                            ("attestationObject", binary(self.registration.attestationObject)),
                            ("challenge", binary(self.registration.challenge)),
                            ("verifiedAt", text(RFC3339UTC.format(self.registration.verifiedAt))),
                        ])
                    )
                ),
                ("assertion", .object(JSONObject(constantMembers: assertion))),
                (
                    "policy",
                    .object(
                        JSONObject(constantMembers: [
                            ("rpId", text(self.policy.relyingPartyID)),
                            ("origins", .array(self.policy.origins.map(text))),
                            ("topOrigins", .array(self.policy.topOrigins.map(text))),
                            ("allowCrossOrigin", .bool(self.policy.allowCrossOrigin)),
                            ("algorithms", .array(self.policy.algorithms.map { .number(Double($0)) })),
                            ("requireUserVerification", .bool(self.policy.requireUserVerification)),
                        ])
                    )
                ),
            ])
        )
    }

    init(json: JSONValue, path: String) throws(EvidenceError) {
        var reader = try MemberReader(json, path: path)
        self.credentialID = try reader.binary("credentialId")
        self.userHandle = try reader.binary("userHandle")
        var registration = try MemberReader(try reader.member("registration"), path: "\(path).registration")
        self.registration = Registration(
            clientDataJSON: try registration.binary("clientDataJSON"), attestationObject: try registration.binary("attestationObject"),
            challenge: try registration.binary("challenge"), verifiedAt: try registration.time("verifiedAt"))
        try registration.finish()
        var assertion = try MemberReader(try reader.member("assertion"), path: "\(path).assertion")
        self.assertion = Assertion(
            credentialID: try assertion.binary("credentialId"),
            clientDataJSON: try assertion.binary("clientDataJSON"),
            authenticatorData: try assertion.binary("authenticatorData"),
            signature: try assertion.binary("signature"),
            userHandle: try assertion.optionalBinary("userHandle"),
            previousSignCount: UInt32(try assertion.integer("previousSignCount", maximum: Int(UInt32.max))),
            signCount: UInt32(try assertion.integer("signCount", maximum: Int(UInt32.max))),
            userVerified: try assertion.bool("userVerified"),
            backupEligible: try assertion.bool("backupEligible"),
            backedUp: try assertion.bool("backedUp")
        )
        try assertion.finish()
        var policy = try MemberReader(try reader.member("policy"), path: "\(path).policy")
        let relyingPartyID = try policy.string("rpId")
        let origins = try policy.strings("origins")
        let topOrigins = try policy.strings("topOrigins")
        let allowCrossOrigin = try policy.bool("allowCrossOrigin")
        let algorithms = try policy.integers("algorithms")
        self.policy = Policy(
            relyingPartyID: relyingPartyID, origins: origins, topOrigins: topOrigins, allowCrossOrigin: allowCrossOrigin, algorithms: algorithms,
            requireUserVerification: try policy.bool("requireUserVerification"))
        guard self.policy.origins == origins, self.policy.topOrigins == topOrigins, self.policy.algorithms == algorithms else {
            throw .malformed("\(path).policy's lists are not sorted")
        }
        try policy.finish()
        try reader.finish()
    }
}

/// The RFC 8176 `amr` values of a form, the same facts the server-signed JWS states
/// (docs/formats.md): `hwk` for an App Attest key (in the Secure Enclave) and for a device-bound
/// passkey, `swk` for a backup-eligible (synced) passkey, `user` for the passkey's user-presence
/// test, `mfa` when its UV flag is set.
public enum MethodReferences {
    public static func of(appAttest: Bool, passkey: PasskeyEvidence.Assertion?) -> [String] {
        var references: [String] = appAttest ? ["hwk"] : []
        if let passkey {
            if passkey.backupEligible {
                references.append("swk")
            } else if !appAttest {
                references.append("hwk")
            }
            references.append("user")
            if passkey.userVerified { references.append("mfa") }
        }
        return references
    }
}
