//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
import CanonicalJSON
public import Crypto
import FormAttestForm
public import TransparencyLog
public import X509

/// One logged evidence record with everything needed to verify it alone, years later: the
/// record (or its server-signed envelope), its leaf index, the RFC 9162 inclusion proof, and a
/// checkpoint signed by the evidence log's key that the proof leads to
/// (`formattest evidence export`; docs/formats.md, "Bundles").
///
/// Canonical JSON, every member required but one of `envelope` / `record`:
/// `{"type": "formattest-evidence-bundle", "version": 1, "checkpoint": NOTE, "index": I,
/// "inclusionProof": [base64url …], "envelope": {protected, payload, signature}}` or the same
/// with `"record": base64url(leaf)` when no signed envelope was kept; and, for a version-2
/// record, `"registration": base64url(the key's registration document)` (``KeyRegistration``),
/// so that the bundle still verifies alone.
public struct EvidenceBundle: Sendable, Hashable {
    /// The bundle's `type` member.
    public static let type = "formattest-evidence-bundle"
    /// The format's version; a reader refuses any other.
    public static let version = 1

    /// What makes the record the server's: its own signature, or only the log's checkpoint.
    public enum Record: Sendable, Hashable {
        /// The server's envelope (``SignedEvidence``), whose payload is the leaf.
        case envelope([UInt8])
        /// The leaf alone: the checkpoint's signature is the server's statement.
        case leaf([UInt8])
    }

    /// The signed checkpoint (a C2SP signed note), as the log served it.
    public var checkpoint: String
    /// The record's leaf index.
    public var index: UInt64
    /// The audit path from the leaf to the checkpoint's root.
    public var inclusionProof: [[UInt8]]
    public var record: Record
    /// The key's registration document, for a version-2 record (nil for version 1, which
    /// carries its attestation).
    public var registration: [UInt8]?

    public init(checkpoint: String, index: UInt64, inclusionProof: [[UInt8]], record: Record, registration: [UInt8]? = nil) {
        self.checkpoint = checkpoint
        self.index = index
        self.inclusionProof = inclusionProof
        self.record = record
        self.registration = registration
    }

    /// The bundle as canonical JSON, then a newline.
    public func encoded() throws(EvidenceError) -> [UInt8] {
        func text(_ string: String) -> JSONValue { .string(JSONString(string)) }
        var members: [(name: String, value: JSONValue)] = [
            ("type", text(Self.type)),
            ("version", .number(Double(Self.version))),
            ("checkpoint", text(self.checkpoint)),
            ("index", .number(Double(self.index))),
            ("inclusionProof", .array(self.inclusionProof.map { text(Base64URL.encode($0)) })),
        ]
        switch self.record {
        case .envelope(let bytes):
            guard
                let envelope = try? CanonicalJSON.parse(bytes, limits: CanonicalJSON.Limits(maximumSize: SignedEvidence.maximumSize, maximumDepth: 4))
            else { throw EvidenceError(code: .malformedEnvelope, reason: "the envelope is not JSON") }
            members.append(("envelope", envelope))
        case .leaf(let bytes):
            members.append(("record", text(Base64URL.encode(bytes))))
        }
        if let registration = self.registration { members.append(("registration", text(Base64URL.encode(registration)))) }
        return JSONValue.object(JSONObject(constantMembers: members)).canonicalBytes + [0x0A]
    }

    /// Reads a bundle strictly: canonical JSON, every member with its type, no other member.
    /// - Throws: ``EvidenceError/Code/malformedBundle`` naming what is wrong.
    public init(bytes: some Collection<UInt8>) throws(EvidenceError) {
        func malformed(_ reason: String) -> EvidenceError { EvidenceError(code: .malformedBundle, reason: reason) }
        var input = Array(bytes)
        if input.last == 0x0A { input.removeLast() }
        let json: JSONValue
        do {
            json = try CanonicalJSON.parse(
                input, limits: CanonicalJSON.Limits(maximumSize: SignedEvidence.maximumSize, maximumDepth: 4, exactNumbers: true))
        } catch {
            throw malformed("the bundle is not JSON: \(error)")
        }
        guard json.canonicalBytes == input else { throw malformed("the bundle is not in its RFC 8785 form") }
        do throws(EvidenceError) {
            var reader = try MemberReader(json, path: "bundle")
            guard try reader.string("type") == Self.type else { throw malformed("bundle.type is not \(Self.type)") }
            guard try reader.integer("version", maximum: 1_000) == Self.version else { throw malformed("bundle.version is not \(Self.version)") }
            self.checkpoint = try reader.string("checkpoint")
            self.index = UInt64(try reader.integer("index", maximum: Int(MerkleProof.maximumSize - 1)))
            self.inclusionProof = try reader.binaries("inclusionProof")
            switch (json["envelope"], json["record"]) {
            case (let envelope?, nil):
                _ = try reader.member("envelope")
                self.record = .envelope(envelope.canonicalBytes)
            case (nil, .some):
                self.record = .leaf(try reader.binary("record"))
            default:
                throw malformed("a bundle holds exactly one of envelope and record")
            }
            self.registration = try reader.optionalBinary("registration")
            try reader.finish()
        } catch {
            // The member reader speaks of records; here it is the bundle that is malformed.
            throw error.code == .malformedRecord ? malformed(error.reason) : error
        }
    }

