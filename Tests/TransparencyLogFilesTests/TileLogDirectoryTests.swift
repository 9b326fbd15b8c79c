//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
import FormAttestTestSupport
import Foundation
import Testing
import TransparencyLog
import TransparencyLogFiles

struct TileLayoutTests {
    @Test(
        "tile indexes are written in groups of three digits, x-prefixed but the last",
        arguments: [(UInt64(0), "000"), (5, "005"), (999, "999"), (1000, "x001/000"), (1_234_067, "x001/x234/067")])
    func indexPath(_ index: UInt64, _ path: String) {
        #expect(TileLayout.indexPath(index) == path)
    }

    @Test("a subtree's hash comes from the tile of its level rounded down to a multiple of 8")
    func location() {
        #expect(TileLayout.location(of: SubtreeID(level: 0, index: 300)) == .init(tileLevel: 0, tileIndex: 1, positions: 44..<45))
        #expect(TileLayout.location(of: SubtreeID(level: 3, index: 33)) == .init(tileLevel: 0, tileIndex: 1, positions: 8..<16))
        #expect(TileLayout.location(of: SubtreeID(level: 8, index: 2)) == .init(tileLevel: 1, tileIndex: 0, positions: 2..<3))
        #expect(TileLayout.location(of: SubtreeID(level: 17, index: 1)) == .init(tileLevel: 2, tileIndex: 0, positions: 2..<4))
    }
}

/// A log in a fresh temporary directory, with the leaves it should hold kept beside it.
final class LogFixture {
    let directory: String
    var leaves: [[UInt8]] = []

    init() {
        self.directory = NSTemporaryDirectory() + "tlog-" + UUID().uuidString
    }

    deinit { try? FileManager.default.removeItem(atPath: self.directory) }

    func open() throws -> TileLogDirectory { try TileLogDirectory(directory: self.directory) }

    func entries(_ count: Int) -> [[UInt8]] {
        let start = self.leaves.count
        let made = (start..<(start + count)).map { Array("record \($0) ".utf8) + Array(repeating: UInt8($0 % 251), count: $0 % 97) }
        self.leaves += made
        return made
    }

    var expectedRoot: [UInt8] { referenceRoot(self.leaves.map { MerkleHash.leaf($0) }[...]) }

    func path(_ relative: String) -> String { self.directory + "/" + relative }
}

struct TileLogDirectoryTests {
    @Test("appends in batches of every shape keep the root, the entries and every proof right")
    func appendAndProve() throws {
        let fixture = LogFixture()
        let log = try fixture.open()
        #expect(log.size == 0)
        #expect(log.root == MerkleHash.emptyRoot)
        var sizes: [UInt64] = []
        for batch in [1, 1, 7, 247, 300, 1, 255, 256, 33] {
            let first = try log.append(fixture.entries(batch))
            #expect(first == UInt64(fixture.leaves.count - batch))
            #expect(log.root == fixture.expectedRoot, "after \(fixture.leaves.count)")
            sizes.append(log.size)
        }
        #expect(log.size == 1_101)
        for index in [0, 1, 255, 256, 767, 768, 1_024, 1_100] {
            #expect(try log.entry(at: UInt64(index)) == fixture.leaves[index])
            let proof = try log.inclusionProof(index: UInt64(index), size: log.size)
            try MerkleProof.verifyInclusion(
                proof, leafHash: MerkleHash.leaf(fixture.leaves[index]), index: UInt64(index), size: log.size, root: log.root)
        }
        for (first, second) in zip(sizes, sizes.dropFirst()) {
            let proof = try log.consistencyProof(first: first, second: second)
            try MerkleProof.verifyConsistency(
                proof, first: first, second: second, firstRoot: try log.root(size: first), secondRoot: try log.root(size: second))
        }
        // Four full tiles of leaves (1,024) and their bundles, written once; the rest partial.
        for index in 0..<4 {
            #expect(FileManager.default.fileExists(atPath: fixture.path(TileLayout.hashTilePath(level: 0, index: UInt64(index)))))
            #expect(FileManager.default.fileExists(atPath: fixture.path(TileLayout.entryBundlePath(index: UInt64(index)))))
        }
        #expect(FileManager.default.fileExists(atPath: fixture.path(TileLayout.hashTilePath(level: 0, index: 4) + ".partial")))
        #expect(throws: TileLogDirectory.Failure.self) { try log.entry(at: 1_101) }
        #expect(throws: TileLogDirectory.Failure.self) { try log.inclusionProof(index: 0, size: 1_102) }
    }

