//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

package import FormAttestEvidence
import Foundation
import NIOConcurrencyHelpers
import NIOPosix
public import TransparencyLog
import TransparencyLogFiles

/// The evidence log's settings (``EvidenceConfiguration/log``).
public struct EvidenceLogConfiguration: Sendable {
    /// The log's directory (C2SP tlog-tiles layout, ``TileLogDirectory``).
    public var directory: String
    /// The checkpoints' signing key; its name is the log's origin.
    public var signer: NoteSigner
    /// How often a checkpoint is written beside the log (`<directory>/checkpoint`) while records
    /// arrive.
    public var checkpointInterval: Duration

    public init(directory: String, signer: NoteSigner, checkpointInterval: Duration = .seconds(1)) {
        self.directory = directory
        self.signer = signer
        self.checkpointInterval = checkpointInterval
    }
}

/// The append-only evidence log (issue 34): every accepted form's record is a leaf, appended in
/// groups (one commit for all the records that arrived while the previous commit was syncing),
/// and checkpoints signed as C2SP signed notes commit to all of them.
///
/// The leaf's data is the record's payload (its RFC 8785 bytes, what the server's JWS signs), so
/// the leaf hash is SHA-256(0x00 ‖ payload): anyone holding a record can find its leaf.
package actor EvidenceLog {
    /// The directory's log, used by one thread at a time (appends and reads take the lock on
    /// NIO's blocking-IO pool).
    private final class Files: @unchecked Sendable {
        private let lock = NIOLock()
        private let log: TileLogDirectory

        init(_ log: TileLogDirectory) { self.log = log }

        func with<Result>(_ body: (TileLogDirectory) throws -> Result) rethrows -> Result {
            try self.lock.withLock { try body(self.log) }
        }

        /// The size of the checkpoint last written beside the log (under the lock: writes of
        /// two concurrent signings never go backwards).
        private var writtenSize: UInt64?

        /// Writes `<directory>/checkpoint` durably (under the lock) unless a checkpoint at least
        /// as large was written.
        func writeCheckpoint(size: UInt64, note: [UInt8]) throws {
            try self.lock.withLock {
                if let written = self.writtenSize, written >= size { return }
                try self.log.replaceFile("checkpoint", with: note)
                self.writtenSize = size
            }
        }
    }

    package let configuration: EvidenceLogConfiguration
    private let files: Files
    /// The key registrations version-2 records reference (`<directory>/registrations`).
    private let registrations: ContentAddressedDirectory
    /// The registrations this process stored or found stored with the same bytes: a key's
    /// records after its first cost no syscall. Emptied when it reaches
    /// ``registrationCacheLimit`` (a key then costs one more check of its file).
    private var storedRegistrations: Set<[UInt8]> = []
    static let registrationCacheLimit = 100_000
    /// The ids of the registrations stored, by key id, with each registration's
    /// ``KeyRegistration/contentDigest``: a key's records after its first neither encode nor hash
    /// its document (about 7.5 KB) again. Emptied with ``storedRegistrations``.
    private var registrationIDs: [[UInt8]: (digest: [UInt8], id: [UInt8])] = [:]
    private var pending: [(leaf: [UInt8], continuation: CheckedContinuation<UInt64, any Error>)] = []
    private var draining = false
    private var lastCheckpointFile: ContinuousClock.Instant?
    private var checkpointFileScheduled = false
    private var signedCheckpoint: (size: UInt64, note: String)?

    /// A refusal to open the log.
    package struct OpenError: Error, CustomStringConvertible {
        package let description: String
    }

    /// Opens (or creates) the log and recovers it to its last committed size. The log must
    /// extend the last checkpoint it signed (`<directory>/checkpoint`, written before any
    /// checkpoint is served): a log cut back, rolled back to an older state, or signed by another
    /// key is refused, so that the service never signs a tree that forks from one it published.
    package static func open(_ configuration: EvidenceLogConfiguration) async throws -> EvidenceLog {
        let directory = configuration.directory
        let path = directory + "/checkpoint"
        let last: Checkpoint? = try await NIOThreadPool.singleton.runIfActive { () throws -> Checkpoint? in
            guard let bytes = FileManager.default.contents(atPath: path) else { return nil }
            let verifier = try NoteVerifier(keyString: configuration.signer.verifierKey)
            let text: String
            do {
                text = try SignedNote.open(Array(bytes), verifier: verifier)
            } catch {
                throw OpenError(
                    description:
                        "\(path) is not a checkpoint signed by this log's key (\(error)): refusing to sign a tree that may fork from it")
            }
            return try Checkpoint(body: Array(text.utf8))
        }
        let minimumSize = last?.size ?? 0
        let files = try await NIOThreadPool.singleton.runIfActive { Files(try TileLogDirectory(directory: directory, atLeast: minimumSize)) }
        if let last {
            let extends: Bool = try await NIOThreadPool.singleton.runIfActive {
                try files.with { log in
                    guard last.origin == configuration.signer.name, last.size <= log.size else { return false }
                    return try log.root(size: last.size) == last.rootHash
                }
            }
            guard extends else {
                throw OpenError(
                    description:
                        "the log in \(directory) does not extend its last signed checkpoint (\(last.size) leaves): it was cut back, rolled back or replaced; refusing to fork it"
                )
            }
        }
        let log = EvidenceLog(configuration: configuration, files: files)
        if let last { await log.remember(last) }
        return log
    }

    private func remember(_ checkpoint: Checkpoint) {
        self.lastSigned = checkpoint.size
    }

    private init(configuration: EvidenceLogConfiguration, files: Files) {
        self.configuration = configuration
        self.files = files
        self.registrations = ContentAddressedDirectory(directory: configuration.directory + "/" + Self.registrationsDirectory)
    }

    /// Where key registrations are stored, in the log's directory.
    package static let registrationsDirectory = "registrations"

    /// Stores a key's registration document durably, once: the file and its directory are
    /// synced before this returns, so a record that references it is appended only after it is
    /// on disk (a committed leaf never references a registration that is not). The group commit
    /// is untouched: this runs before ``append(_:)``, outside the drain.
    package func storeRegistration(_ document: [UInt8]) async throws {
        _ = try await self.store(document: document)
    }

    /// Stores a key's registration as ``storeRegistration(_:)-([UInt8])`` does, and returns its
    /// id; a registration this process stored before is told by its content digest, without
    /// encoding or hashing its document.
    package func storeRegistration(_ registration: KeyRegistration) async throws -> [UInt8] {
        let digest = registration.contentDigest
        if let known = self.registrationIDs[registration.keyID], known.digest == digest { return known.id }
        let id = try await self.store(document: registration.bytes)
        if self.registrationIDs.count >= Self.registrationCacheLimit { self.registrationIDs.removeAll(keepingCapacity: true) }
        self.registrationIDs[registration.keyID] = (digest, id)
        return id
    }

    private func store(document: [UInt8]) async throws -> [UInt8] {
        let id = ContentAddressedDirectory.id(of: document)
        if self.storedRegistrations.contains(id) { return id }
        let registrations = self.registrations
        _ = try await NIOThreadPool.singleton.runIfActive { try registrations.store(document) }
        if self.storedRegistrations.count >= Self.registrationCacheLimit { self.storedRegistrations.removeAll(keepingCapacity: true) }
        self.storedRegistrations.insert(id)
        return id
    }

    /// Appends one record's payload; returns its index once the log has it durably. A payload
    /// the log cannot hold is refused alone, never with the group it would have joined.
    func append(_ leaf: [UInt8]) async throws -> UInt64 {
        guard leaf.count <= TileLayout.maximumEntryLength else {
            throw OpenError(description: "a record of \(leaf.count) bytes is over the log's \(TileLayout.maximumEntryLength)")
        }
        return try await withCheckedThrowingContinuation { continuation in
            self.pending.append((leaf, continuation))
            if !self.draining {
                self.draining = true
                Task { await self.drain() }
            }
        }
    }

    /// Appends `leaves` as consecutive leaves in one commit and returns the first one's index:
    /// for an import, which appends many records in order and needs no group commit (the
    /// directory's lock keeps a running service out).
    package func append(contentsOf leaves: [[UInt8]]) async throws -> UInt64 {
        for leaf in leaves where leaf.count > TileLayout.maximumEntryLength {
            throw OpenError(description: "a record of \(leaf.count) bytes is over the log's \(TileLayout.maximumEntryLength)")
        }
        let files = self.files
        return try await NIOThreadPool.singleton.runIfActive { try files.with { try $0.append(leaves) } }
    }

    /// The log's committed leaf hashes (32 bytes each), in order, each as `transform` makes it
    /// (an import keeps them compact).
    package func leafHashes<Hash: Sendable>(_ transform: @escaping @Sendable ([UInt8]) -> Hash) async throws -> [Hash] {
        let files = self.files
        return try await NIOThreadPool.singleton.runIfActive {
            try files.with { log in
                var hashes: [Hash] = []
                hashes.reserveCapacity(Int(log.size))
                var tile: UInt64 = 0
                while UInt64(hashes.count) < log.size {
                    let level = try log.hashTile(level: 0, index: tile)
                    hashes.append(contentsOf: level.prefix(Int(log.size) - hashes.count).map(transform))
                    tile += 1
                }
                return hashes
            }
        }
    }

    private func drain() async {
        while !self.pending.isEmpty {
            let batch = self.pending
            self.pending = []
            let files = self.files
            let leaves = batch.map(\.leaf)
            do {
                let first = try await NIOThreadPool.singleton.runIfActive { try files.with { try $0.append(leaves) } }
                for (offset, item) in batch.enumerated() { item.continuation.resume(returning: first + UInt64(offset)) }
            } catch {
                for item in batch { item.continuation.resume(throwing: error) }
            }
            await self.writeCheckpointIfDue()
        }
        self.draining = false
    }

    /// The signed checkpoint of the log's committed size (signed once per size). A checkpoint
    /// is written durably to `<directory>/checkpoint` before it is returned: opening the log
    /// checks that the log extends it.
    package func checkpoint() async throws -> String {
        let files = self.files
        let (size, root) = try await NIOThreadPool.singleton.runIfActive { files.with { ($0.size, $0.root) } }
        if let signed = self.signedCheckpoint, signed.size == size { return signed.note }
        let checkpoint = try Checkpoint(origin: self.configuration.signer.name, size: size, rootHash: root)
        let note = try SignedNote.sign(text: checkpoint.body, with: self.configuration.signer)
        if size != self.lastSigned {
            try await NIOThreadPool.singleton.runIfActive { try files.writeCheckpoint(size: size, note: Array(note.utf8)) }
            self.lastSigned = size
        }
        self.signedCheckpoint = (size, note)
        return note
    }

    private var lastSigned: UInt64?

    /// The inclusion proof of leaf `index` in the tree of `size` leaves.
    func inclusionProof(index: UInt64, size: UInt64) async throws -> [[UInt8]] {
        let files = self.files
        return try await NIOThreadPool.singleton.runIfActive { try files.with { try $0.inclusionProof(index: index, size: size) } }
    }

    /// The consistency proof from the tree of `first` leaves to the tree of `second`.
    func consistencyProof(first: UInt64, second: UInt64) async throws -> [[UInt8]] {
        let files = self.files
        return try await NIOThreadPool.singleton.runIfActive { try files.with { try $0.consistencyProof(first: first, second: second) } }
    }

    /// The committed size.
    func size() async throws -> UInt64 {
        let files = self.files
        return try await NIOThreadPool.singleton.runIfActive { files.with { $0.size } }
    }

    private func writeScheduledCheckpoint() async {
        self.checkpointFileScheduled = false
        self.lastCheckpointFile = nil
        await self.writeCheckpointIfDue()
    }

    /// Signs (and so writes `<directory>/checkpoint`) at most once per
    /// ``EvidenceLogConfiguration/checkpointInterval`` while records arrive.
    private func writeCheckpointIfDue() async {
        let now = ContinuousClock.now
        if let last = self.lastCheckpointFile, now - last < self.configuration.checkpointInterval {
            // Not due yet: write it when it is, so that the last records of a burst are covered.
            guard !self.checkpointFileScheduled else { return }
            self.checkpointFileScheduled = true
            let delay = self.configuration.checkpointInterval - (now - last)
            Task {
                try? await Task.sleep(for: delay)
                await self.writeScheduledCheckpoint()
            }
            return
        }
        self.lastCheckpointFile = now
        // Signing writes the checkpoint file; a failure leaves the last one in place (the next
        // batch or GET tries again).
        _ = try? await self.checkpoint()
    }
}
