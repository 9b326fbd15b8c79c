//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import ArgumentParser
import CanonicalJSON
import Crypto
import FormAttestEvidence
import FormAttestForm
import FormAttestServer
import Foundation
import TransparencyLog
import TransparencyLogFiles
import X509

/// `formattest evidence import`: an archive written by `serve --evidence-dir` (one file per
/// record) appended to an evidence log, in the order the records were accepted (issue 34's
/// migration).
struct EvidenceImport: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Append an evidence archive (serve --evidence-dir) to an evidence log, in acceptance order.",
        discussion: """
            Every file of the archive is verified first, as 'formattest evidence verify' does (the \
            server's signature with --jwks, the form, the key's attestation at its recorded time, the \
            device's signature), and must be named by its record's id; a version-2 record's key \
            registration is read from the log's DIR/registrations. If any file fails, nothing is \
            appended and each failure is named (exit 1), unless --skip-invalid, which leaves those \
            files out and names them. Then the records are appended in acceptance order: by the \
            record's verifiedAt (the server's clock when it accepted the form, in milliseconds), \
            then by the record's id (SHA-256 of its payload) in byte order for records accepted in \
            the same millisecond. Each leaf is the record's payload exactly as the server signed it: \
            version-1 records stay version 1 (self-contained, about 11 KB each), since rewriting \
            them as version 2 would change what the server signed. A record whose leaf is already \
            in the log (the service logged it too, or an earlier run of this command appended it) \
            is not appended again, so a run stopped at any point (kill -9 included) is finished by \
            running the same command again. A signed checkpoint is written to DIR/checkpoint at the \
            end (and every 100,000 records). The service must not run on the log meanwhile (the \
            log's lock refuses it). Exit 0: done; 1: a record failed; 2: usage or I/O.
            """
    )

    @Option(help: "The evidence archive (serve --evidence-dir): one <id>.json file per record.")
    var archive: String

    @Option(help: "The log's directory (serve --evidence-log); created when it does not exist.")
    var log: String

    @Option(name: .customLong("evidence-log-key"), help: "The log's checkpoint key (serve --evidence-log-key; mode 0600).")
    var evidenceLogKey: String

    @Option(help: "The server's JWKS, with every key that ever signed the archive's records.")
    var jwks: String

    @Option(name: .customLong("root"), help: "A PEM trust anchor instead of Apple's App Attestation root (repeatable).")
    var roots: [String] = []

    @Option(name: .customLong("receipt-root"), help: "A PEM receipt trust anchor instead of Apple Root CA - G3 (repeatable).")
    var receiptRoots: [String] = []

    @Flag(name: .customLong("skip-invalid"), help: "Leave out (and name) the files that do not verify instead of importing nothing.")
    var skipInvalid = false

    /// How many records are appended in one commit of the log.
    static let batchSize = 1_000
    /// How many records are appended between two checkpoints.
    static let checkpointEvery = 100_000

    func run() async throws {
        let signer = try self.signer()
        try Setting.checkText(self.archive, "--archive")
        try Setting.checkText(self.log, "--log")
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: self.archive, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw UsageError("--archive \(self.archive) is not a directory")
        }
        let signers: [String: SignedEvidence.SignerKey]
        do {
            signers = try SignedEvidence.signers(jwks: try InputFile.readBytes(self.jwks))
        } catch let error as EvidenceError {
            throw UsageError("--jwks \(self.jwks): \(error.reason)")
        }
        let verification = Verification(
            signers: signers,
            trustAnchors: try InputFile.readCertificates(self.roots, orDefault: AppAttestPolicy.appleTrustAnchors),
            receiptTrustAnchors: try InputFile.readCertificates(self.receiptRoots, orDefault: AppAttestPolicy.appleReceiptTrustAnchors),
            registrations: ContentAddressedDirectory(directory: (self.log as NSString).appendingPathComponent(EvidenceLog.registrationsDirectory)))

        let evidenceLog: EvidenceLog
        do {
            evidenceLog = try await EvidenceLog.open(EvidenceLogConfiguration(directory: self.log, signer: signer))
        } catch {
            throw UsageError("--log \(self.log): \(error)")
        }

        // 1. Verify every file; keep only its time and id (40 bytes a record).
        let names = try Self.recordFiles(in: self.archive)
        let (records, failures) = await verification.verifyAll(names, in: self.archive)
        for failure in failures { print("not imported: \(failure)") }
        if !failures.isEmpty, !self.skipInvalid {
            print("nothing imported: \(failures.count) of \(names.count) files do not verify (--skip-invalid leaves them out)")
            throw ExitCode(1)
        }

        // 2. Append, in acceptance order, what the log does not hold yet.
        let logged = try await evidenceLog.leafHashes(Digest32.init)
        let present = Set(logged)
        var appended = 0
        var alreadyLogged = 0
        var first: UInt64?
        var batch: [[UInt8]] = []
        var sinceCheckpoint = 0
        for record in records.sorted() {
            let name = record.fileName
            let path = (self.archive as NSString).appendingPathComponent(name)
            let payload: [UInt8]
            do {
                payload = try Self.payload(of: try InputFile.readBytes(path, limit: SignedEvidence.maximumSize))
            } catch {
                throw UsageError("\(path): \(error)")
            }
            guard Digest32(Array(SHA256.hash(data: payload))) == record.id else {
                throw UsageError("\(path) changed while it was imported: run the command again")
            }
            if present.contains(Digest32(MerkleHash.leaf(payload))) {
                alreadyLogged += 1
                continue
            }
            batch.append(payload)
            if batch.count == Self.batchSize {
                let index = try await Self.append(batch, to: evidenceLog)
                first = first ?? index
                appended += batch.count
                sinceCheckpoint += batch.count
                batch = []
                if sinceCheckpoint >= Self.checkpointEvery {
                    _ = try await Self.checkpoint(evidenceLog)
                    sinceCheckpoint = 0
                }
            }
        }
        if !batch.isEmpty {
            let index = try await Self.append(batch, to: evidenceLog)
            first = first ?? index
            appended += batch.count
        }
        _ = try await Self.checkpoint(evidenceLog)
        let size = logged.count + appended
        var summary = "imported \(appended) records"
        if let first, appended > 0 { summary += " (leaves \(first)–\(first + UInt64(appended) - 1))" }
        summary += "; \(alreadyLogged) already in the log"
        if !failures.isEmpty { summary += "; \(failures.count) left out (not verified)" }
        summary += "; checkpoint of \(size) leaves written to \((self.log as NSString).appendingPathComponent("checkpoint"))"
        print(summary)
        if !failures.isEmpty { throw ExitCode(1) }
    }

    private func signer() throws -> NoteSigner {
        try StrictModes.checkSecretFile(self.evidenceLogKey, "--evidence-log-key")
        let text = try InputFile.readText(self.evidenceLogKey)
        let line = text.hasSuffix("\n") ? String(text.dropLast()) : text
        do {
            return try NoteSigner(keyString: line)
        } catch {
            throw UsageError("--evidence-log-key \(self.evidenceLogKey): \(error.reason)")
        }
    }

    private static func append(_ batch: [[UInt8]], to log: EvidenceLog) async throws -> UInt64 {
        do {
            return try await log.append(contentsOf: batch)
        } catch {
            throw UsageError("the log cannot be appended to: \(error)")
        }
    }

    private static func checkpoint(_ log: EvidenceLog) async throws -> String {
        do {
            return try await log.checkpoint()
        } catch {
            throw UsageError("the checkpoint cannot be written: \(error)")
        }
    }

    /// The archive's record files (`*.json`), read with readdir: an archive of millions of
    /// files is never listed whole into one array of paths twice.
    static func recordFiles(in directory: String) throws -> [String] {
        guard let stream = opendir(directory) else {
            throw UsageError("--archive \(directory): \(String(cString: strerror(errno)))")
        }
        defer { closedir(stream) }
        var names: [String] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name.hasSuffix(".json") { names.append(name) }
        }
        return names
    }

    /// The signed payload of a server-signed envelope (already verified in step 1).
    static func payload(of envelope: [UInt8]) throws -> [UInt8] {
        guard let text = (try? CanonicalJSON.parse(envelope))?["payload"]?.stringValue, let payload = Base64URL.decode(text) else {
            throw UsageError("not a server-signed evidence record")
        }
        return payload
    }
}

