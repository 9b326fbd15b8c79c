//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto

/// The hashes of an RFC 9162 Merkle tree with SHA-256 (§2.1.1): a leaf is
/// SHA-256(0x00 ‖ data), an interior node SHA-256(0x01 ‖ left ‖ right), and the empty tree's
/// root is SHA-256 of nothing. The prefixes keep a leaf from passing for a node
/// (second-preimage resistance).
public enum MerkleHash {
    /// The size of every hash in the tree, in bytes.
    public static let size = 32

    /// The hash of a leaf whose data is `data`.
    public static func leaf(_ data: some Sequence<UInt8>) -> [UInt8] {
        var hasher = SHA256()
        hasher.update(data: [0x00])
        hasher.update(data: Array(data))
        return Array(hasher.finalize())
    }

    /// The hash of the interior node whose children hash to `left` and `right`.
    public static func node(_ left: [UInt8], _ right: [UInt8]) -> [UInt8] {
        var hasher = SHA256()
        hasher.update(data: [0x01])
        hasher.update(data: left)
        hasher.update(data: right)
        return Array(hasher.finalize())
    }

    /// The root of the tree with no leaves: SHA-256 of the empty string.
    public static var emptyRoot: [UInt8] { Array(SHA256.hash(data: [UInt8]())) }

    /// The root of the tree over `leafHashes`, computed in memory (tests, small trees); a log
    /// of any size computes it with a ``CompactRange`` or from stored subtrees.
    public static func root(leafHashes: [[UInt8]]) -> [UInt8] {
        var range = CompactRange()
        for hash in leafHashes {
            range.append(leafHash: hash)
        }
        return range.root
    }
}
