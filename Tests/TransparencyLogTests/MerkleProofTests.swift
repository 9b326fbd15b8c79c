//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
import FormAttestTestSupport
import Testing
import TransparencyLog

// The vectors: the eight leaves, roots and proofs of Certificate Transparency's reference tests
// (RFC 6962's tree, the same hashing as RFC 9162 §2.1), as transparency-dev/merkle carries them
// in proof/verify_test.go (Apache-2.0). Leaf and proof indices here are 0-based.
enum RFC6962Vectors {
    static let leaves: [[UInt8]] = [
        [], [0x00], [0x10], [0x20, 0x21], [0x30, 0x31], [0x40, 0x41, 0x42, 0x43],
        [0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57],
        Array(0x60...0x6F),
    ]

    static let roots = [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ]

    struct Inclusion: Sendable, CustomTestStringConvertible {
        let index: UInt64
        let size: UInt64
        let proof: [String]
        var testDescription: String { "leaf \(index) of \(size)" }
    }

    static let inclusion = [
        Inclusion(
            index: 0, size: 8,
            proof: [
                "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
            ]),
        Inclusion(
            index: 5, size: 8,
            proof: [
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            ]),
        Inclusion(index: 2, size: 3, proof: ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
        Inclusion(
            index: 1, size: 5,
            proof: [
                "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            ]),
    ]

    struct Consistency: Sendable, CustomTestStringConvertible {
        let first: UInt64
        let second: UInt64
        let proof: [String]
        var testDescription: String { "\(first) → \(second)" }
    }

    static let consistency = [
        Consistency(
            first: 1, second: 8,
            proof: [
                "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
            ]),
        Consistency(
            first: 6, second: 8,
            proof: [
                "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            ]),
        Consistency(
            first: 2, second: 5,
            proof: [
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            ]),
        Consistency(
            first: 6, second: 7,
            proof: [
                "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            ]),
    ]

    static func root(_ size: UInt64) throws -> [UInt8] { try RealSample.hex(Self.roots[Int(size) - 1]) }
    static var leafHashes: [[UInt8]] { Self.leaves.map { MerkleHash.leaf($0) } }
}

/// A proof's hashes, computed from the leaves as a log computes them from its stored subtrees.
func proofHashes(_ ranges: [LeafRange], leafHashes: [[UInt8]]) -> [[UInt8]] {
    ranges.map { range in
        MerkleProof.hash(of: range) { (id: SubtreeID) -> [UInt8] in
            let begin = Int(id.firstLeaf)
            return referenceRoot(leafHashes[begin..<(begin + (1 << id.level))])
        }
    }
}

struct MerkleTreeTests {
    @Test("the hashes of the reference tree: its roots at sizes 1 to 8, from the compact range and the reference")
    func referenceRoots() throws {
        var range = CompactRange()
        #expect(range.root == MerkleHash.emptyRoot)
        #expect(MerkleHash.emptyRoot == (try RealSample.hex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")))
        for (offset, hash) in RFC6962Vectors.leafHashes.enumerated() {
            range.append(leafHash: hash)
            let size = UInt64(offset + 1)
            #expect(range.root == (try RFC6962Vectors.root(size)), "size \(size)")
            #expect(MerkleHash.root(leafHashes: Array(RFC6962Vectors.leafHashes.prefix(offset + 1))) == (try RFC6962Vectors.root(size)))
        }
    }

    @Test("a leaf hash is not a node hash: the prefixes separate them")
    func domainSeparation() {
        let left = MerkleHash.leaf([1])
        let right = MerkleHash.leaf([2])
        #expect(MerkleHash.leaf(left + right) != MerkleHash.node(left, right))
    }

    @Test("appending reports every perfect subtree it completes, with the reference's hash")
    func completedSubtrees() {
        let leafHashes = (0..<37).map { MerkleHash.leaf([UInt8($0)]) }
        var range = CompactRange()
        var seen = 0
        for hash in leafHashes {
            for (id, subtreeHash) in range.append(leafHash: hash) {
                let begin = Int(id.firstLeaf)
                #expect(subtreeHash == referenceRoot(leafHashes[begin..<(begin + (1 << id.level))]), "\(id)")
                seen += 1
            }
        }
        // A tree of n leaves has 2n − popcount(n) perfect subtrees (every node of every level).
        #expect(seen == 2 * 37 - 37.nonzeroBitCount)
        #expect(range.subtrees.map(\.level) == [5, 2, 0])
    }

    @Test("a right edge restores the range; one that does not fit its size is refused")
    func restore() throws {
        var range = CompactRange()
        for index in 0..<11 { range.append(leafHash: MerkleHash.leaf([UInt8(index)])) }
        let restored = try CompactRange(size: range.size, hashes: range.hashes)
        #expect(restored == range)
        #expect(throws: TransparencyLogError(code: .indexOutOfRange, reason: "")) {
            try CompactRange(size: range.size + 1, hashes: range.hashes)
        }
        #expect(throws: TransparencyLogError(code: .indexOutOfRange, reason: "")) {
            try CompactRange(size: range.size, hashes: range.hashes.dropLast() + [[0]])
        }
    }
}

struct InclusionProofTests {
    @Test("the reference proofs are generated exactly and verify", arguments: RFC6962Vectors.inclusion)
    func referenceProof(_ vector: RFC6962Vectors.Inclusion) throws {
        let expected = try vector.proof.map(RealSample.hex)
        let leafHashes = Array(RFC6962Vectors.leafHashes.prefix(Int(vector.size)))
        let ranges = try MerkleProof.inclusionRanges(index: vector.index, size: vector.size)
        #expect(proofHashes(ranges, leafHashes: leafHashes) == expected)
        try MerkleProof.verifyInclusion(
            expected, leafHash: leafHashes[Int(vector.index)], index: vector.index, size: vector.size,
            root: try RFC6962Vectors.root(vector.size))
    }

    @Test("every change to a reference proof is refused", arguments: RFC6962Vectors.inclusion)
    func corruptedProof(_ vector: RFC6962Vectors.Inclusion) throws {
        let proof = try vector.proof.map(RealSample.hex)
        let root = try RFC6962Vectors.root(vector.size)
        let leaf = RFC6962Vectors.leafHashes[Int(vector.index)]
        let someHash = try RealSample.hex("abacaba000000000000000000000000000000000000000000060061e00123456")
        var probes: [(String, [[UInt8]], [UInt8], UInt64, UInt64, [UInt8])] = [
            ("index − 1", proof, leaf, vector.index &- 1, vector.size, root),
            ("index + 1", proof, leaf, vector.index + 1, vector.size, root),
            ("index ^ 2", proof, leaf, vector.index ^ 2, vector.size, root),
            ("size × 2", proof, leaf, vector.index, vector.size * 2, root),
            ("size / 2", proof, leaf, vector.index, vector.size / 2, root),
            ("wrong leaf", proof, MerkleHash.leaf([0xFF]), vector.index, vector.size, root),
            ("empty-tree root", proof, leaf, vector.index, vector.size, MerkleHash.emptyRoot),
            ("another root", proof, leaf, vector.index, vector.size, someHash),
            ("trailing garbage", proof + [[]], leaf, vector.index, vector.size, root),
            ("trailing root", proof + [root], leaf, vector.index, vector.size, root),
            ("preceding garbage", [[]] + proof, leaf, vector.index, vector.size, root),
            ("preceding root", [root] + proof, leaf, vector.index, vector.size, root),
            ("removed component", Array(proof.dropLast()), leaf, vector.index, vector.size, root),
        ]
        for position in proof.indices {
            var flipped = proof
            flipped[position][0] ^= 8
            probes.append(("bit 3 of proof[\(position)]", flipped, leaf, vector.index, vector.size, root))
        }
        if proof.count > 1 {
            probes.append(("inserted component", [proof[0], someHash] + proof.dropFirst(), leaf, vector.index, vector.size, root))
        }
        for (name, proof, leaf, index, size, root) in probes {
            #expect(throws: TransparencyLogError.self, "\(name)") {
                try MerkleProof.verifyInclusion(proof, leafHash: leaf, index: index, size: size, root: root)
            }
        }
    }

    @Test("every leaf of every tree up to 70 leaves: the generated proof verifies, its neighbours' do not")
    func exhaustive() throws {
        let leafHashes = (0..<70).map { MerkleHash.leaf([UInt8($0), 0xA5]) }
        for size in 1...UInt64(70) {
            let prefix = Array(leafHashes.prefix(Int(size)))
            let root = referenceRoot(prefix[...])
            for index in 0..<size {
                let proof = proofHashes(try MerkleProof.inclusionRanges(index: index, size: size), leafHashes: prefix)
                try MerkleProof.verifyInclusion(proof, leafHash: prefix[Int(index)], index: index, size: size, root: root)
                if size > 1 {
                    let other = (index + 1) % size
                    #expect(throws: TransparencyLogError.self) {
                        try MerkleProof.verifyInclusion(proof, leafHash: prefix[Int(other)], index: other, size: size, root: root)
                    }
                }
            }
        }
    }

    @Test("an index outside the tree is refused before any hash is looked at")
    func outOfRange() {
        for (index, size) in [(UInt64(0), UInt64(0)), (1, 1), (5, 3), (0, UInt64.max)] {
            #expect(throws: TransparencyLogError(code: .indexOutOfRange, reason: "")) {
                try MerkleProof.inclusionRanges(index: index, size: size)
            }
            #expect(throws: TransparencyLogError(code: .indexOutOfRange, reason: "")) {
                try MerkleProof.verifyInclusion([], leafHash: MerkleHash.emptyRoot, index: index, size: size, root: MerkleHash.emptyRoot)
            }
        }
    }

    @Test("a one-leaf tree: the empty proof, and hashes of the wrong size refused")
    func singleLeaf() throws {
        let hash = MerkleHash.leaf(Array("data".utf8))
        try MerkleProof.verifyInclusion([], leafHash: hash, index: 0, size: 1, root: hash)
        #expect(throws: TransparencyLogError(code: .inclusionProofInvalid, reason: "")) {
            try MerkleProof.verifyInclusion([], leafHash: [], index: 0, size: 1, root: hash)
        }
        #expect(throws: TransparencyLogError(code: .inclusionProofInvalid, reason: "")) {
            try MerkleProof.verifyInclusion([], leafHash: hash, index: 0, size: 1, root: [])
        }
    }
}

