//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
import CanonicalJSON
import Crypto
import FormAttestForm
import Foundation

/// A key's registration: the attestation that registered it, written once per key and referenced
/// by version-2 records (``EvidenceRecord/Format/referencingRegistration``) through its id,
/// base64url(SHA-256 of its bytes), instead of being copied into every record.
///
/// Canonical JSON (RFC 8785), with the same members and encodings a version-1 record uses for them:
/// `{"type": "formattest-key-registration", "version": 1, "keyId", "appId", "environment",
/// "attestation": {"object", "clientDataHash", "verifiedAt"}}`. Its bytes are exactly what the id
/// hashes (no newline), so `sha256sum` of a stored document gives its file's name.
public struct KeyRegistration: Sendable, Hashable {
    /// The document's `type` member.
    public static let type = "formattest-key-registration"
    /// The format's version; a reader refuses any other.
    public static let version = 1
    /// The length of an id (SHA-256).
    public static let idLength = 32
    /// The largest document read: an attestation object with its chain and receipt is 5–10 KB.
    public static let maximumSize = 1 << 17

    public var keyID: [UInt8]
    public var appID: String
    public var environment: AppAttestEnvironment
    public var attestation: EvidenceRecord.KeyAttestationEvidence

    public init(keyID: [UInt8], appID: String, environment: AppAttestEnvironment, attestation: EvidenceRecord.KeyAttestationEvidence) {
        self.keyID = keyID
        self.appID = appID
        self.environment = environment
        self.attestation = attestation
    }

    /// The registration of a record's key (what a version-2 record references).
    public init(of record: EvidenceRecord) {
        self.init(keyID: record.keyID, appID: record.appID, environment: record.environment, attestation: record.keyAttestation)
    }

    /// The document's canonical bytes: what is stored, and what the id hashes.
    public var bytes: [UInt8] {
        func text(_ string: String) -> JSONValue { .string(JSONString(string)) }
        return JSONValue.object(
            JSONObject(constantMembers: [
                ("type", text(Self.type)),
                ("version", .number(Double(Self.version))),
                ("keyId", text(Base64URL.encode(self.keyID))),
                ("appId", text(self.appID)),
                ("environment", text(self.environment.rawValue)),
                ("attestation", self.attestation.json),
            ])
        ).canonicalBytes
    }

    /// SHA-256 of ``bytes``: the reference a version-2 record carries.
    public var id: [UInt8] { Self.id(of: self.bytes) }

    /// SHA-256 of the document's fields, each length-prefixed (an injective encoding), without
    /// building the document: two registrations have the same digest exactly when they are the
    /// same registration. A cache of ids keyed by it (the service's) tells a key's registration
    /// again without encoding it; it is never written anywhere.
    public var contentDigest: [UInt8] {
        var hasher = SHA256()
        func field(_ bytes: some Collection<UInt8>) {
            withUnsafeBytes(of: UInt64(bytes.count).bigEndian) { hasher.update(bufferPointer: $0) }
            hasher.update(data: Array(bytes))
        }
        field(Array(Self.type.utf8))
        field(self.keyID)
        field(Array(self.appID.utf8))
        field(Array(self.environment.rawValue.utf8))
        field(self.attestation.object)
        field(self.attestation.clientDataHash)
        withUnsafeBytes(of: Int64((self.attestation.verifiedAt.timeIntervalSince1970 * 1000).rounded()).bigEndian) {
            hasher.update(bufferPointer: $0)
        }
        return Array(hasher.finalize())
    }

    /// SHA-256 of a document's bytes.
    public static func id(of bytes: some Collection<UInt8>) -> [UInt8] { Array(SHA256.hash(data: Array(bytes))) }

    /// Reads a document strictly: canonical JSON, every member with its type, no other member.
    /// - Throws: ``EvidenceError/Code/registrationMismatch`` naming what is wrong (a document that
    ///   is not one cannot be the registration a record references).
    public init(bytes: some Collection<UInt8>) throws(EvidenceError) {
        func mismatch(_ reason: String) -> EvidenceError { EvidenceError(code: .registrationMismatch, reason: reason) }
        let input = Array(bytes)
        let json: JSONValue
        do {
            json = try CanonicalJSON.parse(input, limits: CanonicalJSON.Limits(maximumSize: Self.maximumSize, maximumDepth: 3, exactNumbers: true))
        } catch {
            throw mismatch("the registration is not JSON: \(error)")
        }
        guard json.canonicalBytes == input else { throw mismatch("the registration is not in its RFC 8785 form") }
        do throws(EvidenceError) {
            var reader = try MemberReader(json, path: "registration")
            guard try reader.string("type") == Self.type else { throw mismatch("registration.type is not \(Self.type)") }
            guard try reader.integer("version", maximum: 1_000) == Self.version else {
                throw mismatch("registration.version is not \(Self.version)")
            }
            self.keyID = try reader.binary("keyId")
            self.appID = try reader.string("appId")
            guard let environment = AppAttestEnvironment(rawValue: try reader.string("environment")) else {
                throw mismatch("registration.environment is unknown")
            }
            self.environment = environment
            self.attestation = try EvidenceRecord.KeyAttestationEvidence(json: try reader.member("attestation"), path: "registration.attestation")
            try reader.finish()
        } catch {
            // The member reader speaks of records; here it is the registration that is not one.
            throw error.code == .malformedRecord ? mismatch(error.reason) : error
        }
    }

    /// The registration `id` a record references, fetched with `registrations` and checked: its
    /// bytes hash to `id`, it is a registration document, and it names the record's key, app id
    /// and environment.
    static func resolve(_ id: [UInt8], with registrations: EvidenceRecord.RegistrationResolver?, for record: EvidenceRecord)
        throws(EvidenceError) -> KeyRegistration
    {
        let name = Base64URL.encode(id)
        guard let registrations else {
            throw EvidenceError(
                code: .registrationMissing, reason: "the record is version 2: its key's registration \(name) is needed and none was given")
        }
        guard let bytes = registrations(id) else {
            throw EvidenceError(code: .registrationMissing, reason: "the key's registration \(name) is not there")
        }
        guard Self.id(of: bytes) == id else {
            throw EvidenceError(
                code: .registrationMismatch,
                reason: "the registration given for \(name) hashes to \(Base64URL.encode(Self.id(of: bytes))): altered or another key's")
        }
        let registration = try KeyRegistration(bytes: bytes)
        func differs(_ member: String) -> EvidenceError {
            EvidenceError(code: .registrationMismatch, reason: "the registration \(name) names another \(member) than the record's")
        }
        guard registration.keyID == record.keyID else { throw differs("keyId") }
        guard Array(registration.appID.utf8) == Array(record.appID.utf8) else { throw differs("appId") }
        guard registration.environment == record.environment else { throw differs("environment") }
        return registration
    }
}
