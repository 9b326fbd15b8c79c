//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// Where a log's hashes and entries live, in the layout of C2SP tlog-tiles: tiles of height 8.
///
/// A hash tile of level `L` and index `N` holds up to 256 consecutive hashes of the tree's level
/// `8·L` (level-0 tiles hold leaf hashes; a level-1 tile the hashes of 256-leaf subtrees). An
/// entry bundle of index `N` holds the data of leaves `256·N ..< 256·N + 256`, each entry a
/// big-endian 16-bit length and its bytes. Tile indexes are written in groups of three digits,
/// every group but the last prefixed by `x` (`1234067` → `x001/x234/067`), so no directory holds
/// more than 1,000 names, whatever the log's size.
public enum TileLayout {
    /// The number of tree levels one tile spans.
    public static let height = 8
    /// The number of hashes (or entries) in a full tile.
    public static let width: UInt64 = 256
    /// The largest entry an entry bundle can hold.
    public static let maximumEntryLength = Int(UInt16.max)

    /// `N` written as tlog-tiles writes it: `x001/x234/067`.
    public static func indexPath(_ index: UInt64) -> String {
        var groups: [String] = []
        var rest = index
        repeat {
            let group = String(rest % 1000)
            groups.append(String(repeating: "0", count: 3 - group.count) + group)
            rest /= 1000
        } while rest > 0
        return groups.reversed().enumerated().map { $0.offset == groups.count - 1 ? $0.element : "x" + $0.element }
            .joined(separator: "/")
    }

    /// The path of the full hash tile `(level, index)`, relative to the log's directory.
    public static func hashTilePath(level: Int, index: UInt64) -> String { "tile/\(level)/\(Self.indexPath(index))" }

    /// The path of the full entry bundle `index`.
    public static func entryBundlePath(index: UInt64) -> String { "tile/entries/\(Self.indexPath(index))" }

    /// Where a perfect subtree's hash comes from: the hash tile `(tileLevel, tileIndex)`, whose
    /// hashes at `positions` (a power-of-two count, aligned) fold to it.
    public struct Location: Hashable, Sendable {
        public let tileLevel: Int
        public let tileIndex: UInt64
        public let positions: Range<Int>

        public init(tileLevel: Int, tileIndex: UInt64, positions: Range<Int>) {
            self.tileLevel = tileLevel
            self.tileIndex = tileIndex
            self.positions = positions
        }
    }

    /// The tile hashes that a perfect subtree's hash folds from.
    public static func location(of subtree: SubtreeID) -> Location {
        let tileLevel = subtree.level / Self.height
        let rest = subtree.level % Self.height
        let first = subtree.index << UInt64(rest)
        let start = Int(first % Self.width)
        return Location(tileLevel: tileLevel, tileIndex: first / Self.width, positions: start..<(start + (1 << rest)))
    }

    /// The hash of a perfect subtree from the `2^k` hashes of its level-`8·L` descendants.
    public static func fold(_ hashes: [[UInt8]]) -> [UInt8] {
        precondition(!hashes.isEmpty && hashes.count & (hashes.count - 1) == 0, "a perfect subtree folds 2^k hashes")
        var level = hashes
        while level.count > 1 {
            level = stride(from: 0, to: level.count, by: 2).map { MerkleHash.node(level[$0], level[$0 + 1]) }
        }
        return level[0]
    }

    /// The number of hashes the tile `(level, index)` holds in a tree of `size` leaves (256 when
    /// full, 0 when it does not exist yet).
    public static func tileWidth(level: Int, index: UInt64, treeSize size: UInt64) -> UInt64 {
        let nodes = size >> UInt64(Self.height * level)
        guard nodes > index * Self.width else { return 0 }
        return min(Self.width, nodes - index * Self.width)
    }
}