/// 32 bytes as four words: a set of millions of hashes without an array per hash.
struct Digest32: Hashable, Comparable, Sendable {
    let words: (UInt64, UInt64, UInt64, UInt64)

    init(_ bytes: [UInt8]) {
        precondition(bytes.count == 32)
        func word(_ offset: Int) -> UInt64 { bytes[offset..<offset + 8].reduce(0) { $0 << 8 | UInt64($1) } }
        self.words = (word(0), word(8), word(16), word(24))
    }

    static func == (lhs: Digest32, rhs: Digest32) -> Bool { lhs.words == rhs.words }

    /// Byte order (the words are big-endian).
    static func < (lhs: Digest32, rhs: Digest32) -> Bool { lhs.words < rhs.words }

    func hash(into hasher: inout Hasher) {
        hasher.combine(self.words.0)
        hasher.combine(self.words.1)
        hasher.combine(self.words.2)
        hasher.combine(self.words.3)
    }

    var bytes: [UInt8] {
        [self.words.0, self.words.1, self.words.2, self.words.3].flatMap { word in
            (0..<8).reversed().map { UInt8(truncatingIfNeeded: word >> ($0 * 8)) }
        }
    }
}

/// One verified record of the archive: what orders it, and its id (its file's name).
struct ArchivedRecord: Comparable, Sendable {
    /// The record's verifiedAt, in milliseconds since 1970.
    let acceptedAt: Int64
    /// SHA-256 of the record's payload: the record's id, in byte order.
    let id: Digest32

