//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// The leaves `begin ..< end` of a tree, whose hash is RFC 9162's MTH(D[begin:end]).
///
/// Every range a proof names starts at a multiple of its largest power-of-two part, so its hash
/// is the right fold of the perfect subtrees ``subtrees`` lists: a log answers any proof from
/// the perfect subtrees it stored.
public struct LeafRange: Hashable, Sendable, CustomStringConvertible {
    public let begin: UInt64
    public let end: UInt64

    public init(begin: UInt64, end: UInt64) {
        precondition(begin <= end, "a range ends after it begins")
        self.begin = begin
        self.end = end
    }

    public var count: UInt64 { self.end - self.begin }

    /// The perfect subtrees whose right fold is the range's hash, largest first.
    public var subtrees: [SubtreeID] {
        var result: [SubtreeID] = []
        var begin = self.begin
        var remaining = self.count
        while remaining > 0 {
            let width = UInt64(1) << UInt64(63 - remaining.leadingZeroBitCount)
            let level = width.trailingZeroBitCount
            result.append(SubtreeID(level: level, index: begin >> UInt64(level)))
            begin += width
            remaining -= width
        }
        return result
    }

    public var description: String { "[\(self.begin), \(self.end))" }
}

/// RFC 9162 §2.1.3 and §2.1.4: which ranges a proof holds, and the verification of proofs.
///
/// Proof *generation* is split in two so that it does no IO: ``inclusionRanges(index:size:)`` and
/// ``consistencyRanges(first:second:)`` say which ranges' hashes the proof lists, in order, and
/// ``hash(of:subtreeHash:)`` folds a range from the stored perfect subtrees.
public enum MerkleProof {
    /// The largest size a tree may have (sizes travel as signed 64-bit integers in JSON and SQL).
    public static let maximumSize = UInt64(Int64.max)

    /// The ranges whose hashes form the inclusion proof of leaf `index` in a tree of `size`
    /// leaves (RFC 9162 §2.1.3.1, PATH), from the leaf's sibling up.
    public static func inclusionRanges(index: UInt64, size: UInt64) throws(TransparencyLogError) -> [LeafRange] {
        guard size <= Self.maximumSize, index < size else {
            throw TransparencyLogError(code: .indexOutOfRange, reason: "leaf \(index) is not in a tree of \(size) leaves")
        }
        var ranges: [LeafRange] = []
        Self.path(index: index, begin: 0, count: size, into: &ranges)
        return ranges
    }

    /// The ranges whose hashes form the consistency proof from a tree of `first` leaves to one of
    /// `second` (RFC 9162 §2.1.4.1, PROOF); empty when `first` is 0 or equals `second`.
    public static func consistencyRanges(first: UInt64, second: UInt64) throws(TransparencyLogError) -> [LeafRange] {
        guard second <= Self.maximumSize, first <= second else {
            throw TransparencyLogError(
                code: .indexOutOfRange,
                reason: "a tree of \(first) leaves cannot be a prefix of one of \(second)"
            )
        }
        guard first > 0, first < second else { return [] }
        var ranges: [LeafRange] = []
        Self.subproof(first: first, begin: 0, count: second, complete: true, into: &ranges)
        return ranges
    }

    /// The hash of `range`, folded from its perfect subtrees as `subtreeHash` returns them.
    public static func hash<Failure: Error>(
        of range: LeafRange,
        subtreeHash: (SubtreeID) throws(Failure) -> [UInt8]
    ) throws(Failure) -> [UInt8] {
        let subtrees = range.subtrees
        guard let last = subtrees.last else { return MerkleHash.emptyRoot }
        var hash = try subtreeHash(last)
        for id in subtrees.dropLast().reversed() {
            hash = MerkleHash.node(try subtreeHash(id), hash)
        }
        return hash
    }

    // PATH(m, D[begin ..< begin + count]): the sibling ranges, deepest first.
    private static func path(index: UInt64, begin: UInt64, count: UInt64, into ranges: inout [LeafRange]) {
        guard count > 1 else { return }
        let split = Self.largestPowerOfTwo(below: count)
        if index < split {
            Self.path(index: index, begin: begin, count: split, into: &ranges)
            ranges.append(LeafRange(begin: begin + split, end: begin + count))
        } else {
            Self.path(index: index - split, begin: begin + split, count: count - split, into: &ranges)
            ranges.append(LeafRange(begin: begin, end: begin + split))
        }
    }

    // SUBPROOF(m, D[begin ..< begin + count], b).
    private static func subproof(
        first: UInt64,
        begin: UInt64,
        count: UInt64,
        complete: Bool,
        into ranges: inout [LeafRange]
    ) {
        if first == count {
            if !complete { ranges.append(LeafRange(begin: begin, end: begin + count)) }
            return
        }
        let split = Self.largestPowerOfTwo(below: count)
        if first <= split {
            Self.subproof(first: first, begin: begin, count: split, complete: complete, into: &ranges)
            ranges.append(LeafRange(begin: begin + split, end: begin + count))
        } else {
            Self.subproof(first: first - split, begin: begin + split, count: count - split, complete: false, into: &ranges)
            ranges.append(LeafRange(begin: begin, end: begin + split))
        }
    }

    // The largest power of two strictly below `count` (count ≥ 2).
    private static func largestPowerOfTwo(below count: UInt64) -> UInt64 {
        UInt64(1) << UInt64(63 - (count - 1).leadingZeroBitCount)
    }

