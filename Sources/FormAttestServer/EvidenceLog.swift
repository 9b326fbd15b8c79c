//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

package import FormAttestEvidence
package import FormAttestFlows
import Foundation
import Logging
import Metrics
import NIOConcurrencyHelpers
import NIOPosix
public import TransparencyLog
import TransparencyLogFiles

/// The evidence log's settings (``EvidenceConfiguration/log``).
public struct EvidenceLogConfiguration: Sendable {
    /// The log's directory (C2SP tlog-tiles layout, `TileLogDirectory`).
    public var directory: String
    /// The checkpoints' signing key; its name is the log's origin.
    public var signer: NoteSigner
    /// How often a checkpoint is written beside the log (`<directory>/checkpoint`) while records
    /// arrive.
    public var checkpointInterval: Duration
    /// With a shared log: the least time between two reads of the store that checkpoint and proof
    /// requests ask for (a checkpoint may miss the other instances' records of that long).
    public var catchUpInterval: Duration

    public init(directory: String, signer: NoteSigner, checkpointInterval: Duration = .seconds(1), catchUpInterval: Duration = .milliseconds(100)) {
        self.directory = directory
        self.signer = signer
        self.checkpointInterval = checkpointInterval
        self.catchUpInterval = catchUpInterval
    }
}