    var fileName: String { Base64URL.encode(self.id.bytes) + ".json" }

    static func < (lhs: ArchivedRecord, rhs: ArchivedRecord) -> Bool {
        (lhs.acceptedAt, lhs.id) < (rhs.acceptedAt, rhs.id)
    }
}

/// Step 1 of the import: every file verified as `evidence verify` does, on every core.
struct Verification: Sendable {
    let signers: [String: SignedEvidence.SignerKey]
    let trustAnchors: [Certificate]
    let receiptTrustAnchors: [Certificate]
    let registrations: ContentAddressedDirectory

    /// The verified records, and one line for each file that failed.
    func verifyAll(_ names: [String], in directory: String) async -> (records: [ArchivedRecord], failures: [String]) {
        var records: [ArchivedRecord] = []
        records.reserveCapacity(names.count)
        var failures: [String] = []
        let width = max(2, ProcessInfo.processInfo.activeProcessorCount * 2)
        await withTaskGroup(of: Result<ArchivedRecord, ImportFailure>.self) { group in
            var next = 0
            func add() {
                guard next < names.count else { return }
                let name = names[next]
                next += 1
                group.addTask { await self.verify(name, in: directory) }
            }
            for _ in 0..<width { add() }
            while let result = await group.next() {
                switch result {
                case .success(let record): records.append(record)
                case .failure(let failure): failures.append(failure.description)
                }
                add()
            }
        }
        return (records, failures.sorted())
    }

    private func verify(_ name: String, in directory: String) async -> Result<ArchivedRecord, ImportFailure> {
        let path = (directory as NSString).appendingPathComponent(name)
        let envelope: [UInt8]
        do {
            envelope = try InputFile.readBytes(path, limit: SignedEvidence.maximumSize)
        } catch {
            return .failure(ImportFailure(description: "\(path): \(error)"))
        }
        let registrations = self.registrations
        let verified: SignedEvidence.Verified
        do {
            verified = try await SignedEvidence.verify(
                envelope, signers: self.signers, trustAnchors: self.trustAnchors, receiptTrustAnchors: self.receiptTrustAnchors,
                registrations: { id in (try? registrations.read(id)) ?? nil })
        } catch {
            var message = error.reason
            if let code = error.verifierCode { message += " [\(code)]" }
            return .failure(ImportFailure(description: "\(path): \(error.code.identifier): \(message)"))
        }
        guard name == verified.id + ".json", let id = Base64URL.decode(verified.id), id.count == 32 else {
            return .failure(ImportFailure(description: "\(path): the file is not named by its record's id (\(verified.id).json)"))
        }
        let milliseconds = (verified.record.verifiedAt.timeIntervalSince1970 * 1000).rounded()
        return .success(ArchivedRecord(acceptedAt: Int64(milliseconds), id: Digest32(id)))
    }

    struct ImportFailure: Error, CustomStringConvertible {
        let description: String
    }
}
