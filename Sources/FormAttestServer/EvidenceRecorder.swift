//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import CanonicalJSON
import Crypto
public import FormAttestEvidence
import FormAttestFlows
import FormAttestForm
import FormAttestResponses
import Foundation
import Logging
import Metrics
import NIOPosix
import WebAuthn

/// Where evidence records go (``ServerConfiguration/evidence``).
///
/// Evidence needs the policy's `requireValidReceipt`: a record carries the key's whole
/// attestation object, and its offline verification checks the receipt too (the one part the
/// certificate's nonce does not cover, which a client could otherwise break at will so that
/// every record of its key fails to verify later: a way to deny its own payments).
public struct EvidenceConfiguration: Sendable {
    /// The service refuses to start with evidence but without valid receipts required.
    public struct ReceiptsNotRequired: Error, CustomStringConvertible {
        public var description: String {
            "evidence records need valid receipts required (AppAttestPolicy.requireValidReceipt): an attestation with a broken receipt would make every record of its key fail to verify"
        }
    }

    /// A directory that receives one file per accepted form (`<id>.json`), never overwritten.
    public var archiveDirectory: String?
    /// Whether each answer carries the signed record itself (`evidence`), not only its id.
    public var inAnswer: Bool
    /// The append-only log every record joins (its answer then carries `evidenceLogIndex`).
    public var log: EvidenceLogConfiguration?

    public init(archiveDirectory: String? = nil, inAnswer: Bool = false, log: EvidenceLogConfiguration? = nil) {
        self.archiveDirectory = archiveDirectory
        self.inAnswer = inAnswer
        self.log = log
    }
}

/// Builds, signs and archives the evidence record of each accepted form.
///
/// The record is made after the store's commit (only an accepted form has one). If the archive
/// cannot take it, the form stays accepted (its state is committed: refusing now would only turn
/// the client's retry into a replay), the answer carries the whole record instead so that the
/// caller can keep it, and the failure is logged and counted.
struct EvidenceRecorder: Sendable {
    let configuration: EvidenceConfiguration
    let signingKey: P256.Signing.PrivateKey
    let policy: EvidenceRecord.Policy
    let log: EvidenceLog?

    init(
        configuration: EvidenceConfiguration, signingKey: P256.Signing.PrivateKey, verifierPolicy: AppAttestPolicy, flows: FlowConfiguration,
        log: EvidenceLog? = nil
    ) throws {
        guard verifierPolicy.requireValidReceipt else { throw EvidenceConfiguration.ReceiptsNotRequired() }
        self.configuration = configuration
        self.signingKey = signingKey
        self.log = log
        self.policy = EvidenceRecord.Policy(
            appIDs: verifierPolicy.appIDs,
            environments: Array(verifierPolicy.environments),
            trustAnchorKeyDigests: verifierPolicy.trustAnchors.map(EvidenceRecord.Policy.keyDigest(of:)),
            formMaximumAge: Int(flows.formPolicy.maximumAge.rounded(.up)),
            formMaximumFutureSkew: Int(flows.formPolicy.maximumFutureSkew.rounded(.up)),
            requireServerChallenge: flows.requireServerChallenge,
            sessionBound: false
        )
    }

    /// The policy of one request (whether its session was bound).
    func policy(sessionBound: Bool) -> EvidenceRecord.Policy {
        var policy = self.policy
        policy.sessionBound = sessionBound
        return policy
    }

    /// Signs and archives `record`; returns what the answer says of it (`evidenceId`,
    /// `evidenceArchived`, and `evidence` when asked for or when the archive failed), or nil when
    /// the record could not be signed (the form stays accepted).
    func answerFields(for record: EvidenceRecord, logger: Logger) async -> EvidenceFields? {
        var record = record
        var registrationID: [UInt8]?
        if let log = self.log {
            // With the log on, the record references its key's registration (version 2), stored
            // once per key before the record's leaf is appended. If it cannot be stored, the
            // record stays self-contained (version 1, larger) and is still logged and archived:
            // no record ever references a registration that is not on disk.
            // A passkey alone has no App Attest key to register (its own registration is in the record).
            do {
                if record.signedByAppAttest {
                    let registration = KeyRegistration(of: record)
                    let id = try await log.storeRegistration(registration)
                    record = record.referencing(registration, id: id)
                    registrationID = id
                }
            } catch {
                logger.error("key registration not stored: the record keeps the key's attestation", metadata: ["reason": "\(error)"])
                Counter(label: "formattest_evidence_failures_total", dimensions: [("step", "registration")]).increment()
            }
        }
        let signed: SignedEvidence.Signed
        do {
            signed = try SignedEvidence.sign(record, with: self.signingKey)
        } catch {
            // ECDSA signing does not fail with a valid key; if it ever does, the form stays accepted.
            logger.error("evidence record not signed", metadata: ["reason": "\(error)"])
            Counter(label: "formattest_evidence_failures_total", dimensions: [("step", "sign")]).increment()
            return nil
        }
        var inAnswer = self.configuration.inAnswer
        var fields = EvidenceFields(id: signed.id, archived: nil, envelope: nil)
        if let log = self.log {
            do {
                fields.logIndex = try await log.append(signed.payload, registration: registrationID)
            } catch {
                logger.error("evidence record not logged", metadata: ["id": "\(signed.id)", "reason": "\(error)"])
                Counter(label: "formattest_evidence_failures_total", dimensions: [("step", "log")]).increment()
                inAnswer = true
            }
        }
        if let directory = self.configuration.archiveDirectory {
            do {
                try await EvidenceArchive(directory: directory).write(signed)
                fields.archived = true
            } catch {
                logger.error("evidence record not archived", metadata: ["id": "\(signed.id)", "reason": "\(error)"])
                Counter(label: "formattest_evidence_failures_total", dimensions: [("step", "archive")]).increment()
                fields.archived = false
                inAnswer = true
            }
        }
        if inAnswer, let envelope = try? CanonicalJSON.parse(signed.bytes) {
            fields.envelope = envelope
        }
        return fields
    }
}