/// The append-only evidence log (issue 34): every accepted form's record is a leaf, appended in
/// groups (one commit for all the records that arrived while the previous commit was syncing),
/// and checkpoints signed as C2SP signed notes commit to all of them.
///
/// The leaf's data is the record's payload (its RFC 8785 bytes, what the server's JWS signs), so
/// the leaf hash is SHA-256(0x00 ‖ payload): anyone holding a record can find its leaf.
///
/// With a ``SharedLogStore`` (MongoDB), many instances append to one log: the store sequences
/// the batches (an index is claimed by a unique insert, and a batch never changes), and the
/// directory is this instance's copy of the log, filled from the store in index order and
/// checked against each batch's root. A form's index is answered once its batch is in the store;
/// the copy follows. docs/architecture.md, "The evidence log across many instances".
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
    /// The store that sequences a log shared by many instances; nil: this directory is the log.
    private let shared: (any SharedLogStore)?
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
    private var pending: [(leaf: [UInt8], registration: [UInt8]?, continuation: CheckedContinuation<UInt64, any Error>)] = []
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
    ///
    /// With `shared`, the directory is this instance's copy of the shared log: it must be a
    /// prefix of what the store holds (checked against the root of the batch that ends where it
    /// ends), and is then brought up to date. A copy that is not is refused; a copy that holds
    /// leaves while the store holds none is the log moving into the store (an archive imported
    /// into a directory, a log that ran on one instance): its leaves and their key registrations
    /// are inserted first, in order.
    package static func open(_ configuration: EvidenceLogConfiguration, shared: (any SharedLogStore)? = nil) async throws -> EvidenceLog {
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
        let log = EvidenceLog(configuration: configuration, files: files, shared: shared)
        if let last { await log.remember(last) }
        if shared != nil { try await log.joinSharedLog() }
        return log
    }

    private func remember(_ checkpoint: Checkpoint) {
        self.lastSigned = checkpoint.size
    }

    private init(configuration: EvidenceLogConfiguration, files: Files, shared: (any SharedLogStore)?) {
        self.configuration = configuration
        self.files = files
        self.shared = shared
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
        // In the shared store too, before any record that references it is appended: every
        // instance's copy of the log can then fetch it.
        if let shared = self.shared { try await shared.storeLogRegistration(id: id, document: document) }
        if self.storedRegistrations.count >= Self.registrationCacheLimit { self.storedRegistrations.removeAll(keepingCapacity: true) }
        self.storedRegistrations.insert(id)
        return id
    }

    /// Appends one record's payload; returns its index once the log has it durably. A payload
    /// the log cannot hold is refused alone, never with the group it would have joined.
    /// `registration` is the id of the key registration the record references (stored first).
    package func append(_ leaf: [UInt8], registration: [UInt8]? = nil) async throws -> UInt64 {
        guard leaf.count <= TileLayout.maximumEntryLength else {
            throw OpenError(description: "a record of \(leaf.count) bytes is over the log's \(TileLayout.maximumEntryLength)")
        }
        return try await withCheckedThrowingContinuation { continuation in
            self.pending.append((leaf, registration, continuation))
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
        guard self.shared == nil else { throw OpenError(description: "an import appends to a log directory of its own, not to a shared log's copy") }
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
            let batch: [(leaf: [UInt8], registration: [UInt8]?, continuation: CheckedContinuation<UInt64, any Error>)]
            if self.shared == nil {
                batch = self.pending
                self.pending = []
            } else {
                // One store document: at most ``LogBatch/maximumLeaves`` leaves and ``LogBatch/maximumBytes`` bytes.
                var count = 0
                var bytes = 0
                while count < self.pending.count, count < LogBatch.maximumLeaves,
                    count == 0 || bytes + self.pending[count].leaf.count <= LogBatch.maximumBytes
                {
                    bytes += self.pending[count].leaf.count
                    count += 1
                }
                batch = Array(self.pending.prefix(count))
                self.pending.removeFirst(count)
            }
            let files = self.files
            let leaves = batch.map(\.leaf)
            do {
                let first: UInt64
                if let shared = self.shared {
                    var registrations: [[UInt8]] = []
                    for id in batch.compactMap(\.registration) where !registrations.contains(id) { registrations.append(id) }
                    first = try await self.exclusive { try await self.appendShared(leaves, registrations: registrations, to: shared) }
                } else {
                    first = try await NIOThreadPool.singleton.runIfActive { try files.with { try $0.append(leaves) } }
                }
                for (offset, item) in batch.enumerated() { item.continuation.resume(returning: first + UInt64(offset)) }
            } catch {
                for item in batch { item.continuation.resume(throwing: error) }
            }
            await self.writeCheckpointIfDue()
        }
        self.draining = false
    }

    // MARK: - A log shared by many instances

    /// Whether a step that changes the copy (an append, a catch-up) is running: they run one at
    /// a time, in arrival order.
    private var copying = false
    private var waitingToCopy: [CheckedContinuation<Void, Never>] = []
    /// When the last catch-up began: a request that asked for one before that is served by it.
    private var lastCatchUp: ContinuousClock.Instant?

    private func exclusive<Result>(_ body: () async throws -> Result) async throws -> Result {
        if self.copying { await withCheckedContinuation { self.waitingToCopy.append($0) } }
        self.copying = true
        defer {
            if self.waitingToCopy.isEmpty { self.copying = false } else { self.waitingToCopy.removeFirst().resume() }
        }
        return try await body()
    }

    /// Inserts `leaves` as the next batch of the shared log and returns its first index: at the
    /// copy's end, and when another instance's batch took that index, after copying what it
    /// missed, again. The copy takes the batch once the store has it; if that fails the batch is
    /// still the log's (the next catch-up copies it), and its index is answered.
    ///
    /// The store's high-water mark is read first: an insert at an index some instance already
    /// answered (the store lost the batch that held it) would answer it twice, so a copy that
    /// ends below the mark copies first, and appends nothing when it still does (r10 G1). The
    /// mark is raised past the batch before its indexes are answered.
    private func appendShared(_ leaves: [[UInt8]], registrations: [[UInt8]], to shared: any SharedLogStore) async throws -> UInt64 {
        if let forked = self.forked { throw OpenError(description: forked) }
        let files = self.files
        var putBack = false
        while true {
            let (first, root, rootAfter) = try await NIOThreadPool.singleton.runIfActive {
                files.with { ($0.size, $0.root, $0.root(appending: leaves)) }
            }
            // Two reads at once: the mark (and any hole reported), and the batch this one follows.
            async let mark = shared.logHighWater()
            async let previous = first == 0 ? nil : shared.logBatchExtent(before: first)
            let storeMark = try await mark
            let before = try await previous
            if let before, before.end > first {
                // The copy ends inside a batch (one put back): it is completed from it.
                self.lastCatchUp = ContinuousClock.now
                guard try await self.copyFromShared(shared) > 0 else {
                    throw OpenError(
                        description:
                            "the shared log's batch \(before.first)..<\(before.end) holds this copy's end (\(first)), and it was not completed")
                }
                continue
            }
            let holdsCopy = first == 0 || (before?.end == first && before?.rootAfter == root)
            // A hole another instance reported, below this copy's end: looked for at most once per
            // ``holeCheckInterval`` for one reported index (a report that stays, because no running
            // instance holds what is missing, would otherwise cost a scan on every append: r12 K3).
            var holeToFill = false
            if let hole = storeMark.hole, hole < first {
                let now = ContinuousClock.now
                if let checked = self.checkedHole, checked.hole == hole, now - checked.at < Self.holeCheckInterval {
                    holeToFill = false
                } else {
                    holeToFill = true
                    self.checkedHole = (hole, now)
                }
            }
            if storeMark.answered < self.highWater || !holdsCopy || holeToFill {
                // The store went back (restored from an older backup while instances ran), lost
                // this copy's last batches, or another instance reported a hole this copy holds:
                // this copy puts back what the store lacks below its end, once, before anything
                // is appended past it; a store it cannot mend takes no append from it.
                guard !putBack else {
                    throw OpenError(
                        description: storeMark.answered < self.highWater
                            ? "the shared log's high-water mark went back from \(self.highWater) to \(storeMark.answered), and the store holds this copy whole: the database was restored from an older backup while instances ran (another instance holds the lost batches: start it), or a mark raised by hand was set back (restart this instance); this instance appends nothing until then (docs/deployment.md)"
                            : "the shared store does not hold this copy's first \(first) leaves, and they could not be put back: this instance appends nothing (docs/deployment.md)"
                    )
                }
                putBack = true
                try await self.putBack(shared)
                continue
            }
            self.highWater = storeMark.answered
            if first < self.highWater {
                // Other instances answered indexes past this copy: copy them (an insert at `first`
                // would be refused, or would fill a hole the store lost).
                self.lastCatchUp = ContinuousClock.now
                _ = try await self.copyFromShared(shared)
                let size = try await NIOThreadPool.singleton.runIfActive { files.with { $0.size } }
                guard size >= self.highWater else {
                    // Asks the instances that hold the lost batches to put them back.
                    try? await shared.reportLogHole(at: size)
                    throw OpenError(description: Self.lostBatches(end: size, highWater: self.highWater))
                }
                continue
            }
            let batch = LogBatch(first: first, leaves: leaves, registrations: registrations, rootAfter: rootAfter, insertedAt: Date())
            if try await shared.insertLogBatch(batch) {
                // The mark before the raise tells whether another instance answered indexes of this
                // batch first: the store lost that batch between this instance's checks and its
                // insert (r11 H4). A mark inside (first, end] can only mean that; one past `end`
                // means that or appends after this batch, told apart by the store's batches from
                // `end` reaching it. Then nothing is answered, the copy does not take the batch,
                // and this instance appends and signs nothing more.
                let before = try await shared.raiseLogHighWater(to: batch.end)
                var overlapped = before > first && before <= batch.end
                if before > batch.end { overlapped = try await !self.batches(from: batch.end, reach: before, in: shared) }
                if overlapped {
                    // Its batch is taken back and the hole reported, so that the instance that
                    // answered those indexes puts its batch back: no instance copies this one.
                    let takenBack = (try? await shared.takeBackLogBatch(first: first, rootAfter: rootAfter)) ?? false
                    if takenBack { try? await shared.reportLogHole(at: first) }
                    let reason =
                        "indexes \(first)..<\(batch.end) of the shared log were answered by another instance before this one inserted its batch there (the store lost that batch meanwhile): this instance answers none of them\(takenBack ? ", took its batch back" : ", and could not take its batch back (delete it: docs/deployment.md)"), and appends and signs nothing more until it is restarted"
                    self.forked = reason
                    Logger(label: "formattest.evidence").critical("the shared evidence log forked", metadata: ["reason": "\(reason)"])
                    throw OpenError(description: reason)
                }
                _ = try? await NIOThreadPool.singleton.runIfActive { try files.with { try $0.append(leaves) } }
                self.highWater = max(self.highWater, before, batch.end)
                return first
            }
            // Another instance holds `first`: copy its batches, then try at the new end. Each
            // round copies at least one batch, so this ends. A log moving into the store (its
            // batches take the indexes) is waited for: nothing is appended in the middle of it.
            if let status = try await shared.sharedLogStatus(), status.moving != nil {
                throw OpenError(description: "a log is moving into the shared store: appends wait until it is done")
            }
            Counter(label: "formattest_evidence_log_index_taken_total").increment()
            self.lastCatchUp = ContinuousClock.now
            guard try await self.copyFromShared(shared) > 0 else {
                throw OpenError(description: "the shared log refused a batch at \(first), and holds none there to copy")
            }
        }
    }

    /// The shared log's high-water mark as this instance last saw or raised it: every index below
    /// it was answered by some instance.
    private var highWater: UInt64 = 0

    /// The reported hole this instance last looked for, and when.
    private var checkedHole: (hole: UInt64, at: ContinuousClock.Instant)?
    /// How often one reported hole is looked for.
    static let holeCheckInterval: Duration = .seconds(10)

    /// Why this instance found the shared log forked (another instance answered the indexes of a
    /// batch this one inserted): it appends and signs nothing more.
    private var forked: String?

    /// Whether the store's batches follow one another from `start` to `end` at least.
    private func batches(from start: UInt64, reach end: UInt64, in shared: any SharedLogStore) async throws -> Bool {
        var next = start
        while next < end {
            let extents = try await shared.logBatchExtents(from: next, before: end, limit: 1_000)
            guard let first = extents.first, first.first == next else { return false }
            for extent in extents {
                guard extent.first == next else { return false }
                next = extent.end
            }
        }
        return true
    }

    /// Puts back the batches the store lost below this copy's end (a database restored from an
    /// older backup, batches deleted), wherever they are, if every batch the store holds there is
    /// this copy's, with the log claimed as moving meanwhile so that no instance starts or inserts
    /// in the middle; then raises the high-water mark to the copy's end and clears a hole reported
    /// below it. A store that lacks nothing only has its mark raised.
    private func putBack(_ shared: any SharedLogStore, mayTakeOver: Bool = true) async throws {
        let files = self.files
        let (size, root) = try await NIOThreadPool.singleton.runIfActive { files.with { ($0.size, $0.root) } }
        guard size > 0 else { return }
        let notACopy = { (error: any Error) in Self.notACopy(self.configuration.directory, size: size, "\(error)") }
        let missing: [Range<UInt64>]
        do {
            missing = try await self.holes(below: size, in: shared)
        } catch let error as OpenError {
            throw notACopy(error)
        }
        if !missing.isEmpty {
            let ready = SharedLogStatus(verifierKey: self.configuration.signer.verifierKey)
            let restoring = SharedLogStatus(verifierKey: ready.verifierKey, moving: .init(size: size, root: root))
            guard try await shared.replaceSharedLogStatus(ready, with: restoring) else {
                // A put-back (or move) holds the claim. If it is of a log this copy holds (its size
                // and root), this instance does it too, so that a put-back whose instance died
                // (kill -9) does not hold the claim for ever (r12 K6): the same leaves make the
                // same batches, so two doing it at once insert nothing different.
                if mayTakeOver, let status = try await shared.sharedLogStatus(), let move = status.moving, status.verifierKey == ready.verifierKey,
                    move.size <= size, try await NIOThreadPool.singleton.runIfActive({ try files.with { try $0.root(size: move.size) } }) == move.root
                {
                    let end = try await self.moveIntoShared(size: move.size, shared: shared, inserting: true)
                    if end > 0 { try await shared.raiseLogHighWater(to: end) }
                    guard try await shared.replaceSharedLogStatus(status, with: ready) else {
                        throw OpenError(description: "the shared log's status changed while this instance took a put-back over")
                    }
                    Counter(label: "formattest_evidence_log_put_back_total").increment()
                    return try await self.putBack(shared, mayTakeOver: false)
                }
                throw OpenError(
                    description:
                        "another instance is putting batches back or moving a log in: this instance's batches wait (the next append tries again)")
            }
            do {
                // Raised to the end of what this instance put back, while the log is claimed: a
                // batch past that (one whose inserter has not raised yet) is its inserter's to mark,
                // which would otherwise take this raise for another instance's answer (r11 H4, K1).
                let end = try await self.moveIntoShared(size: size, shared: shared, inserting: true)
                if end > 0 {
                    try await shared.raiseLogHighWater(to: end)
                    self.highWater = max(self.highWater, end)
                }
            } catch {
                _ = try? await shared.replaceSharedLogStatus(restoring, with: ready)
                throw notACopy(error)
            }
            guard try await shared.replaceSharedLogStatus(restoring, with: ready) else {
                throw OpenError(description: "the shared log's status changed while this instance put its batches back")
            }
            Counter(label: "formattest_evidence_log_put_back_total").increment()
        }
        try await shared.clearLogHole(below: size)
    }

    /// The ranges below `size` where the store holds no batch. The batches on either side of each
    /// hole, and the last one, must end inside this copy with this copy's root at their end (read
    /// from the tiles), else this copy is not the store's log there: refused. (Only those: a root
    /// computed for every batch cost seconds on a log of a thousand batches, r12 K3.)
    private func holes(below size: UInt64, in shared: any SharedLogStore) async throws -> [Range<UInt64>] {
        let files = self.files
        var extents: [LogBatchExtent] = []
        var next: UInt64 = 0
        while next < size {
            let page = try await shared.logBatchExtents(from: next, before: size, limit: 1_000)
            extents += page
            guard page.count == 1_000, let last = page.last else { break }
            next = last.first + 1
        }
        var holes: [Range<UInt64>] = []
        var checked: [LogBatchExtent] = []
        var expected: UInt64 = 0
        for (position, extent) in extents.enumerated() {
            guard extent.end <= size, extent.first >= expected else {
                throw OpenError(
                    description: "the shared log's batch \(extent.first)..<\(extent.end) is not the log in \(self.configuration.directory)")
            }
            if extent.first > expected {
                holes.append(expected..<extent.first)
                if position > 0 { checked.append(extents[position - 1]) }
                checked.append(extent)
            }
            expected = extent.end
        }
        if expected < size { holes.append(expected..<size) }
        if let last = extents.last { checked.append(last) }
        for extent in checked {
            let rootThere = try await NIOThreadPool.singleton.runIfActive { try files.with { try $0.root(size: extent.end) } }
            guard extent.rootAfter == rootThere else {
                throw OpenError(
                    description: "the shared log's batch \(extent.first)..<\(extent.end) is not the log in \(self.configuration.directory)")
            }
        }
        return holes
    }

    /// Why a copy that ends at `end` below the store's high-water mark appends nothing.
    private static func lostBatches(end: UInt64, highWater: UInt64) -> String {
        "the shared store's batches end at \(end), but indexes up to \(highWater) were answered: the store lost batches (a restore from an older backup, a stray writer), and an append here would answer them twice; a running instance that holds them puts them back at its next append (asked by the hole this instance reported); if none runs, start the one holding the longest copy (docs/deployment.md)"
    }

    /// Copies the shared log's batches past the copy's end, in order; returns how many leaves.
    /// Each batch must start where the copy ends and its root must be the copy's after it, and
    /// the key registrations it references are fetched (and checked against their ids) first:
    /// a batch that does not fit is refused, and the copy stops there.
    private func copyFromShared(_ shared: any SharedLogStore) async throws -> UInt64 {
        let files = self.files
        var copied: UInt64 = 0
        while true {
            let size = try await NIOThreadPool.singleton.runIfActive { files.with { $0.size } }
            let batches = try await shared.logBatches(from: size, limit: 8)
            if batches.first?.first != size {
                // No batch starts where the copy ends: one may hold its end inside it.
                let completed = try await self.completeBatch(shared)
                if completed > 0 {
                    copied += completed
                    continue
                }
            }
            var end = size
            for batch in batches {
                // The log is the batches that follow one another from index 0: a batch past a gap
                // (a stray document far ahead) is not part of it, and the copy ends before it.
                guard batch.first == end else { return copied }
                for id in batch.registrations { try await self.fetchRegistration(id, from: shared) }
                let leaves = batch.leaves
                try await NIOThreadPool.singleton.runIfActive {
                    try files.with { log in
                        guard log.root(appending: leaves) == batch.rootAfter else {
                            throw OpenError(
                                description:
                                    "the shared log's batch at \(batch.first) does not hash to the root it states: this copy and the store disagree")
                        }
                        _ = try log.append(leaves)
                    }
                }
                end = batch.end
                copied += UInt64(leaves.count)
            }
            if batches.count < 8 { return copied }
        }
    }

    /// Completes a copy that ends inside one of the store's batches (a put-back cuts the leaves
    /// it puts back into batches of its own, which other copies may end inside): the batch's
    /// leaves up to the copy's end must be the copy's, byte for byte, and the copy's root after
    /// the rest the batch's. Returns the leaves appended: 0 when no batch holds the copy's end
    /// inside it.
    private func completeBatch(_ shared: any SharedLogStore) async throws -> UInt64 {
        let files = self.files
        let size = try await NIOThreadPool.singleton.runIfActive { files.with { $0.size } }
        guard size > 0, let extent = try await shared.logBatchExtent(before: size), extent.end > size,
            let batch = try await shared.logBatches(from: extent.first, limit: 1).first, batch.first == extent.first, batch.end > size
        else { return 0 }
        for id in batch.registrations { try await self.fetchRegistration(id, from: shared) }
        let held = Array(batch.leaves[..<Int(size - batch.first)])
        let rest = Array(batch.leaves[Int(size - batch.first)...])
        try await NIOThreadPool.singleton.runIfActive {
            try files.with { log in
                guard try Self.batchLeaves(of: log, from: batch.first, upTo: size) == held, log.root(appending: rest) == batch.rootAfter else {
                    throw OpenError(
                        description:
                            "the shared log's batch \(batch.first)..<\(batch.end) holds this copy's end (\(size)) but not its leaves: this copy and the store disagree"
                    )
                }
                _ = try log.append(rest)
            }
        }
        return UInt64(rest.count)
    }

    /// The copy's leaves from `start`, up to `end`, at most ``LogBatch/maximumLeaves`` of them and
    /// ``LogBatch/maximumBytes`` bytes (at least one): a batch as the group commit makes them. Each
    /// entry bundle is read once (`entry(at:)` reads its whole file).
    private static func batchLeaves(of log: TileLogDirectory, from start: UInt64, upTo end: UInt64) throws -> [[UInt8]] {
        var leaves: [[UInt8]] = []
        var bytes = 0
        var index = start
        var bundle: (index: UInt64, entries: [[UInt8]])?
        while index < end, leaves.count < LogBatch.maximumLeaves {
            if bundle?.index != index / TileLayout.width {
                bundle = (index / TileLayout.width, try log.entryBundle(index / TileLayout.width))
            }
            let leaf = bundle!.entries[Int(index % TileLayout.width)]
            guard leaves.isEmpty || bytes + leaf.count <= LogBatch.maximumBytes else { break }
            leaves.append(leaf)
            bytes += leaf.count
            index += 1
        }
        return leaves
    }

    /// Why a directory is refused as a copy of the shared log.
    private static func notACopy(_ directory: String, size: UInt64, _ reason: String) -> OpenError {
        OpenError(
            description:
                "the log in \(directory) (\(size) leaves) is not a copy of the shared log's first \(size) (\(reason)): refusing to fork it; move the directory away to copy the shared log afresh"
        )
    }

    /// Stores in this copy a key registration another instance stored in the shared store.
    private func fetchRegistration(_ id: [UInt8], from shared: any SharedLogStore) async throws {
        if self.storedRegistrations.contains(id) { return }
        let registrations = self.registrations
        if try await NIOThreadPool.singleton.runIfActive({ try registrations.read(id) }) == nil {
            guard let document = try await shared.logRegistration(id: id), ContentAddressedDirectory.id(of: document) == id else {
                throw OpenError(
                    description:
                        "the shared log references a key registration the store does not hold intact (\(ContentAddressedDirectory(directory: "").relativePath(of: id))): put it back from any instance's registrations directory (docs/deployment.md)"
                )
            }
            _ = try await NIOThreadPool.singleton.runIfActive { try registrations.store(document) }
        }
        if self.storedRegistrations.count >= Self.registrationCacheLimit { self.storedRegistrations.removeAll(keepingCapacity: true) }
        self.storedRegistrations.insert(id)
    }

    /// Brings the copy up to date with the shared log, unless a catch-up began after `asked`.
    private func catchUp(askedAt asked: ContinuousClock.Instant) async throws {
        guard let shared = self.shared else { return }
        try await self.exclusive {
            // One read of the store serves every request that arrived before it began, and at most
            // one begins each ``EvidenceLogConfiguration/catchUpInterval``: a flood of proof requests for trees the copy has
            // not reached costs the store ten reads a second, not one a request.
            if let last = self.lastCatchUp, last >= asked || ContinuousClock.now - last < self.configuration.catchUpInterval { return }
            self.lastCatchUp = ContinuousClock.now
            _ = try await self.copyFromShared(shared)
        }
    }

    /// At opening: checks that the copy is a prefix of the shared log (or moves it into a shared
    /// log no instance has claimed), then copies what it lacks.
    ///
    /// The first instance to join claims the log (``SharedLogStatus``) with its checkpoint key
    /// (an instance with another key is refused): ready when its directory is empty; moving when it
    /// holds leaves, which it then inserts in order before the log takes appends. While a log is moving no other instance starts on it (its directory is not
    /// that log), so nothing is appended in the middle of a move; an instance holding the same log
    /// (the same size and root: the mover restarted after a crash, or a copy of its directory) takes
    /// the move over where it stopped.
    private func joinSharedLog() async throws {
        guard let shared = self.shared else { return }
        let files = self.files
        let (size, root) = try await NIOThreadPool.singleton.runIfActive { files.with { ($0.size, $0.root) } }
        let verifierKey = self.configuration.signer.verifierKey
        let mine = SharedLogStatus(verifierKey: verifierKey, moving: size == 0 ? nil : .init(size: size, root: root))
        var status = try await shared.sharedLogStatus()
        if status == nil {
            // A store that holds batches but no status lost it (or was written by hand): putting
            // it back is an operator's decision, not the first instance's to guess.
            if try await shared.logBatchExtent(before: UInt64(Int64.max)) != nil {
                throw OpenError(
                    description:
                        "the shared store holds evidence log batches but no log status (the evidence_log_status collection): it was removed or lost; put it back (docs/deployment.md) before starting"
                )
            }
            // Claim first, then read the directory: no other instance starts meanwhile. A damaged
            // directory gives its claim back.
            if try await shared.replaceSharedLogStatus(nil, with: mine) {
                status = mine
                if size > 0 {
                    do {
                        try await self.moveIntoShared(size: size, shared: shared, inserting: false)
                    } catch {
                        _ = try? await shared.replaceSharedLogStatus(mine, with: nil)
                        throw error
                    }
                }
            } else {
                status = try await shared.sharedLogStatus()
            }
        }
        guard let status, status.verifierKey == verifierKey else {
            throw OpenError(
                description:
                    "the shared log in this database is signed with another key (\(status?.verifierKey ?? "none")), not \(verifierKey): every instance of a log loads the same --evidence-log-key; is this the right database?"
            )
        }
        let ready = SharedLogStatus(verifierKey: verifierKey)
        if let move = status.moving {
            guard move == mine.moving else {
                throw OpenError(
                    description:
                        "another instance is moving a log of \(move.size) leaves into the shared store, and the log in \(self.configuration.directory) (\(size) leaves) is not that log: start this instance again once the move is done"
                )
            }
            try await self.moveIntoShared(size: size, shared: shared, inserting: true)
            try await shared.raiseLogHighWater(to: size)
            guard try await shared.replaceSharedLogStatus(status, with: ready) else {
                throw OpenError(description: "the shared log's status changed while this instance moved its log in")
            }
        } else if size > 0 {
            let notACopy = { (reason: String) in Self.notACopy(self.configuration.directory, size: size, reason) }
            // A copy that ends inside a batch (one a put-back made) is completed from it first.
            do {
                _ = try await self.completeBatch(shared)
            } catch let error as OpenError {
                throw notACopy(error.description)
            }
            let (size, root) = try await NIOThreadPool.singleton.runIfActive { files.with { ($0.size, $0.root) } }
            let last = try await shared.logBatchExtent(before: size)
            if let last, last.end == size, last.rootAfter != root {
                throw notACopy("its batch before \(size) ends there with another root")
            }
            let hole = try await shared.logHighWater().hole
            if last?.end != size || (hole.map { $0 < size } ?? false) {
                // The store lacks batches this copy holds (a database restored from an older
                // backup, batches deleted): this copy puts them back.
                try await self.putBack(shared)
            }
        }
        self.lastCatchUp = ContinuousClock.now
        // A batch this copy refuses (another writer's) stops the log, not the service: it starts,
        // as the instances already running go on, with every append refused and counted, and says
        // why (``stopped``). So does a store that lost batches some instance answered: the mark is
        // read before the copy, so every batch below it is in the store unless lost.
        do {
            self.highWater = max(self.highWater, try await shared.logHighWater().answered)
            _ = try await self.exclusive { try await self.copyFromShared(shared) }
            let copied = try await NIOThreadPool.singleton.runIfActive { files.with { $0.size } }
            // Only the instance that inserted a batch, or one putting batches back or moving a
            // log in (while it holds the log's claim), raises the mark: a raise by a copy could
            // look to an insert on its way like another instance's answer of its batch.
            if copied < self.highWater {
                // Until an instance that holds them puts them back (asked by the hole reported).
                try await shared.reportLogHole(at: copied)
                self.stopped = Self.lostBatches(end: copied, highWater: self.highWater)
            }
        } catch {
            self.stopped = "\(error)"
        }
    }

    /// Why the copy stopped at opening (a batch it refused), or nil.
    package private(set) var stopped: String?

    /// Inserts the copy's leaves the shared log lacks below `size` (a move from where an earlier
    /// one stopped, or batches put back into the holes the store has), in batches, each with the
    /// key registrations its records reference. The whole copy is read: every batch's leaves are
    /// hashed and checked against the directory's tree (its tiles) before it is inserted, so a
    /// damaged entry is refused here, never handed to the other instances. Without `inserting`,
    /// it only reads and checks.
    /// - Returns: the end of the last batch it inserted, 0 when none.
    @discardableResult
    private func moveIntoShared(size: UInt64, shared: any SharedLogStore, inserting: Bool) async throws -> UInt64 {
        let files = self.files
        let registrations = self.registrations
        // Where the store holds nothing below `size`; a batch never crosses a hole's edge.
        let holes = inserting ? try await self.holes(below: size, in: shared) : []
        let edges = holes.flatMap { [$0.lowerBound, $0.upperBound] }
        var moved = CompactRange()
        var first: UInt64 = 0
        var inserted: UInt64 = 0
        while first < size {
            // A batch as the group commit makes them: at most ``LogBatch/maximumLeaves`` leaves and ``LogBatch/maximumBytes`` bytes.
            // Leaves the store holds already are read (and hashed), not inserted.
            let start = first
            let end = edges.first { $0 > start } ?? size
            let (leaves, tilesRoot) = try await NIOThreadPool.singleton.runIfActive {
                try files.with { log in
                    let leaves = try Self.batchLeaves(of: log, from: start, upTo: end)
                    return (leaves, try log.root(size: start + UInt64(leaves.count)))
                }
            }
            for leaf in leaves { moved.append(leafHash: MerkleHash.leaf(leaf)) }
            guard moved.root == tilesRoot else {
                throw OpenError(
                    description:
                        "the log in \(self.configuration.directory) is damaged: its entries \(first)..<\(moved.size) do not hash to its tree ('formattest evidence audit' names the leaf): refusing to move it"
                )
            }
            let count = UInt64(leaves.count)
            defer { first += count }
            guard holes.contains(where: { $0.contains(start) }) else { continue }
            var ids: [[UInt8]] = []
            for leaf in leaves {
                guard let id = try EvidenceRecord.registrationID(inPayload: leaf), !ids.contains(id) else { continue }
                guard let document = try await NIOThreadPool.singleton.runIfActive({ try registrations.read(id) }),
                    ContentAddressedDirectory.id(of: document) == id
                else {
                    throw OpenError(
                        description: "a record of the log in \(self.configuration.directory) references a key registration that is missing or altered"
                    )
                }
                try await shared.storeLogRegistration(id: id, document: document)
                ids.append(id)
            }
            let batch = LogBatch(first: first, leaves: leaves, registrations: ids, rootAfter: moved.root, insertedAt: Date())
            if try await shared.insertLogBatch(batch) {
                inserted = batch.end
                continue
            }
            // Another instance holding this log took the move over at the same time: its batch
            // there must be this one.
            guard let other = try await shared.logBatches(from: first, limit: 1).first, other.first == first, other.leaves == leaves,
                other.rootAfter == moved.root
            else {
                throw OpenError(
                    description:
                        "the shared log's batch at \(first) is not the log being moved from \(self.configuration.directory): refusing to fork it")
            }
        }
        return inserted
    }

    /// The signed checkpoint of the log's committed size (signed once per size). A checkpoint
    /// is written durably to `<directory>/checkpoint` before it is returned: opening the log
    /// checks that the log extends it.
    /// With a shared log, the copy is first brought up to date (unless `catchingUp` is false: the
    /// group commit's own checkpoints), so that the checkpoint covers every instance's records.
    package func checkpoint(catchingUp: Bool = true) async throws -> String {
        if let forked = self.forked { throw OpenError(description: forked) }
        if catchingUp { try await self.catchUp(askedAt: ContinuousClock.now) }
        let files = self.files
        let (size, root) = try await NIOThreadPool.singleton.runIfActive { files.with { ($0.size, $0.root) } }
        // A copy the store's lost batches hold below the mark is not the current log (503).
        if catchingUp, size < self.highWater { throw OpenError(description: Self.lostBatches(end: size, highWater: self.highWater)) }
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
    package func inclusionProof(index: UInt64, size: UInt64) async throws -> [[UInt8]] {
        let files = self.files
        return try await NIOThreadPool.singleton.runIfActive { try files.with { try $0.inclusionProof(index: index, size: size) } }
    }

    /// The consistency proof from the tree of `first` leaves to the tree of `second`.
    package func consistencyProof(first: UInt64, second: UInt64) async throws -> [[UInt8]] {
        let files = self.files
        return try await NIOThreadPool.singleton.runIfActive { try files.with { try $0.consistencyProof(first: first, second: second) } }
    }

    /// The committed size.
    package func size() async throws -> UInt64 {
        let files = self.files
        return try await NIOThreadPool.singleton.runIfActive { files.with { $0.size } }
    }

    /// The committed size, brought up to date with the shared log first when it is below `wanted`
    /// (a proof for a tree another instance's checkpoint names).
    package func size(atLeast wanted: UInt64) async throws -> UInt64 {
        let asked = ContinuousClock.now
        let size = try await self.size()
        guard size < wanted, self.shared != nil else { return size }
        try await self.catchUp(askedAt: asked)
        let caughtUp = try await self.size()
        // A catch-up the interval held back: wait for the next one (at most the interval), so that
        // a tree another instance signed is not called uncommitted for 100 ms.
        guard caughtUp < wanted, let last = self.lastCatchUp, last < asked else { return try self.current(caughtUp, wanted: wanted) }
        try await Task.sleep(until: last + self.configuration.catchUpInterval, clock: .continuous)
        try await self.catchUp(askedAt: ContinuousClock.now)
        return try self.current(try await self.size(), wanted: wanted)
    }

    /// `size`, unless the copy ends below both `wanted` and the store's mark: the store lost
    /// batches (r10 G1), and a tree another instance signed is not "uncommitted" (503, not 400).
    private func current(_ size: UInt64, wanted: UInt64) throws -> UInt64 {
        if let forked = self.forked { throw OpenError(description: forked) }
        guard size >= wanted || size >= self.highWater else { throw OpenError(description: Self.lostBatches(end: size, highWater: self.highWater)) }
        return size
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
        _ = try? await self.checkpoint(catchingUp: false)
    }
}
