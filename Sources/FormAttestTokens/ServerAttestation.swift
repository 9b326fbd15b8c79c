//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

package import CanonicalJSON
import Crypto
import FormAttestForm
public import Foundation
public import JWTKit

/// A compact JWS (ES256) in which the server states what it verified: this user's form, with this
/// hash, was signed by this App Attest key of this app, at this counter.
///
/// Header: `alg` ES256, `kid` = the RFC 7638 thumbprint of the signing key, `typ`
/// ``ServerAttestationSigner/tokenType``. Claims: `iss`, `sub` (username), `aud`, `iat`, `nbf`,
/// `exp` (default 5 minutes), `jti`, `app_id`, `key_id`, `env`, `form_hash` (base64url
/// clientDataHash), `cnt` (counter), and `cnf.jwk` (RFC 7800: the attested key itself). When a
/// passkey signed the form too: `amr` (RFC 8176 values, ``PasskeyFactor/methodReferences``) and
/// `passkey` (``PasskeyFactor``: the credential, its UV, BE and BS flags and sign count).
///
/// The App Attest key is `hwk` (a hardware-secured key: the Secure Enclave). A passkey is `hwk`
/// when it is not backup eligible (a device-bound key) and `swk` when it is (a synced passkey's
/// key leaves the device), `user` for its user-presence test, and with UV `mfa` (the person
/// unlocked the authenticator: something they know or are, beside the keys they hold). Which
/// verification (a PIN, a fingerprint, a face) is not knowable from WebAuthn's UV flag, so `pin`,
/// `fpt` and `face` are never claimed.
public struct ServerAttestationClaims: JWTPayload, Equatable {
    /// RFC 7800 confirmation: the attested P-256 key as a JWK.
    public struct Confirmation: Codable, Sendable, Equatable {
        public struct Key: Codable, Sendable, Equatable {
            public var kty: String
            public var crv: String
            public var x: String
            public var y: String
        }

        public var jwk: Key
    }

    public var issuer: IssuerClaim
    public var subject: SubjectClaim
    public var audience: AudienceClaim
    public var issuedAt: IssuedAtClaim
    public var notBefore: NotBeforeClaim
    public var expiration: ExpirationClaim
    public var id: IDClaim
    public var appID: String
    public var keyID: String
    public var environment: String
    public var formHash: String
    public var counter: UInt32
    public var confirmation: Confirmation
    /// RFC 8176 authentication method references, when a passkey signed the form too.
    public var methodReferences: [String]?
    /// The passkey that signed the form too.
    public var passkey: PasskeyFactor?

    enum CodingKeys: String, CodingKey {
        case issuer = "iss"
        case subject = "sub"
        case audience = "aud"
        case issuedAt = "iat"
        case notBefore = "nbf"
        case expiration = "exp"
        case id = "jti"
        case appID = "app_id"
        case keyID = "key_id"
        case environment = "env"
        case formHash = "form_hash"
        case counter = "cnt"
        case confirmation = "cnf"
        case methodReferences = "amr"
        case passkey
    }

    /// The claims as JSON, built member by member: exactly what
    /// `JSONValueEncoder(dateEncoding: .numericDate)` makes of ``encode(to:)`` (TokenTests holds the
    /// two equal), without `Codable`'s containers, which a profile of the service under load found
    /// costing a tenth of a signed answer. The member names are the ``CodingKeys``.
    package var jsonValue: JSONValue {
        func member(_ key: CodingKeys, _ value: JSONValue) -> (name: String, value: JSONValue) { (key.rawValue, value) }
        func string(_ string: String) -> JSONValue { .string(JSONString(string)) }
        func numericDate(_ date: Date) -> JSONValue { .number(date.timeIntervalSince1970.rounded(.towardZero)) }
        let key = self.confirmation.jwk
        let jwk = JSONObject(constantMembers: [("kty", string(key.kty)), ("crv", string(key.crv)), ("x", string(key.x)), ("y", string(key.y))])
        var members: [(name: String, value: JSONValue)] = [
            member(.issuer, string(self.issuer.value)),
            member(.subject, string(self.subject.value)),
            // jwt-kit's multi-value claim: one audience is a string, several an array.
            member(.audience, self.audience.value.count == 1 ? string(self.audience.value[0]) : .array(self.audience.value.map(string))),
            member(.issuedAt, numericDate(self.issuedAt.value)),
            member(.notBefore, numericDate(self.notBefore.value)),
            member(.expiration, numericDate(self.expiration.value)),
            member(.id, string(self.id.value)),
            member(.appID, string(self.appID)),
            member(.keyID, string(self.keyID)),
            member(.environment, string(self.environment)),
            member(.formHash, string(self.formHash)),
            member(.counter, .number(Double(self.counter))),
            member(.confirmation, .object(JSONObject(constantMembers: [("jwk", .object(jwk))]))),
        ]
        if let references = self.methodReferences { members.append(member(.methodReferences, .array(references.map(string)))) }
        if let passkey = self.passkey {
            members.append(
                member(
                    .passkey,
                    .object(
                        JSONObject(constantMembers: [
                            ("cred_id", string(passkey.credentialID)), ("uv", .bool(passkey.userVerified)), ("be", .bool(passkey.backupEligible)),
                            ("bs", .bool(passkey.backedUp)), ("sign_count", .number(Double(passkey.signCount))),
                        ])
                    )
                ))
        }
        return .object(JSONObject(constantMembers: members))
    }

