//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import ArgumentParser
import CanonicalJSON
import CoreFoundation
import Crypto
import FormAttestEvidence
import FormAttestForm
import FormattestCommands
import Foundation
import TransparencyLog
import TransparencyLogFiles

#if canImport(Glibc)
    import Glibc
#endif

/// `formattest-dev log-bench`: the evidence log at the scale of a year (issue 34's figures).
///
/// Appends records as the service logs them with the log on: version 2, each referencing its
/// key's registration (a real device's attestation object), which is stored once per key
/// (`--records-per-key`) in `DIR/registrations` before the key's first record, through the log's
/// own durable append, in group commits of `--group` records as the service's group commit makes
/// them under load. Then prints the disk per record beyond the registrations, the registrations'
/// bytes on their own, the fullest directory, the time to produce a signed checkpoint (reopening
/// the log from its files, the root, the Ed25519 note), and the CPU of storing registrations and
/// appending per record against one accepted form's cryptography (an ES256 verification and an
/// ES256 signature, measured in the same run).
struct LogBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "log-bench",
        abstract:
            "The evidence log at scale: append N version-2 records (one key registration per --records-per-key), then the disk per record, the registrations, directories, checkpoint time and append CPU."
    )

    @Option(help: "Records to append.")
    var records = 1_000_000

    @Option(help: "Records per group commit (one fsync of the tiles and one state replace each).")
    var group = 16

    @Option(help: "Records per key: each key's registration is stored once, before its first record.")
    var recordsPerKey = 100

    @Option(help: "The log's directory (created; must not exist).")
    var dir: String

    @Option(help: "The real attestation sample whose object the keys' registrations carry.")
    var sample = Bench.packageFile("Tests/Fixtures/appattest/samples/uebelack_production.json")

    @Flag(help: "Keep the directory (default: removed at the end).")
    var keep = false

    func validate() throws {
        guard self.records > 0, self.group > 0, self.recordsPerKey > 0 else {
            throw ValidationError("--records, --group and --records-per-key must be positive")
        }
    }

    func run() async throws {
        guard !FileManager.default.fileExists(atPath: self.dir) else { throw ValidationError("--dir \(self.dir) exists") }
        defer { if !self.keep { try? FileManager.default.removeItem(atPath: self.dir) } }
        let maker = try RecordMaker(sample: try BenchSample(path: self.sample))
        let keys = (self.records + self.recordsPerKey - 1) / self.recordsPerKey
        print(
            "records: \(self.records), version 2 (a real attestation object in each key's registration, an assertion, the form, the policy), \(self.recordsPerKey) a key (\(keys) keys), groups of \(self.group)"
        )

        let log = try TileLogDirectory(directory: self.dir)
        let registrations = ContentAddressedDirectory(directory: self.dir + "/registrations")
        let clock = ContinuousClock()
        let started = clock.now
        var cpu = 0.0
        var appended = 0
        var leafBytes = 0
        var largestLeaf = 0
        var batch: [[UInt8]] = []
        var documents: [[UInt8]] = []
        batch.reserveCapacity(self.group)
        while appended < self.records {
            // The records (made outside the measured CPU: the service has them signed already).
            batch.removeAll(keepingCapacity: true)
            documents.removeAll(keepingCapacity: true)
            for index in appended..<min(appended + self.group, self.records) {
                let (payload, registration) = try maker.record(index, key: index / self.recordsPerKey, firstOfKey: index % self.recordsPerKey == 0)
                batch.append(payload)
                if let registration { documents.append(registration) }
                leafBytes += payload.count
                largestLeaf = max(largestLeaf, payload.count)
            }
            // What the service does per group: each new key's registration stored durably, then
            // the group appended.
            let before = Self.cpuSeconds()
            for document in documents { try registrations.store(document) }
            _ = try log.append(batch)
            cpu += Self.cpuSeconds() - before
            appended += batch.count
            if appended % 100_000 < self.group {
                print("  \(appended) appended, \(String(format: "%.1f", (clock.now - started).seconds)) s")
            }
        }
        let wall = (clock.now - started).seconds
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

        let disk = try Self.disk(self.dir, registrations: "registrations")
        let formCrypto = try Self.formCryptography()
        let reference = try maker.referenceCost()
        print(
            """
            appended \(self.records) records in \(String(format: "%.1f", wall)) s: \(Int(Double(self.records) / wall)) records/s
            leaves: \(leafBytes / self.records) bytes on average, the largest \(largestLeaf)
            append CPU (registrations stored + group appends): \(String(format: "%.1f", cpuPerRecord * 1e6)) µs a record (user + system)
            one form's cryptography (ES256 verify + ES256 sign, this run): \(String(format: "%.1f", formCrypto * 1e6)) µs
            append / form cryptography: \(String(format: "%.1f", 100 * cpuPerRecord / formCrypto)) %
            the service's own work for a version-2 record before it is signed, a key's later records (its registration's content digest found in the log's cache, and the record's bytes with the id it had): \(String(format: "%.1f", reference.version2Known * 1e6)) µs; a key's first record, or without the cache (the registration document encoded and hashed for its store, then for the record's reference, and the record's bytes): \(String(format: "%.1f", reference.version2 * 1e6)) µs; the version-1 record's bytes: \(String(format: "%.1f", reference.version1 * 1e6)) µs
            log without registrations: \(disk.log.bytes) bytes in \(disk.log.files) files (\(disk.log.allocated) allocated): \(disk.log.bytes / self.records) bytes a record (\(disk.log.allocated / self.records) allocated)
            registrations: \(disk.registrations.files) files, \(disk.registrations.bytes) bytes (\(disk.registrations.allocated) allocated): \(disk.registrations.bytes / max(1, disk.registrations.files)) bytes a key (\(disk.registrations.allocated / max(1, disk.registrations.files)) allocated), once
            everything: \((disk.log.bytes + disk.registrations.bytes) / self.records) bytes a record (\((disk.log.allocated + disk.registrations.allocated) / self.records) allocated) at \(self.recordsPerKey) records a key
            fullest directory: \(disk.fullestEntries) entries (\(disk.fullest))
            checkpoint over \(reopened.size) leaves (open from the files, root, Ed25519 note): \(String(format: "%.3f", checkpointSeconds)) s
            """)
    }

    /// Version-2 records over 256 distinct forms (the counter and the amount differ), each key's
    /// registration made once.
    struct RecordMaker {
        let sample: BenchSample
        let forms: [[UInt8]]
        let now = Date()
        let policy: EvidenceRecord.Policy

        init(sample: BenchSample) throws {
            self.sample = sample
            let now = self.now
            self.forms = try (0..<256).map { index in
                try SignedForm.make(
                    fields: ["amount": .string(.init("\(index).00")), "to": .string(.init("DE89370400440532013000"))], username: "alice", now: now
                ).canonicalBytes
            }
            self.policy = EvidenceRecord.Policy(
                appIDs: [sample.appID], environments: [.production],
                trustAnchorKeyDigests: AppAttestPolicy.appleTrustAnchors.map(EvidenceRecord.Policy.keyDigest(of:)), formMaximumAge: 300,
                formMaximumFutureSkew: 30, requireServerChallenge: false, sessionBound: false
            )
        }

        /// Record `index`'s payload, and its key's registration document when it is the key's first.
        func record(_ index: Int, key: Int, firstOfKey: Bool) throws -> (payload: [UInt8], registration: [UInt8]?) {
            // A distinct key id per key: the registrations are distinct documents, as real keys' are.
            let keyID = Array(SHA256.hash(data: Array("log-bench key \(key)".utf8)))
            let record = EvidenceRecord(
                kind: .assertion, verifiedAt: self.now, username: "alice", form: self.forms[index % self.forms.count], keyID: keyID,
                appID: self.sample.appID, environment: .production, counter: UInt32(truncatingIfNeeded: index + 1),
                keyAttestation: .init(object: self.sample.attestation, clientDataHash: self.sample.clientDataHash, verifiedAt: self.sample.validAt),
                assertion: [UInt8](repeating: 0xA2, count: 110), policy: self.policy, format: .referencingRegistration
            )
            return (record.json.canonicalBytes, firstOfKey ? KeyRegistration(of: record).bytes : nil)
        }

        /// Seconds of CPU per record for what the recorder does before signing: version 1, the
        /// record's bytes; version 2, the registration document's bytes and SHA-256 (to store it,
        /// or find it stored), then the record's bytes (which hash the document again).
        func referenceCost() throws -> (version1: Double, version2: Double, version2Known: Double) {
            let rounds = 500
            var record = EvidenceRecord(
                kind: .assertion, verifiedAt: self.now, username: "alice", form: self.forms[0], keyID: Array(SHA256.hash(data: [1])),
                appID: self.sample.appID, environment: .production, counter: 1,
                keyAttestation: .init(object: self.sample.attestation, clientDataHash: self.sample.clientDataHash, verifiedAt: self.sample.validAt),
                assertion: [UInt8](repeating: 0xA2, count: 110), policy: self.policy
            )
            var before = LogBench.cpuSeconds()
            var total = 0
            for _ in 0..<rounds { total &+= record.json.canonicalBytes.count }
            let version1 = (LogBench.cpuSeconds() - before) / Double(rounds)
            record.format = .referencingRegistration
            before = LogBench.cpuSeconds()
            for _ in 0..<rounds {
                total &+= ContentAddressedDirectory.id(of: KeyRegistration(of: record).bytes).count
                total &+= record.json.canonicalBytes.count
            }
            let version2 = (LogBench.cpuSeconds() - before) / Double(rounds)
            // The service's path for a key whose registration it stored: the content digest
            // compared with the cache's, and the record's bytes with the id the cache gave.
            let registration = KeyRegistration(of: record)
            let cached = (digest: registration.contentDigest, id: registration.id)
            before = LogBench.cpuSeconds()
            for _ in 0..<rounds {
                let registration = KeyRegistration(of: record)
                precondition(registration.contentDigest == cached.digest)
                total &+= record.referencing(registration, id: cached.id).json.canonicalBytes.count
            }
            let version2Known = (LogBench.cpuSeconds() - before) / Double(rounds)
            precondition(total > 0)
            return (version1, version2, version2Known)
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

    static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    struct Usage {
        var bytes = 0
        var allocated = 0
        var files = 0
    }

    /// Bytes (apparent and allocated) and files, the registrations' apart from the rest, and the
    /// directory with the most entries.
    private static func disk(_ root: String, registrations: String) throws -> (log: Usage, registrations: Usage, fullest: String, fullestEntries: Int)
    {
        var log = Usage()
        var keys = Usage()
        var fullest = root
        var fullestEntries = 0
        var pending = [root]
        let registrationsRoot = root + "/" + registrations
        while let directory = pending.popLast() {
            let names = try FileManager.default.contentsOfDirectory(atPath: directory)
            if names.count > fullestEntries { (fullest, fullestEntries) = (directory, names.count) }
            for name in names {
                let path = directory + "/" + name
                var info = stat()
                guard lstat(path, &info) == 0 else { throw ValidationError("cannot stat \(path)") }
                if info.st_mode & S_IFMT == S_IFDIR {
                    pending.append(path)
                } else {
                    let isRegistration = path.hasPrefix(registrationsRoot + "/")
                    var usage = isRegistration ? keys : log
                    usage.bytes += Int(info.st_size)
                    usage.allocated += Int(info.st_blocks) * 512
                    usage.files += 1
                    if isRegistration { keys = usage } else { log = usage }
                }
            }
        }
        return (log, keys, fullest, fullestEntries)
    }
}

extension Duration {
    fileprivate var seconds: Double { Double(self.components.seconds) + Double(self.components.attoseconds) / 1e18 }
}
