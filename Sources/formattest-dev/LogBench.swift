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
import FormattestCommands
import Foundation
import TransparencyLog
import TransparencyLogFiles

/// `formattest-dev log-bench`: the evidence log at the scale of a year (issue 34's figures).
///
/// Appends real-sized records (a real device's attestation object, as the service logs them
/// today) through the log's own durable append, in group commits of `--group` records as the
/// service's group commit makes them under load; then prints the disk per record, the fullest
/// directory, the time to produce a signed checkpoint (reopening the log from its files, the root,
/// the Ed25519 note), and the append's CPU per record against one accepted form's cryptography
/// (an ES256 verification and an ES256 signature, measured in the same run).
struct LogBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "log-bench",
        abstract: "The evidence log at scale: append N real-sized records, then the disk per record, directories, checkpoint time and append CPU."
    )

    @Option(help: "Records to append.")
    var records = 1_000_000

    @Option(help: "Records per group commit (one fsync of the tiles and one state replace each).")
    var group = 16

    @Option(help: "The log's directory (created; must not exist).")
    var dir: String

    @Option(help: "The real attestation sample whose object the records carry.")
    var sample = Bench.packageFile("Tests/Fixtures/appattest/samples/uebelack_production.json")

    @Flag(help: "Keep the directory (default: removed at the end).")
    var keep = false

    func validate() throws {
        guard self.records > 0, self.group > 0 else { throw ValidationError("--records and --group must be positive") }
    }

    func run() async throws {
        guard !FileManager.default.fileExists(atPath: self.dir) else { throw ValidationError("--dir \(self.dir) exists") }
        defer { if !self.keep { try? FileManager.default.removeItem(atPath: self.dir) } }
        let payloads = try self.payloads()
        let average = payloads.map(\.count).reduce(0, +) / payloads.count
        print("records: \(self.records) of \(average) bytes on average (a real attestation object, an assertion, the form, the policy), groups of \(self.group)")

        let log = try TileLogDirectory(directory: self.dir)
        let clock = ContinuousClock()
        let cpuBefore = Self.cpuSeconds()
        let started = clock.now
        var appended = 0
        var next = 0
        var batch: [[UInt8]] = []
        batch.reserveCapacity(self.group)
        while appended < self.records {
            batch.removeAll(keepingCapacity: true)
            for _ in 0..<min(self.group, self.records - appended) {
                batch.append(payloads[next])
                next = (next + 1) % payloads.count
            }
            _ = try log.append(batch)
            appended += batch.count
            if appended % 100_000 < self.group {
                print("  \(appended) appended, \(String(format: "%.1f", (clock.now - started).seconds)) s")
            }
        }
        let wall = (clock.now - started).seconds
        let cpu = Self.cpuSeconds() - cpuBefore
        let cpuPerRecord = cpu / Double(self.records)

        // A checkpoint as the service produces one after a restart: open the log from its files
        // (lock, state, recovery), its root, the signed note.
        let signer = try NoteSigner(name: "bench.example/evidence", seed: Array(SHA256.hash(data: Array("log-bench".utf8))))
        let checkpointStarted = clock.now
        let reopened = try TileLogDirectory(readingDirectory: self.dir)
        let root = try reopened.root(size: reopened.size)
        let note = try SignedNote.sign(text: try Checkpoint(origin: signer.name, size: reopened.size, rootHash: root).body, with: signer)
        let checkpointSeconds = (clock.now - checkpointStarted).seconds
        let verifier = try NoteVerifier(keyString: signer.verifierKey)
        _ = try SignedNote.open(Array(note.utf8), verifier: verifier)

        let (bytes, files, fullest, fullestEntries) = try Self.disk(self.dir)
        let formCrypto = try Self.formCryptography()
        print(
            """
            appended \(self.records) records in \(String(format: "%.1f", wall)) s: \(Int(Double(self.records) / wall)) records/s
            append CPU: \(String(format: "%.1f", cpuPerRecord * 1e6)) µs a record (user + system)
            one form's cryptography (ES256 verify + ES256 sign, this run): \(String(format: "%.1f", formCrypto * 1e6)) µs
            append / form cryptography: \(String(format: "%.1f", 100 * cpuPerRecord / formCrypto)) %
            disk: \(bytes) bytes in \(files) files: \(bytes / self.records) bytes a record (allocated: du -sh the directory with --keep)
            fullest directory: \(fullestEntries) entries (\(fullest))
            checkpoint over \(reopened.size) leaves (open from the files, root, Ed25519 note): \(String(format: "%.3f", checkpointSeconds)) s
            """)
    }

    /// Distinct records (the counter and the form's nonce differ), made once and cycled.
    private func payloads() throws -> [[UInt8]] {
        let sample = try BenchSample(path: self.sample)
        let now = Date()
        let policy = EvidenceRecord.Policy(
            appIDs: [sample.appID], environments: [.production], trustAnchorKeyDigests: AppAttestPolicy.appleTrustAnchors.map(EvidenceRecord.Policy.keyDigest(of:)),
            formMaximumAge: 300, formMaximumFutureSkew: 30, requireServerChallenge: false, sessionBound: false
        )
        return try (0..<256).map { index in
            let form = try SignedForm.make(
                fields: ["amount": .string(.init("\(index).00")), "to": .string(.init("DE89370400440532013000"))], username: "alice", now: now)
            let record = EvidenceRecord(
                kind: .assertion, verifiedAt: now, username: "alice", form: form.canonicalBytes, keyID: sample.keyID, appID: sample.appID,
                environment: .production, counter: UInt32(index + 1),
                keyAttestation: .init(object: sample.attestation, clientDataHash: sample.clientDataHash, verifiedAt: sample.validAt),
                assertion: [UInt8](repeating: 0xA2, count: 110), policy: policy
            )
            return record.json.canonicalBytes
        }
    }

    /// One ES256 verification and one ES256 signature: the least cryptography an accepted form
    /// costs (its assertion, its token), per form.
    private static func formCryptography() throws -> Double {
        let key = P256.Signing.PrivateKey()
        let message = Array(repeating: UInt8(7), count: 200)
        let signature = try key.signature(for: message)
        let rounds = 2_000
        let before = Self.cpuSeconds()
        for _ in 0..<rounds {
            precondition(key.publicKey.isValidSignature(signature, for: message))
            _ = try key.signature(for: message)
        }
        return (Self.cpuSeconds() - before) / Double(rounds)
    }

    private static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    /// Bytes in files, the number of files, and the directory with the most entries.
    private static func disk(_ root: String) throws -> (Int, Int, String, Int) {
        var bytes = 0
        var files = 0
        var fullest = root
        var fullestEntries = 0
        var pending = [root]
        while let directory = pending.popLast() {
            let names = try FileManager.default.contentsOfDirectory(atPath: directory)
            if names.count > fullestEntries { (fullest, fullestEntries) = (directory, names.count) }
            for name in names {
                let path = directory + "/" + name
                let attributes = try FileManager.default.attributesOfItem(atPath: path)
                if attributes[.type] as? FileAttributeType == .typeDirectory {
                    pending.append(path)
                } else {
                    bytes += (attributes[.size] as? NSNumber)?.intValue ?? 0
                    files += 1
                }
            }
        }
        return (bytes, files, fullest, fullestEntries)
    }
}

extension Duration {
    fileprivate var seconds: Double { Double(self.components.seconds) + Double(self.components.attoseconds) / 1e18 }
}
