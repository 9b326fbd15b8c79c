//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Foundation

/// A run of consecutive leaves of the evidence log, as the shared store holds it: the batch
/// starting at leaf ``first``, never changed once inserted.
public struct LogBatch: Sendable, Equatable {
    /// The index of the batch's first leaf; the batch is the only one that starts there.
    public var first: UInt64
    /// The leaves' data (each record's payload), in order.
    public var leaves: [[UInt8]]
    /// The ids (SHA-256) of the key registrations the leaves reference, each once.
    public var registrations: [[UInt8]]
    /// The root of the tree of the first `first + leaves.count` leaves: what an instance that
    /// copies the batch checks its own tree against.
    public var rootAfter: [UInt8]
    /// When the batch was inserted (for operators; not part of the log).
    public var insertedAt: Date

    /// The index just past the batch's last leaf.
    public var end: UInt64 { self.first + UInt64(self.leaves.count) }

    /// The most leaves one batch holds (and one copy step reads).
    public static let maximumLeaves = 256
    /// The most bytes of leaves one batch holds: a store's read of eight batches stays under
    /// MongoDB's 16 MB reply. A store refuses a larger batch.
    public static let maximumBytes = 1 << 20

    public init(first: UInt64, leaves: [[UInt8]], registrations: [[UInt8]], rootAfter: [UInt8], insertedAt: Date) {
        self.first = first
        self.leaves = leaves
        self.registrations = registrations
        self.rootAfter = rootAfter
        self.insertedAt = insertedAt
    }
}

/// Where a batch lies in the log and the root after it, without its leaves.
public struct LogBatchExtent: Sendable, Equatable {
    public var first: UInt64
    public var end: UInt64
    public var rootAfter: [UInt8]

    public init(first: UInt64, end: UInt64, rootAfter: [UInt8]) {
        self.first = first
        self.end = end
        self.rootAfter = rootAfter
    }
}

/// The shared log's high-water mark, kept with its status (r10 G1).
public struct LogHighWater: Sendable, Equatable {
    /// No instance has answered an index at or past it.
    public var answered: UInt64
    /// The lowest index at which an instance found the store's batches end below ``answered``
    /// (batches lost): an instance whose copy holds that index puts its batches back.
    public var hole: UInt64?

    public init(answered: UInt64, hole: UInt64? = nil) {
        self.answered = answered
        self.hole = hole
    }
}

/// A shared log's identity and state, set by the first instance that joins it.
public struct SharedLogStatus: Sendable, Equatable {
    /// A log being filled from one instance's directory.
    public struct Move: Sendable, Equatable {
        /// The moving log's leaves and its tree's root.
        public var size: UInt64
        public var root: [UInt8]

        public init(size: UInt64, root: [UInt8]) {
            self.size = size
            self.root = root
        }
    }

    /// The verifier key of the log's checkpoints (C2SP signed-note `name+hash+key`): an instance
    /// with another key (or pointed at another deployment's database) refuses to join.
    public var verifierKey: String
    /// nil: instances append and copy. Otherwise an instance is moving the log of its directory
    /// into the store: no instance appends until it is done, and only an instance holding the
    /// same log may take the move over (after the first one died).
    public var moving: Move?

    public init(verifierKey: String, moving: Move? = nil) {
        self.verifierKey = verifierKey
        self.moving = moving
    }
}

/// A store that sequences one evidence log for many service instances (issue 34): the store
/// decides which instance's batch gets which leaf indexes, by a unique insert.
///
/// An index exists only once the insert of the batch that holds it committed, and a batch is
/// never updated or deleted (but by its inserter, before anything of it was answered), so every instance that reads the first N leaves reads the same N:
/// the instances' trees cannot fork, and any two checkpoints signed over them extend one another.
/// Each instance keeps a copy of the log in its own directory (the tiles its proofs are read from),
/// filled from the store in index order.
public protocol SharedLogStore: Sendable {
    /// Inserts `batch`, unless a batch already starts at `batch.first`.
    /// - Returns: false when another batch holds that index (nothing written): the caller reads
    ///   the batches it missed and tries again at the new end.
    /// - Throws: ``StoreError/Code/unavailable``: the batch may or may not be in the log.
    func insertLogBatch(_ batch: LogBatch) async throws(StoreError) -> Bool

    /// Takes back the batch at `first` if its root is `rootAfter`: only for the instance that
    /// inserted it, when it found that another instance had answered those indexes (the store
    /// lost that instance's batch meanwhile, r11 H4) and answered nothing from its own.
    /// - Returns: false when no such batch is there (nothing deleted).
    func takeBackLogBatch(first: UInt64, rootAfter: [UInt8]) async throws(StoreError) -> Bool

    /// The batches that start at `first` or after, in index order, at most `limit`.
    func logBatches(from first: UInt64, limit: Int) async throws(StoreError) -> [LogBatch]

    /// Where the last batch that starts before `index` lies, or nil when none does; its leaves
    /// are not read.
    func logBatchExtent(before index: UInt64) async throws(StoreError) -> LogBatchExtent?

    /// Where the batches that start at `first` or after, and before `end`, lie, in index order,
    /// at most `limit`; their leaves are not read.
    func logBatchExtents(from first: UInt64, before end: UInt64, limit: Int) async throws(StoreError) -> [LogBatchExtent]

    /// The log's status, or nil when no instance has claimed it yet.
    func sharedLogStatus() async throws(StoreError) -> SharedLogStatus?

    /// Replaces the log's status with `new` if it is `old` (nil: no status), atomically: a claim
    /// (nil → moving or ready), the end of a move (moving → ready), a restore (ready → moving),
    /// a claim given back (moving → nil).
    /// - Returns: false when the status is not `old` (nothing written).
    func replaceSharedLogStatus(_ old: SharedLogStatus?, with new: SharedLogStatus?) async throws(StoreError) -> Bool

    /// The log's high-water mark: no instance has answered an index at or past it (0 when none
    /// has raised it, or the log has no status), and the hole an instance reported. The store's
    /// batches from index 0 reach at least this far unless the store lost some (a restore from
    /// an older backup, a stray writer): an instance whose copy ends below it after copying
    /// appends nothing, and reports where its copy ends.
    func logHighWater() async throws(StoreError) -> LogHighWater

    /// Raises the high-water mark to `end` if it is below (it never goes down), before an
    /// instance answers the indexes below `end`, in one atomic step with reading it. Written with
    /// the log's status.
    /// - Returns: the mark before: above the first index of the batch just inserted, it says
    ///   another instance answered indexes there first (or appended after it: the caller tells).
    /// - Throws: ``StoreError/Code/unavailable`` when the log has no status (nothing written).
    @discardableResult
    func raiseLogHighWater(to end: UInt64) async throws(StoreError) -> UInt64

    /// Reports that the store's batches from index 0 end at `index`, below the mark: the hole
    /// becomes the lower of `index` and the one reported before. Nothing without a status.
    func reportLogHole(at index: UInt64) async throws(StoreError)

    /// Clears a reported hole below `end`: the batches below `end` were put back.
    func clearLogHole(below end: UInt64) async throws(StoreError)

    /// Stores a key registration document under its id (SHA-256 of the bytes), once: a document
    /// already stored under the id is kept.
    func storeLogRegistration(id: [UInt8], document: [UInt8]) async throws(StoreError)

    /// The registration document stored under `id`, or nil. The caller checks its hash.
    func logRegistration(id: [UInt8]) async throws(StoreError) -> [UInt8]?
}