extension EvidenceRecorder {
    /// The record of a form confirmed with a passkey (alone, or beside an App Attest assertion):
    /// version 3, carrying the passkey's registration as the client sent it, the form's assertion
    /// as received with the sign count it was checked against, and the relying-party policy in
    /// force. Nil, logged and counted, when a part is missing (the flows refuse a passkey whose
    /// registration was not kept while evidence is on, so this is a store that lost it since).
    func record(
        confirmed outcome: FormFlows.ConfirmOutcome, appAttestAssertion: [UInt8]?, passkeyPolicy: WebAuthnPolicy?, username: String,
        sessionBound: Bool, now: Date, logger: Logger
    ) -> EvidenceRecord? {
        func missing(_ what: String) -> EvidenceRecord? {
            logger.warning("no evidence record: \(what)", metadata: ["endpoint": "assert"])
            Counter(label: "formattest_evidence_failures_total", dimensions: [("step", "passkey_evidence_missing")]).increment()
            return nil
        }
        guard let stored = outcome.passkey, let verified = outcome.passkeyAssertion, let response = outcome.passkeyResponse,
            let previousSignCount = outcome.passkeyPreviousSignCount, let passkeyPolicy
        else { return missing("the confirmation carried no verified passkey assertion") }
        guard let registration = stored.registration else { return missing("the passkey's registration was not kept") }
        // The challenge the registration answered: its clientDataJSON, verified at registration,
        // names it (the one-time challenge itself was consumed then).
        guard let clientData = try? CollectedClientData(bytes: registration.clientDataJSON),
            let challenge = WebAuthnBase64.decode(clientData.challenge)
        else { return missing("the passkey's registration has no readable challenge") }
        let passkey = PasskeyEvidence(
            credentialID: stored.credentialID,
            userHandle: stored.userHandle,
            registration: PasskeyEvidence.Registration(
                clientDataJSON: registration.clientDataJSON, attestationObject: registration.attestationObject, challenge: challenge,
                verifiedAt: stored.createdAt),
            assertion: PasskeyEvidence.Assertion(
                credentialID: response.rawID, clientDataJSON: response.clientDataJSON, authenticatorData: response.authenticatorData,
                signature: response.signature, userHandle: response.userHandle, previousSignCount: previousSignCount, signCount: verified.signCount,
                userVerified: verified.userVerified, backupEligible: verified.backupEligible, backedUp: verified.backedUp),
            policy: PasskeyEvidence.Policy(passkeyPolicy, requireUserVerification: outcome.requirement.userVerification)
        )
        let form = outcome.form.canonicalBytes
        guard let key = outcome.key, let keyAssertion = outcome.assertion, let appAttestAssertion else {
            return EvidenceRecord(
                passkeyOnly: passkey, verifiedAt: now, username: username, form: form, policy: self.policy(sessionBound: sessionBound))
        }
        guard let attestation = key.attestation else { return missing("the App Attest key's attestation was not kept") }
        return EvidenceRecord(
            kind: .assertion, verifiedAt: now, username: username, form: form, keyID: key.keyID, appID: key.appID, environment: key.environment,
            counter: keyAssertion.counter,
            keyAttestation: .init(object: attestation.object, clientDataHash: attestation.clientDataHash, verifiedAt: key.createdAt),
            assertion: appAttestAssertion, policy: self.policy(sessionBound: sessionBound), passkey: passkey)
    }
}

/// A directory of evidence records, one file per record, named `<id>.json`, written once: a file
/// is created exclusively (an existing one is never replaced), synced, and its directory synced,
/// before the answer goes out.
public struct EvidenceArchive: Sendable {
    public struct WriteError: Error, CustomStringConvertible {
        public var description: String
    }

    public let directory: String

    public init(directory: String) {
        self.directory = directory
    }

    /// Writes `signed` as `<directory>/<id>.json`, on NIO's blocking-IO thread pool.
    public func write(_ signed: SignedEvidence.Signed) async throws {
        let directory = self.directory
        try await NIOThreadPool.singleton.runIfActive {
            try Self.writeExclusively(signed.bytes, to: directory + "/" + signed.id + ".json", directory: directory)
        }
    }

    private static func writeExclusively(_ bytes: [UInt8], to path: String, directory: String) throws {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o640)
        guard descriptor >= 0 else { throw WriteError(description: "cannot create \(path): \(String(cString: strerror(errno)))") }
        var written = 0
        var failure: String?
        bytes.withUnsafeBytes { buffer in
            while written < buffer.count {
                let count = Foundation.write(descriptor, buffer.baseAddress! + written, buffer.count - written)
                if count < 0 {
                    if errno == EINTR { continue }
                    failure = "cannot write \(path): \(String(cString: strerror(errno)))"
                    return
                }
                written += count
            }
        }
        if failure == nil, fsync(descriptor) != 0 { failure = "cannot sync \(path): \(String(cString: strerror(errno)))" }
        close(descriptor)
        if let failure {
            // A partial file is not a record: remove it (the name stays free for nothing else, as
            // the id is the record's digest).
            unlink(path)
            throw WriteError(description: failure)
        }
        let directoryDescriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directoryDescriptor >= 0 else { throw WriteError(description: "cannot open \(directory) to sync it") }
        defer { close(directoryDescriptor) }
        guard fsync(directoryDescriptor) == 0 else { throw WriteError(description: "cannot sync \(directory)") }
    }
}
