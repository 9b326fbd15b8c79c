//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// A perfect subtree of the log: the `2^level` leaves from `index << level`.
///
/// Level 0 is a leaf; the subtree `(level, index)` hashes the subtrees `(level − 1, 2·index)` and
/// `(level − 1, 2·index + 1)`. A log stores these (in tiles or rows) to answer proofs.
public struct SubtreeID: Hashable, Sendable, CustomStringConvertible {
    /// The height: the subtree has `2^level` leaves.
    public let level: Int
    /// The position among the subtrees of its level, from 0.
    public let index: UInt64

    public init(level: Int, index: UInt64) {
        self.level = level
        self.index = index
    }

    /// The first leaf the subtree covers.
    public var firstLeaf: UInt64 { self.index << UInt64(self.level) }

    public var description: String { "(\(self.level), \(self.index))" }
}

/// The right edge of a growing tree: the roots of the perfect subtrees that its leaves form,
/// largest first (one per set bit of the size). Appending a leaf merges equal-sized subtrees, so a
/// log keeps its root current in O(log n) memory and time per leaf, whatever its size.
public struct CompactRange: Sendable, Equatable {
    /// The number of leaves appended.
    public private(set) var size: UInt64
    /// The perfect subtrees' hashes, largest (leftmost) first.
    public private(set) var hashes: [[UInt8]]

    /// The empty tree.
    public init() {
        self.size = 0
        self.hashes = []
    }

    /// A tree of `size` leaves from its right edge, as ``hashes`` wrote it: one hash per set bit
    /// of `size`, each ``MerkleHash/size`` bytes.
    public init(size: UInt64, hashes: [[UInt8]]) throws(TransparencyLogError) {
        guard size <= UInt64(Int64.max), hashes.count == size.nonzeroBitCount,
            hashes.allSatisfy({ $0.count == MerkleHash.size })
        else {
            throw TransparencyLogError(
                code: .indexOutOfRange,
                reason: "a right edge of \(hashes.count) hashes does not fit a tree of \(size) leaves"
            )
        }
        self.size = size
        self.hashes = hashes
    }

    /// The root of the tree so far (``MerkleHash/emptyRoot`` when empty).
    public var root: [UInt8] {
        guard var root = self.hashes.last else { return MerkleHash.emptyRoot }
        for hash in self.hashes.dropLast().reversed() {
            root = MerkleHash.node(hash, root)
        }
        return root
    }

    /// The perfect subtrees of the right edge, largest first, with their positions.
    public var subtrees: [SubtreeID] {
        LeafRange(begin: 0, end: self.size).subtrees
    }

    /// Appends a leaf by its hash and returns every perfect subtree it completed, the leaf first
    /// and the largest last (what a log stores to answer proofs later).
    @discardableResult
    public mutating func append(leafHash: [UInt8]) -> [(id: SubtreeID, hash: [UInt8])] {
        precondition(leafHash.count == MerkleHash.size, "a leaf hash has \(MerkleHash.size) bytes")
        let leafIndex = self.size
        var completed: [(id: SubtreeID, hash: [UInt8])] = [(SubtreeID(level: 0, index: leafIndex), leafHash)]
        var hash = leafHash
        var level = 0
        while (leafIndex >> UInt64(level)) & 1 == 1 {
            hash = MerkleHash.node(self.hashes.removeLast(), hash)
            level += 1
            completed.append((SubtreeID(level: level, index: leafIndex >> UInt64(level)), hash))
        }
        self.hashes.append(hash)
        self.size += 1
        return completed
    }
}