    @Test("a reopened log has the same size and root and goes on appending")
    func reopen() throws {
        let fixture = LogFixture()
        _ = try fixture.open().append(fixture.entries(600))
        let reopened = try fixture.open()
        #expect(reopened.size == 600)
        #expect(reopened.root == fixture.expectedRoot)
        _ = try reopened.append(fixture.entries(500))
        #expect(reopened.root == fixture.expectedRoot)
        #expect(try TileLogDirectory(readingDirectory: fixture.directory).root == fixture.expectedRoot)
    }

    @Test("bytes an append wrote but never committed are dropped when the log opens")
    func uncommittedAppend() throws {
        let fixture = LogFixture()
        _ = try fixture.open().append(fixture.entries(250))
        let committedRoot = fixture.expectedRoot
        // What a crash before the state's rename leaves: the partial tiles grown, the next tile started.
        for relative in [
            TileLayout.entryBundlePath(index: 0), TileLayout.hashTilePath(level: 0, index: 0),
            TileLayout.entryBundlePath(index: 1), TileLayout.hashTilePath(level: 0, index: 1),
            TileLayout.hashTilePath(level: 1, index: 0),
        ] {
            let path = fixture.path(relative + ".partial")
            try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            if !FileManager.default.fileExists(atPath: path) { _ = FileManager.default.createFile(atPath: path, contents: nil) }
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data(repeating: 0xEE, count: 333))
            try handle.close()
        }
        let log = try fixture.open()
        #expect(log.size == 250)
        #expect(log.root == committedRoot)
        _ = try log.append(fixture.entries(20))
        #expect(log.root == fixture.expectedRoot)
        #expect(try log.entry(at: 260) == fixture.leaves[260])
        #expect(try TileLogDirectory(readingDirectory: fixture.directory).root == fixture.expectedRoot)
    }

    @Test("a full tile committed but not yet renamed is renamed when the log opens")
    func rollForward() throws {
        let fixture = LogFixture()
        _ = try fixture.open().append(fixture.entries(512))
        for relative in [TileLayout.hashTilePath(level: 0, index: 1), TileLayout.entryBundlePath(index: 1)] {
            try FileManager.default.moveItem(atPath: fixture.path(relative), toPath: fixture.path(relative + ".partial"))
        }
        let log = try fixture.open()
        #expect(FileManager.default.fileExists(atPath: fixture.path(TileLayout.hashTilePath(level: 0, index: 1))))
        #expect(log.root == fixture.expectedRoot)
        _ = try log.append(fixture.entries(3))
        #expect(log.root == fixture.expectedRoot)
    }

    @Test("a state whose slots both fail their checksums, or tiles shorter than it commits, refuse to open")
    func damaged() throws {
        let fixture = LogFixture()
        do {
            let log = try fixture.open()
            _ = try log.append(fixture.entries(40))
            _ = try log.append(fixture.entries(3))
        }
        var state = try [UInt8](Data(contentsOf: URL(fileURLWithPath: fixture.path("state"))))
        #expect(state.count == 8192)
        state[30] ^= 1
        state[4096 + 30] ^= 1
        try Data(state).write(to: URL(fileURLWithPath: fixture.path("state")))
        #expect(throws: TileLogDirectory.Failure.self) { try fixture.open() }

        let other = LogFixture()
        _ = try other.open().append(other.entries(40))
        let tile = other.path(TileLayout.hashTilePath(level: 0, index: 0) + ".partial")
        try FileManager.default.removeItem(atPath: tile)
        #expect(throws: TileLogDirectory.Failure.self) { try other.open() }
    }

    @Test("a commit torn in its slot leaves the previous commit in force: the log opens at it, cuts the rest, and appends on")
    func tornSlot() throws {
        let fixture = LogFixture()
        do {
            let log = try fixture.open()
            _ = try log.append(fixture.entries(300))
            _ = try log.append(fixture.entries(5))
        }
        let committedAt300 = referenceRoot(fixture.leaves.prefix(300).map { MerkleHash.leaf($0) }[...])
        // The second commit went to the second slot (the first commit made the file, in slot 0);
        // a crash while writing it tears that slot (its tiles are written, nothing was promoted
        // after it: promotion follows the commit).
        var state = try [UInt8](Data(contentsOf: URL(fileURLWithPath: fixture.path("state"))))
        state[4096 + 40] ^= 1
        try Data(state).write(to: URL(fileURLWithPath: fixture.path("state")))
        fixture.leaves.removeLast(5)
        let log = try fixture.open()
        #expect(log.size == 300)
        #expect(log.root == committedAt300)
        _ = try log.append(fixture.entries(7))
        #expect(log.root == fixture.expectedRoot)
        #expect(try TileLogDirectory(readingDirectory: fixture.directory).root == fixture.expectedRoot)
    }

    @Test("a version-1 state (one record, replaced by a rename) is read, and the next commit rewrites it as two slots")
    func legacyState() throws {
        let fixture = LogFixture()
        _ = try fixture.open().append(fixture.entries(21))
        var range = CompactRange()
        for leaf in fixture.leaves { range.append(leafHash: MerkleHash.leaf(leaf)) }
        var body = Array("formattest-tlog-state v1\n".utf8)
        body += (0..<8).map { UInt8(truncatingIfNeeded: range.size >> UInt64(56 - 8 * $0)) }
        for hash in range.hashes { body += hash }
        body += Array(SHA256.hash(data: body))
        try Data(body).write(to: URL(fileURLWithPath: fixture.path("state")))
        let log = try fixture.open()
        #expect(log.size == 21)
        #expect(log.root == fixture.expectedRoot)
        _ = try log.append(fixture.entries(2))
        #expect(try Data(contentsOf: URL(fileURLWithPath: fixture.path("state"))).count == 8192)
        _ = try log.append(fixture.entries(2))
        #expect(try TileLogDirectory(readingDirectory: fixture.directory).root == fixture.expectedRoot)
    }

    @Test("an entry over 65,535 bytes is refused and appends nothing")
    func oversizedEntry() throws {
        let fixture = LogFixture()
        let log = try fixture.open()
        _ = try log.append(fixture.entries(3))
        #expect(throws: TileLogDirectory.Failure.self) { try log.append([Array(repeating: 1, count: 65_536)]) }
        #expect(log.size == 3)
        #expect(try TileLogDirectory(readingDirectory: fixture.directory).root == fixture.expectedRoot)
    }

    @Test("a second writer is refused while the first holds the log; a reader is not")
    func oneWriter() throws {
        let fixture = LogFixture()
        do {
            let log = try fixture.open()
            _ = try log.append(fixture.entries(5))
            #expect(throws: TileLogDirectory.Failure.self) { try fixture.open() }
            #expect(try TileLogDirectory(readingDirectory: fixture.directory).size == 5)
            withExtendedLifetime(log) {}
        }
        // The first writer is gone: its lock with it.
        #expect(try fixture.open().size == 5)
    }

    @Test("tiles without a state are refused: the log is never started over an old one")
    func lostState() throws {
        let fixture = LogFixture()
        _ = try fixture.open().append(fixture.entries(30))
        try FileManager.default.removeItem(atPath: fixture.path("state"))
        #expect(throws: TileLogDirectory.Failure.self) { try fixture.open() }
    }

    @Test("the files are the service's alone: directories 0700, files 0600")
    func modes() throws {
        let fixture = LogFixture()
        _ = try fixture.open().append(fixture.entries(300))
        for relative in ["", "tile", "tile/0", "tile/entries"] {
            let mode = try FileManager.default.attributesOfItem(atPath: fixture.path(relative))[.posixPermissions] as? Int
            #expect(mode == 0o700, "\(relative)")
        }
        for relative in [
            "state", TileLayout.hashTilePath(level: 0, index: 0), TileLayout.entryBundlePath(index: 0) + "",
            TileLayout.hashTilePath(level: 0, index: 1) + ".partial",
        ] {
            let mode = try FileManager.default.attributesOfItem(atPath: fixture.path(relative))[.posixPermissions] as? Int
            #expect(mode == 0o600, "\(relative)")
        }
    }
}