    // MARK: - Verification

    // Both algorithms' step "if LSB(fn) is not set, right-shift both fn and sn equally until
    // either LSB(fn) is set or fn is 0" (RFC 9162 §2.1.3.2 4.b.ii, §2.1.4.2 6.b.iii).
    private static func climbRightEdge(_ fn: inout UInt64, _ sn: inout UInt64) {
        while fn & 1 == 0, fn != 0 {
            fn >>= 1
            sn >>= 1
        }
    }

    /// The root that `proof` leads to from leaf `index` with hash `leafHash` in a tree of `size`
    /// leaves (RFC 9162 §2.1.3.2).
    public static func root(
        fromInclusionProof proof: [[UInt8]],
        leafHash: [UInt8],
        index: UInt64,
        size: UInt64
    ) throws(TransparencyLogError) -> [UInt8] {
        guard size <= Self.maximumSize, index < size else {
            throw TransparencyLogError(code: .indexOutOfRange, reason: "leaf \(index) is not in a tree of \(size) leaves")
        }
        guard leafHash.count == MerkleHash.size, proof.allSatisfy({ $0.count == MerkleHash.size }) else {
            throw TransparencyLogError(code: .inclusionProofInvalid, reason: "a hash of the proof is not \(MerkleHash.size) bytes")
        }
        var fn = index
        var sn = size - 1
        var root = leafHash
        for sibling in proof {
            guard sn != 0 else {
                throw TransparencyLogError(code: .inclusionProofInvalid, reason: "the proof is longer than the path")
            }
            if fn & 1 == 1 || fn == sn {
                root = MerkleHash.node(sibling, root)
                Self.climbRightEdge(&fn, &sn)
            } else {
                root = MerkleHash.node(root, sibling)
            }
            fn >>= 1
            sn >>= 1
        }
        guard sn == 0 else {
            throw TransparencyLogError(code: .inclusionProofInvalid, reason: "the proof is shorter than the path")
        }
        return root
    }

    /// Checks that `proof` shows leaf `index` with hash `leafHash` in the tree of `size` leaves
    /// whose root is `root`.
    public static func verifyInclusion(
        _ proof: [[UInt8]],
        leafHash: [UInt8],
        index: UInt64,
        size: UInt64,
        root: [UInt8]
    ) throws(TransparencyLogError) {
        let computed = try Self.root(fromInclusionProof: proof, leafHash: leafHash, index: index, size: size)
        guard computed == root else {
            throw TransparencyLogError(code: .inclusionProofInvalid, reason: "the proof leads to another root")
        }
    }

    /// Checks that `proof` shows the tree of `second` leaves with root `secondRoot` extends the
    /// tree of `first` leaves with root `firstRoot` (RFC 9162 §2.1.4.2). Equal sizes need equal
    /// roots and an empty proof; the empty tree (whose root must be SHA-256 of nothing) is a
    /// prefix of every tree, with an empty proof.
    public static func verifyConsistency(
        _ proof: [[UInt8]],
        first: UInt64,
        second: UInt64,
        firstRoot: [UInt8],
        secondRoot: [UInt8]
    ) throws(TransparencyLogError) {
        guard second <= Self.maximumSize, first <= second else {
            throw TransparencyLogError(
                code: .indexOutOfRange,
                reason: "a tree of \(first) leaves cannot be a prefix of one of \(second)"
            )
        }
        guard firstRoot.count == MerkleHash.size, secondRoot.count == MerkleHash.size,
            proof.allSatisfy({ $0.count == MerkleHash.size })
        else {
            throw TransparencyLogError(code: .consistencyProofInvalid, reason: "a hash is not \(MerkleHash.size) bytes")
        }
        if first == second || first == 0 {
            guard proof.isEmpty else {
                throw TransparencyLogError(code: .consistencyProofInvalid, reason: "the proof must be empty")
            }
            let holds = first == second ? firstRoot == secondRoot : firstRoot == MerkleHash.emptyRoot
            guard holds else {
                throw TransparencyLogError(code: .consistencyProofInvalid, reason: "the roots differ")
            }
            return
        }
        guard !proof.isEmpty else {
            throw TransparencyLogError(code: .consistencyProofInvalid, reason: "the proof is empty")
        }
        var path = proof
        if first & (first - 1) == 0 {
            path.insert(firstRoot, at: 0)
        }
        var fn = first - 1
        var sn = second - 1
        while fn & 1 == 1 {
            fn >>= 1
            sn >>= 1
        }
        var firstHash = path[0]
        var secondHash = path[0]
        for node in path.dropFirst() {
            guard sn != 0 else {
                throw TransparencyLogError(code: .consistencyProofInvalid, reason: "the proof is longer than the path")
            }
            if fn & 1 == 1 || fn == sn {
                firstHash = MerkleHash.node(node, firstHash)
                secondHash = MerkleHash.node(node, secondHash)
                Self.climbRightEdge(&fn, &sn)
            } else {
                secondHash = MerkleHash.node(secondHash, node)
            }
            fn >>= 1
            sn >>= 1
        }
        guard sn == 0, firstHash == firstRoot, secondHash == secondRoot else {
            throw TransparencyLogError(
                code: .consistencyProofInvalid,
                reason: "the proof does not lead to both roots"
            )
        }
    }
}