    /// Checks expiry and not-before at the time jwt-kit verifies (a verifier of these tokens).
    public func verify(using algorithm: some JWTAlgorithm) async throws {
        try self.expiration.verifyNotExpired()
        try self.notBefore.verifyNotBefore()
    }
}

/// A passkey that signed a form beside the App Attest key: the JWS's `passkey` claim.
public struct PasskeyFactor: Codable, Sendable, Equatable {
    /// base64url.
    public var credentialID: String
    public var userVerified: Bool
    public var backupEligible: Bool
    public var backedUp: Bool
    public var signCount: UInt32

    public init(credentialID: [UInt8], userVerified: Bool, backupEligible: Bool, backedUp: Bool, signCount: UInt32) {
        self.credentialID = Base64URL.encode(credentialID)
        self.userVerified = userVerified
        self.backupEligible = backupEligible
        self.backedUp = backedUp
        self.signCount = signCount
    }

    enum CodingKeys: String, CodingKey {
        case credentialID = "cred_id"
        case userVerified = "uv"
        case backupEligible = "be"
        case backedUp = "bs"
        case signCount = "sign_count"
    }

    /// The `amr` of a form signed by an App Attest key and this passkey (see
    /// ``ServerAttestationClaims``): `hwk` for the App Attest key; `hwk` or `swk` (backup
    /// eligible) and `user` for the passkey; `mfa` with user verification.
    public var methodReferences: [String] {
        var references = ["hwk"]
        if self.backupEligible { references.append("swk") }
        references.append("user")
        if self.userVerified { references.append("mfa") }
        return references
    }
}

/// Signs ``ServerAttestationClaims`` with the server's current key.
public struct ServerAttestationSigner: Sendable {
    /// The JWS `typ` header.
    public static let tokenType = "formattest-attestation+jwt"

    public let keys: SigningKeys
    public let issuer: String
    public let audience: String
    public let lifetime: TimeInterval
    /// The current key's `kid` (its RFC 7638 thumbprint), computed once: a profile of `jws.sign`
    /// found the thumbprint (a canonical JWK and a SHA-256) recomputed for every token.
    private let keyID: String

    /// - Parameters:
    ///   - keys: the signing keys (the current one signs).
    ///   - issuer: `iss`, such as the service's URL.
    ///   - audience: `aud`, the system that consumes the tokens.
    ///   - lifetime: `exp - iat`. Default 5 minutes.
    public init(keys: SigningKeys, issuer: String, audience: String, lifetime: TimeInterval = 300) {
        self.keys = keys
        self.issuer = issuer
        self.audience = audience
        self.lifetime = lifetime
        self.keyID = keys.currentKeyID
    }

    /// Signs a token for a verified form.
    ///
    /// - Parameters:
    ///   - username: `sub`.
    ///   - credential: the attested key (app id, environment, key id, `cnf`).
    ///   - formHash: the form's clientDataHash.
    ///   - counter: the key's counter after this form.
    ///   - now: `iat` and `nbf`.
    ///   - tokenID: `jti`; a random UUID by default.
    ///   - passkey: the passkey that signed the form too (adds `amr` and `passkey`).
    public func sign(
        username: String,
        credential: AttestedCredential,
        formHash: [UInt8],
        counter: UInt32,
        now: Date,
        tokenID: String? = nil,
        passkey: PasskeyFactor? = nil
    ) throws -> String {
        let point = credential.publicKeyPoint
        // NumericDate in whole seconds.
        let now = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        let claims = ServerAttestationClaims(
            issuer: IssuerClaim(value: self.issuer),
            subject: SubjectClaim(value: username),
            audience: AudienceClaim(value: [self.audience]),
            issuedAt: IssuedAtClaim(value: now),
            notBefore: NotBeforeClaim(value: now),
            expiration: ExpirationClaim(value: now.addingTimeInterval(self.lifetime)),
            id: IDClaim(value: tokenID ?? UUID.random().uuidString),
            appID: credential.appID,
            keyID: Base64URL.encode(credential.keyID),
            environment: credential.environment,
            formHash: Base64URL.encode(formHash),
            counter: counter,
            confirmation: .init(jwk: .init(kty: "EC", crv: "P-256", x: Base64URL.encode(point[1..<33]), y: Base64URL.encode(point[33..<65]))),
            methodReferences: passkey?.methodReferences,
            passkey: passkey
        )
        let payload = claims.jsonValue.canonicalBytes
        return try JWS.es256(payload: payload, key: self.keys.current, kid: self.keyID, type: Self.tokenType).compact
    }
}