struct ConsistencyProofTests {
    @Test("the reference proofs are generated exactly and verify", arguments: RFC6962Vectors.consistency)
    func referenceProof(_ vector: RFC6962Vectors.Consistency) throws {
        let expected = try vector.proof.map(RealSample.hex)
        let leafHashes = Array(RFC6962Vectors.leafHashes.prefix(Int(vector.second)))
        let ranges = try MerkleProof.consistencyRanges(first: vector.first, second: vector.second)
        #expect(proofHashes(ranges, leafHashes: leafHashes) == expected)
        try MerkleProof.verifyConsistency(
            expected, first: vector.first, second: vector.second,
            firstRoot: try RFC6962Vectors.root(vector.first), secondRoot: try RFC6962Vectors.root(vector.second))
    }

    @Test("every change to a reference proof is refused", arguments: RFC6962Vectors.consistency)
    func corruptedProof(_ vector: RFC6962Vectors.Consistency) throws {
        let proof = try vector.proof.map(RealSample.hex)
        let (first, second) = (vector.first, vector.second)
        let root1 = try RFC6962Vectors.root(first)
        let root2 = try RFC6962Vectors.root(second)
        let wrong = MerkleHash.leaf(Array("WrongRoot".utf8))
        var probes: [(String, [[UInt8]], UInt64, UInt64, [UInt8], [UInt8])] = [
            ("first − 1", proof, first - 1, second, root1, root2),
            ("first + 1", proof, first + 1, second, root1, root2),
            ("first ^ 2", proof, first ^ 2, second, root1, root2),
            ("second × 2", proof, first, second * 2, root1, root2),
            ("second / 2", proof, first, second / 2, root1, root2),
            ("wrong first root", proof, first, second, wrong, root2),
            ("wrong second root", proof, first, second, root1, wrong),
            ("swapped roots", proof, first, second, root2, root1),
            ("empty proof", [], first, second, root1, root2),
            ("trailing garbage", proof + [[]], first, second, root1, root2),
            ("trailing first root", proof + [root1], first, second, root1, root2),
            ("trailing second root", proof + [root2], first, second, root1, root2),
            ("preceding garbage", [[]] + proof, first, second, root1, root2),
            ("preceding first root", [root1] + proof, first, second, root1, root2),
            ("preceding second root", [root2] + proof, first, second, root1, root2),
            ("preceding proof[0]", [proof[0]] + proof, first, second, root1, root2),
            ("truncated", Array(proof.dropLast()), first, second, root1, root2),
        ]
        for position in proof.indices {
            var flipped = proof
            flipped[position][0] ^= 16
            probes.append(("bit 4 of proof[\(position)]", flipped, first, second, root1, root2))
        }
        for (name, proof, first, second, root1, root2) in probes {
            #expect(throws: TransparencyLogError.self, "\(name)") {
                try MerkleProof.verifyConsistency(proof, first: first, second: second, firstRoot: root1, secondRoot: root2)
            }
        }
    }

    @Test("every pair of sizes up to 48 leaves: the generated proof verifies, with another first size it does not")
    func exhaustive() throws {
        let leafHashes = (0..<48).map { MerkleHash.leaf([UInt8($0), 0x5A]) }
        let roots = (0...48).map { referenceRoot(leafHashes.prefix($0)) }
        for second in 1...UInt64(48) {
            for first in 1...second {
                let proof = proofHashes(try MerkleProof.consistencyRanges(first: first, second: second), leafHashes: leafHashes)
                try MerkleProof.verifyConsistency(
                    proof, first: first, second: second, firstRoot: roots[Int(first)], secondRoot: roots[Int(second)])
                if first < second, first > 1 {
                    #expect(throws: TransparencyLogError.self, "\(first) → \(second)") {
                        try MerkleProof.verifyConsistency(
                            proof, first: first - 1, second: second, firstRoot: roots[Int(first) - 1], secondRoot: roots[Int(second)])
                    }
                }
            }
        }
    }

    @Test("the edges: equal sizes need equal roots, the empty tree needs its own root, no time travel")
    func edges() throws {
        let root1 = MerkleHash.leaf([1])
        let root2 = MerkleHash.leaf([2])
        try MerkleProof.verifyConsistency([], first: 3, second: 3, firstRoot: root1, secondRoot: root1)
        try MerkleProof.verifyConsistency([], first: 0, second: 5, firstRoot: MerkleHash.emptyRoot, secondRoot: root2)
        #expect(throws: TransparencyLogError(code: .consistencyProofInvalid, reason: "")) {
            try MerkleProof.verifyConsistency([], first: 3, second: 3, firstRoot: root1, secondRoot: root2)
        }
        #expect(throws: TransparencyLogError(code: .consistencyProofInvalid, reason: "")) {
            try MerkleProof.verifyConsistency([root1], first: 3, second: 3, firstRoot: root1, secondRoot: root1)
        }
        #expect(throws: TransparencyLogError(code: .consistencyProofInvalid, reason: "")) {
            try MerkleProof.verifyConsistency([], first: 0, second: 5, firstRoot: root1, secondRoot: root2)
        }
        #expect(throws: TransparencyLogError(code: .indexOutOfRange, reason: "")) {
            try MerkleProof.verifyConsistency([], first: 2, second: 1, firstRoot: root1, secondRoot: root2)
        }
        #expect(throws: TransparencyLogError(code: .indexOutOfRange, reason: "")) {
            try MerkleProof.consistencyRanges(first: 9, second: 8)
        }
        #expect(try MerkleProof.consistencyRanges(first: 0, second: 8).isEmpty)
        #expect(try MerkleProof.consistencyRanges(first: 8, second: 8).isEmpty)
    }
}