    /// A verified bundle: the record, and the checkpoint it is included in.
    public struct Verified: Sendable {
        public var evidence: SignedEvidence.Verified
        public var checkpoint: Checkpoint
        public var index: UInt64
        /// Whether the server's own signature over the record was in the bundle and verified
        /// (else the log's checkpoint is the server's only statement about it).
        public var serverSigned: Bool
    }

    /// Verifies the bundle offline: the checkpoint's signature by the log's key (and that it
    /// names that log), the record's inclusion in the checkpoint's tree, the server's signature
    /// when the envelope is there, then everything ``SignedEvidence/verify(_:signers:trustAnchors:receiptTrustAnchors:clientData:expecting:)``
    /// checks of the record itself (a record with a passkey: its registration's chain to
    /// `passkeyTrustAnchors`, when given).
    /// - Throws: ``EvidenceError`` naming the first step that failed.
    public func verify(
        logKey: NoteVerifier,
        signers: [String: P256.Signing.PublicKey],
        trustAnchors: [Certificate] = AppAttestPolicy.appleTrustAnchors,
        receiptTrustAnchors: [Certificate] = AppAttestPolicy.appleReceiptTrustAnchors,
        clientData: SignedEvidence.ClientData = .form,
        expecting expectations: SignedEvidence.Expectations = SignedEvidence.Expectations(),
        passkeyTrustAnchors: [Certificate] = []
    ) async throws(EvidenceError) -> Verified {
        let checkpoint: Checkpoint
        do {
            let body = try SignedNote.open(Array(self.checkpoint.utf8), verifier: logKey)
            checkpoint = try Checkpoint(body: Array(body.utf8))
        } catch {
            throw EvidenceError(code: .checkpointInvalid, reason: "the checkpoint is not one signed by the log's key: \(error.reason)")
        }
        guard checkpoint.origin == logKey.name else {
            throw EvidenceError(code: .checkpointInvalid, reason: "the checkpoint names the log \(checkpoint.origin), not \(logKey.name)")
        }
        let payload: [UInt8]
        var signer = "log:\(logKey.name)"
        switch self.record {
        case .envelope(let envelope):
            (payload, signer) = try SignedEvidence.checkServerSignature(envelope, signers: signers)
        case .leaf(let leaf):
            payload = leaf
        }
        guard self.index < checkpoint.size else {
            throw EvidenceError(code: .notInLog, reason: "leaf \(self.index) is not in a checkpoint of \(checkpoint.size) leaves")
        }
        do {
            try MerkleProof.verifyInclusion(
                self.inclusionProof, leafHash: MerkleHash.leaf(payload), index: self.index, size: checkpoint.size, root: checkpoint.rootHash)
        } catch {
            throw EvidenceError(code: .notInLog, reason: "the record is not leaf \(self.index) of the checkpoint's tree: \(error.reason)")
        }
        // A version-2 record's registration is the bundle's (nil: none, which the record's reader
        // names); a version-1 record carries its attestation and a bundle adds nothing to it.
        var registrations: EvidenceRecord.RegistrationResolver?
        if let registration = self.registration {
            guard (try? EvidenceRecord.registrationID(inPayload: payload)) != .some(nil) else {
                throw EvidenceError(code: .malformedBundle, reason: "the bundle carries a registration, and its record is version 1 (self-contained)")
            }
            registrations = { _ in registration }
        }
        let evidence = try await SignedEvidence.verifyRecord(
            payload: payload, signer: signer, trustAnchors: trustAnchors, receiptTrustAnchors: receiptTrustAnchors, clientData: clientData,
            expecting: expectations, registrations: registrations, passkeyTrustAnchors: passkeyTrustAnchors)
        let serverSigned = if case .envelope = self.record { true } else { false }
        return Verified(evidence: evidence, checkpoint: checkpoint, index: self.index, serverSigned: serverSigned)
    }
}
