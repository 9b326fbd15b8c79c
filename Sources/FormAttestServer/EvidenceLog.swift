//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

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
actor EvidenceLog {
    /// The directory's log, used by one thread at a time (appends and reads take the lock on
    /// NIO's blocking-IO pool).
    private final class Files: @unchecked Sendable {
        private let lock = NIOLock()
        private let log: TileLogDirectory

        init(_ log: TileLogDirectory) { self.log = log }

        func with<Result>(_ body: (TileLogDirectory) throws -> Result) rethrows -> Result {
            try self.lock.withLock { try body(self.log) }
        }
    }

    let configuration: EvidenceLogConfiguration
    private let files: Files
    private var pending: [(leaf: [UInt8], continuation: CheckedContinuation<UInt64, any Error>)] = []
    private var draining = false
    private var lastCheckpointFile: ContinuousClock.Instant?
    private var checkpointFileScheduled = false
    private var signedCheckpoint: (size: UInt64, note: String)?

    /// Opens (or creates) the log and recovers it to its last committed size.
    static func open(_ configuration: EvidenceLogConfiguration) async throws -> EvidenceLog {
        let directory = configuration.directory
        let files = try await NIOThreadPool.singleton.runIfActive { Files(try TileLogDirectory(directory: directory)) }
        return EvidenceLog(configuration: configuration, files: files)
    }

    private init(configuration: EvidenceLogConfiguration, files: Files) {
        self.configuration = configuration
        self.files = files
    }

    /// Appends one record's payload; returns its index once the log has it durably.
    func append(_ leaf: [UInt8]) async throws -> UInt64 {
        try await withCheckedThrowingContinuation { continuation in
            self.pending.append((leaf, continuation))
            if !self.draining {
                self.draining = true
                Task { await self.drain() }
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

    /// The signed checkpoint of the log's committed size (signed once per size).
    func checkpoint() async throws -> String {
        let files = self.files
        let (size, root) = try await NIOThreadPool.singleton.runIfActive { files.with { ($0.size, $0.root) } }
        if let signed = self.signedCheckpoint, signed.size == size { return signed.note }
        let checkpoint = try Checkpoint(origin: self.configuration.signer.name, size: size, rootHash: root)
        let note = try SignedNote.sign(text: checkpoint.body, with: self.configuration.signer)
        self.signedCheckpoint = (size, note)
        return note
    }

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

    /// Writes `<directory>/checkpoint` (atomically: a new file renamed over the old) at most once
    /// per ``EvidenceLogConfiguration/checkpointInterval``. A failure is logged by the caller's
    /// next request, never fatal: the log itself is committed.
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
        guard let note = try? await self.checkpoint() else { return }
        let path = self.configuration.directory + "/checkpoint"
        _ = try? await NIOThreadPool.singleton.runIfActive {
            try Data(note.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        }
    }
}
