//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import CanonicalJSON
import Crypto
import FormAttestForm
public import FormAttestEvidence
import FormAttestFlows
import FormAttestResponses
import Foundation
import Logging
import Metrics
import NIOPosix

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
        if let log = self.log {
            // With the log on, the record references its key's registration (version 2), stored
            // once per key before the record's leaf is appended. If it cannot be stored, the
            // record stays self-contained (version 1, larger) and is still logged and archived:
            // no record ever references a registration that is not on disk.
            do {
                try await log.storeRegistration(KeyRegistration(of: record).bytes)
                record.format = .referencingRegistration
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
                fields.logIndex = try await log.append(signed.payload)
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
