//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
import Foundation
public import TransparencyLog

#if canImport(Glibc)
    import Glibc
#endif

/// An append-only Merkle-tree log in a directory, in the C2SP tlog-tiles layout (``TileLayout``).
///
/// Full tiles and full entry bundles are written once and never change. The tiles still filling
/// are append-only files beside them (`<path>.partial`). A small `state` file — the tree size and
/// its right edge, with a checksum, in one of two slots — is the commit point: an append writes
/// and syncs the partial files, then writes the slot that does not hold the committed state in
/// place and syncs it, and only then returns, so an index it returned survives a crash (a torn
/// slot leaves the other, the previous commit, in force). On opening, bytes past what `state`
/// commits are cut off, and a tile that `state` says is full but was not yet renamed is renamed
/// (roll forward): a crash at any point leaves the log at its last committed size.
///
/// One writer per directory, not thread-safe: callers serialize (the service appends from one
/// task). Reading is safe between appends.
public final class TileLogDirectory {
    /// A failure of the directory's IO, or a directory that is not a log this code wrote.
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }

    public let directory: String
    private var range: CompactRange

    /// The number of leaves committed.
    public var size: UInt64 { self.range.size }
    /// The root of the committed tree.
    public var root: [UInt8] { self.range.root }

    /// Opens the log in `directory` (created, empty, when it does not exist) and recovers it to
    /// its last committed size.
    ///
    /// `atLeast` is the size of the last checkpoint published: a committed state below it (an old
    /// copy of `state` put back) is refused before anything is cut, so that recovery never
    /// destroys leaves a checkpoint covers.
    public init(directory: String, atLeast minimumSize: UInt64 = 0) throws(Failure) {
        self.directory = directory
        self.range = CompactRange()
        try Self.makeDirectory(directory)
        // One writer: a second process on the same directory would hand out the same indexes
        // and sign a different tree under the same key.
        let lockPath = directory + "/lock"
        let lock = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard lock >= 0 else { throw Failure("cannot open \(lockPath): \(Self.lastError())") }
        guard flock(lock, LOCK_EX | LOCK_NB) == 0 else {
            close(lock)
            throw Failure("another process is appending to the log in \(directory) (\(lockPath) is locked)")
        }
        self.lock = lock
        guard let state = try self.readState() else {
            guard minimumSize == 0 else {
                throw Failure("\(directory) holds no state but a checkpoint of \(minimumSize) leaves was published: refusing to start over")
            }
            // No state: a new log, unless tiles are there (a state lost or removed): starting
            // over would reuse indexes already answered and signed.
            guard access(self.path("tile"), F_OK) != 0 else {
                throw Failure("\(directory) holds tiles but no state: refusing to start a new log over an old one")
            }
            try self.recover()
            return
        }
        guard state.size >= minimumSize else {
            throw Failure(
                "\(directory)'s state commits \(state.size) leaves, fewer than the \(minimumSize) of the last published checkpoint: it was rolled back; refusing to cut or fork the log"
            )
        }
        self.range = state
        try self.recover()
        try self.openStateForWriting()
    }

    /// Opens a two-slot `state` for the next commits' in-place writes (nothing to open for a
    /// version-1 one, which the next commit replaces).
    private func openStateForWriting() throws(Failure) {
        if self.stateDescriptor >= 0 {
            close(self.stateDescriptor)
            self.stateDescriptor = -1
        }
        guard self.stateSlot != nil else { return }
        self.stateDescriptor = open(self.path("state"), O_RDWR | O_CLOEXEC)
        guard self.stateDescriptor >= 0 else { throw Failure("cannot open \(self.path("state")): \(Self.lastError())") }
    }

    deinit {
        if self.lock >= 0 { close(self.lock) }
        if self.stateDescriptor >= 0 { close(self.stateDescriptor) }
    }

    private var lock: Int32 = -1
    /// `state` open for writing its slots in place (a writer with a two-slot state), else -1.
    private var stateDescriptor: Int32 = -1
    /// The slot that holds the committed state (the next commit writes the other), or nil when
    /// there is no two-slot `state` yet (a new log, or one whose `state` is version 1).
    private var stateSlot: Int?

    /// Opens an existing log to read it (an audit, a copy): nothing is created, cut or renamed,
    /// and ``append(_:)`` refuses. Reads see the committed size; a full tile a crash left
    /// unrenamed is read from its partial file.
    public init(readingDirectory directory: String) throws(Failure) {
        self.directory = directory
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw Failure("\(directory) is not a directory")
        }
        self.range = CompactRange()
        guard let state = try self.readState() else { throw Failure("\(directory) holds no log state") }
        self.range = state
        self.broken = "the log was opened for reading"
    }

    // MARK: - Appending

    /// Appends `entries` as consecutive leaves and returns the index of the first, once durable.
    ///
    /// When it throws, the entries may or may not be committed (a failure after the state's
    /// rename); the log re-reads its state and recovers before anything else is appended, and
    /// refuses every later append if it cannot.
    public func append(_ entries: [[UInt8]]) throws(Failure) -> UInt64 {
        if let broken = self.broken { throw Failure("the log needs reopening after an earlier failure: \(broken)") }
        do {
            return try self.appendCommitting(entries)
        } catch {
            do {
                self.range = try self.readState() ?? CompactRange()
                try self.recover()
                try self.openStateForWriting()
            } catch let recovery {
                self.broken = recovery.description
            }
            throw error
        }
    }

    private var broken: String?

    private func appendCommitting(_ entries: [[UInt8]]) throws(Failure) -> UInt64 {
        guard !entries.isEmpty else { return self.size }
        for entry in entries where entry.count > TileLayout.maximumEntryLength {
            throw Failure("an entry of \(entry.count) bytes is over \(TileLayout.maximumEntryLength)")
        }
        let first = self.size
        var range = self.range
        var bundleBytes: [UInt64: [UInt8]] = [:]
        var hashBytes: [TileKey: [UInt8]] = [:]
        for entry in entries {
            let index = range.size
            bundleBytes[index / TileLayout.width, default: []] += [UInt8(entry.count >> 8), UInt8(entry.count & 0xFF)] + entry
            for (id, hash) in range.append(leafHash: MerkleHash.leaf(entry)) where id.level % TileLayout.height == 0 {
                let key = TileKey(level: id.level / TileLayout.height, index: id.index / TileLayout.width)
                hashBytes[key, default: []] += hash
            }
        }
        // Each touched tile is written once: a tile that holds committed hashes is appended to
        // (it holds exactly those, as opening cut it); any other starts empty, so that bytes an
        // uncommitted append left there are dropped.
        for (index, bytes) in bundleBytes {
            let committed = TileLayout.tileWidth(level: 0, index: index, treeSize: first) > 0
            try self.write(bytes, to: TileLayout.entryBundlePath(index: index) + ".partial", appending: committed)
        }
        for (key, bytes) in hashBytes {
            let committed = TileLayout.tileWidth(level: key.level, index: key.index, treeSize: first) > 0
            try self.write(bytes, to: TileLayout.hashTilePath(level: key.level, index: key.index) + ".partial", appending: committed)
        }
        try self.writeState(range)
        self.range = range
        try self.promoteFullTiles(from: first, to: range.size)
        return first
    }

    // MARK: - Reading

    /// The data of leaf `index`.
    public func entry(at index: UInt64) throws(Failure) -> [UInt8] {
        guard index < self.size else { throw Failure("leaf \(index) is not in a log of \(self.size)") }
        let bundle = index / TileLayout.width
        let bytes = try self.readTile(TileLayout.entryBundlePath(index: bundle))
        var offset = 0
        var position: UInt64 = 0
        let wanted = index % TileLayout.width
        while offset + 2 <= bytes.count {
            let length = Int(bytes[offset]) << 8 | Int(bytes[offset + 1])
            guard offset + 2 + length <= bytes.count else { break }
            if position == wanted { return Array(bytes[(offset + 2)..<(offset + 2 + length)]) }
            offset += 2 + length
            position += 1
        }
        throw Failure("the entry bundle \(bundle) is shorter than its committed size")
    }

    /// The committed entries of the entry bundle `index` (leaves `256·index` on), in order. With
    /// `upToDamage`, a bundle cut short yields the entries before the cut (an audit names the
    /// first missing leaf) instead of failing.
    public func entryBundle(_ index: UInt64, upToDamage: Bool = false) throws(Failure) -> [[UInt8]] {
        let count = Int(TileLayout.tileWidth(level: 0, index: index, treeSize: self.size))
        guard count > 0 else { throw Failure("the entry bundle \(index) is not in a log of \(self.size)") }
        let bytes = try self.readTile(TileLayout.entryBundlePath(index: index))
        var entries: [[UInt8]] = []
        entries.reserveCapacity(count)
        var offset = 0
        while entries.count < count {
            guard offset + 2 <= bytes.count, offset + 2 + (Int(bytes[offset]) << 8 | Int(bytes[offset + 1])) <= bytes.count else {
                if upToDamage { return entries }
                throw Failure("the entry bundle \(index) is shorter than its committed size")
            }
            let length = Int(bytes[offset]) << 8 | Int(bytes[offset + 1])
            entries.append(Array(bytes[(offset + 2)..<(offset + 2 + length)]))
            offset += 2 + length
        }
        return entries
    }

    /// Bytes the partial files hold past the committed size (an append that never committed, to
    /// be cut when the log is next opened for writing, or bytes put there by someone else), by
    /// file; empty for a log opened for writing.
    public func uncommittedBytes() throws(Failure) -> [String: Int] {
        var result: [String: Int] = [:]
        var level = 0
        repeat {
            let nodes = self.size >> UInt64(TileLayout.height * level)
            let index = nodes / TileLayout.width
            let width = Int(nodes % TileLayout.width)
            let hashPath = TileLayout.hashTilePath(level: level, index: index) + ".partial"
            if let bytes = try FileIO.read(self.path(hashPath)), bytes.count > width * MerkleHash.size {
                result[hashPath] = bytes.count - width * MerkleHash.size
            }
            if level == 0 {
                let bundlePath = TileLayout.entryBundlePath(index: index) + ".partial"
                if let bytes = try FileIO.read(self.path(bundlePath)) {
                    var offset = 0
                    for _ in 0..<width where offset + 2 <= bytes.count { offset += 2 + (Int(bytes[offset]) << 8 | Int(bytes[offset + 1])) }
                    if bytes.count > offset { result[bundlePath] = bytes.count - offset }
                }
            }
            level += 1
        } while self.size >> UInt64(TileLayout.height * level) > 0
        return result
    }

    /// The committed hashes of the hash tile `(level, index)`.
    public func hashTile(level: Int, index: UInt64) throws(Failure) -> [[UInt8]] {
        let count = Int(TileLayout.tileWidth(level: level, index: index, treeSize: self.size))
        guard count > 0 else { throw Failure("the hash tile (\(level), \(index)) is not in a log of \(self.size)") }
        let bytes = try self.readTile(TileLayout.hashTilePath(level: level, index: index))
        guard bytes.count >= count * MerkleHash.size else { throw Failure("the hash tile (\(level), \(index)) is shorter than its committed size") }
        return (0..<count).map { Array(bytes[($0 * MerkleHash.size)..<(($0 + 1) * MerkleHash.size)]) }
    }

    /// The hash of a perfect subtree of the committed tree.
    public func subtreeHash(_ id: SubtreeID) throws(Failure) -> [UInt8] {
        guard id.level < 63, id.index < UInt64(1) << UInt64(63 - id.level), (id.index + 1) << UInt64(id.level) <= self.size else {
            throw Failure("the subtree \(id) is not complete in a log of \(self.size)")
        }
        let location = TileLayout.location(of: id)
        let bytes = try self.readTile(TileLayout.hashTilePath(level: location.tileLevel, index: location.tileIndex))
        guard bytes.count >= location.positions.upperBound * MerkleHash.size else {
            throw Failure("the hash tile for \(id) is shorter than its committed size")
        }
        let hashes = location.positions.map { Array(bytes[($0 * MerkleHash.size)..<(($0 + 1) * MerkleHash.size)]) }
        return TileLayout.fold(hashes)
    }

    /// The inclusion proof of leaf `index` in the tree of `size` leaves (a committed size).
    public func inclusionProof(index: UInt64, size: UInt64) throws(Failure) -> [[UInt8]] {
        guard size <= self.size else { throw Failure("a tree of \(size) leaves is past the log's \(self.size)") }
        let ranges: [LeafRange]
        do { ranges = try MerkleProof.inclusionRanges(index: index, size: size) } catch { throw Failure(error.reason) }
        return try ranges.map { (range: LeafRange) throws(Failure) -> [UInt8] in try MerkleProof.hash(of: range, subtreeHash: self.subtreeHash) }
    }

    /// The consistency proof from the tree of `first` leaves to the tree of `second`.
    public func consistencyProof(first: UInt64, second: UInt64) throws(Failure) -> [[UInt8]] {
        guard second <= self.size else { throw Failure("a tree of \(second) leaves is past the log's \(self.size)") }
        let ranges: [LeafRange]
        do { ranges = try MerkleProof.consistencyRanges(first: first, second: second) } catch { throw Failure(error.reason) }
        return try ranges.map { (range: LeafRange) throws(Failure) -> [UInt8] in try MerkleProof.hash(of: range, subtreeHash: self.subtreeHash) }
    }

    /// The root the tree would have with `entries` appended (nothing is written): what a batch
    /// of a shared log says its tree is after it.
    public func root(appending entries: [[UInt8]]) -> [UInt8] {
        var range = self.range
        for entry in entries { range.append(leafHash: MerkleHash.leaf(entry)) }
        return range.root
    }

    /// The root of the committed tree's first `size` leaves.
    public func root(size: UInt64) throws(Failure) -> [UInt8] {
        guard size <= self.size else { throw Failure("a tree of \(size) leaves is past the log's \(self.size)") }
        return try MerkleProof.hash(of: LeafRange(begin: 0, end: size), subtreeHash: self.subtreeHash)
    }

    // MARK: - Files

    private struct TileKey: Hashable {
        let level: Int
        let index: UInt64
    }

    private func path(_ relative: String) -> String { self.directory + "/" + relative }

    /// A full tile when it exists, else the partial one.
    private func readTile(_ relative: String) throws(Failure) -> [UInt8] {
        if let bytes = try FileIO.read(self.path(relative)) { return bytes }
        if let bytes = try FileIO.read(self.path(relative + ".partial")) { return bytes }
        throw Failure("the tile \(relative) is missing")
    }

    private func write(_ bytes: [UInt8], to relative: String, appending: Bool) throws(Failure) {
        let path = self.path(relative)
        let parent = (path as NSString).deletingLastPathComponent
        let created = access(path, F_OK) != 0
        if created { try FileIO.makeDurableDirectory(parent, inside: self.directory) }
        let descriptor = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (appending ? O_APPEND : O_TRUNC), 0o600)
        guard descriptor >= 0 else { throw Failure("cannot open \(path): \(Self.lastError())") }
        defer { close(descriptor) }
        try FileIO.writeAll(bytes, to: descriptor, path: path)
        // fdatasync: the bytes and the file's new size (what reading them needs), not its times.
        guard fdatasync(descriptor) == 0 else { throw Failure("cannot sync \(path): \(Self.lastError())") }
        if created { try FileIO.syncDirectory(parent) }
    }

    /// Renames every partial tile that the committed size makes full (between `oldSize` and
    /// `newSize`, or, when opening, those a crash left unrenamed: the last full tiles of each
    /// level back to the first that exists).
    private func promoteFullTiles(from oldSize: UInt64?, to newSize: UInt64) throws(Failure) {
        var level = 0
        while newSize >> UInt64(TileLayout.height * level) >= TileLayout.width {
            let newFull = (newSize >> UInt64(TileLayout.height * level)) / TileLayout.width
            if let oldSize {
                let oldFull = (oldSize >> UInt64(TileLayout.height * level)) / TileLayout.width
                for index in oldFull..<newFull { try self.promote(level: level, index: index) }
            } else {
                var index = newFull
                while index > 0, try self.promote(level: level, index: index - 1) { index -= 1 }
            }
            level += 1
        }
    }

    /// Renames the full tile `(level, index)` (and at level 0 its entry bundle) from its partial
    /// file; false when both were renamed already.
    @discardableResult
    private func promote(level: Int, index: UInt64) throws(Failure) -> Bool {
        var renamed = false
        var paths = [TileLayout.hashTilePath(level: level, index: index)]
        if level == 0 { paths.append(TileLayout.entryBundlePath(index: index)) }
        for relative in paths {
            let full = self.path(relative)
            if access(full, F_OK) == 0 { continue }
            guard rename(full + ".partial", full) == 0 else { throw Failure("cannot rename \(full).partial: \(Self.lastError())") }
            try FileIO.syncDirectory((full as NSString).deletingLastPathComponent)
            renamed = true
        }
        return renamed
    }

    /// Cuts every partial tile to what the committed size holds and renames the full ones.
    private func recover() throws(Failure) {
        let size = self.size
        // Tiles that the committed size fills: roll the rename forward.
        try self.promoteFullTiles(from: nil, to: size)
        // The partial tiles: cut bytes past the committed size (an append that never committed).
        var level = 0
        repeat {
            let nodes = size >> UInt64(TileLayout.height * level)
            let index = nodes / TileLayout.width
            let width = nodes % TileLayout.width
            try self.truncate(TileLayout.hashTilePath(level: level, index: index) + ".partial", to: Int(width) * MerkleHash.size)
            if level == 0 {
                let relative = TileLayout.entryBundlePath(index: index) + ".partial"
                let bytes = try FileIO.read(self.path(relative)) ?? []
                var offset = 0
                for _ in 0..<width {
                    guard offset + 2 <= bytes.count else { throw Failure("the entry bundle \(index) is shorter than the committed size") }
                    offset += 2 + (Int(bytes[offset]) << 8 | Int(bytes[offset + 1]))
                }
                guard offset <= bytes.count else { throw Failure("the entry bundle \(index) is shorter than the committed size") }
                try self.truncate(relative, to: offset)
            }
            level += 1
        } while size >> UInt64(TileLayout.height * level) > 0
    }

    private func truncate(_ relative: String, to length: Int) throws(Failure) {
        let path = self.path(relative)
        var info = stat()
        guard stat(path, &info) == 0 else {
            guard length == 0 else { throw Failure("\(path) is missing but the committed size needs \(length) bytes of it") }
            return
        }
        guard Int(info.st_size) >= length else { throw Failure("\(path) is shorter than the committed size needs") }
        if Int(info.st_size) > length {
            guard Glibc.truncate(path, off_t(length)) == 0 else { throw Failure("cannot cut \(path): \(Self.lastError())") }
        }
    }

    // The state, version 2: two slots of `stateSlotSize` bytes, each "formattest-tlog-state v2\n",
    // the size (8 bytes, big-endian), the right edge (a hash per bit set in the size), SHA-256 over
    // them, then zeros. A commit writes the slot that does not hold the committed state, in place,
    // and syncs it: a torn write leaves that slot failing its checksum and the other one, the
    // previous commit, in force. The valid slot with the larger size is the committed state.
    // Version 1 (one record, "formattest-tlog-state v1\n", replaced by a rename) is still read;
    // the first commit rewrites it as version 2.
    private static let stateMagic = Array("formattest-tlog-state v2\n".utf8)
    private static let legacyStateMagic = Array("formattest-tlog-state v1\n".utf8)
    static let stateSlotSize = 4096

    /// The committed state, or nil when there is no `state` file; sets ``stateSlot``.
    private func readState() throws(Failure) -> CompactRange? {
        guard let bytes = try FileIO.read(self.path("state")) else {
            self.stateSlot = nil
            return nil
        }
        if bytes.starts(with: Self.legacyStateMagic) {
            self.stateSlot = nil
            return try self.stateRecord(bytes[...], magic: Self.legacyStateMagic, padded: false)
        }
        guard bytes.count == 2 * Self.stateSlotSize else { throw Failure("\(self.path("state")) is not a log state") }
        var best: (slot: Int, range: CompactRange)?
        var problems: [String] = []
        for slot in 0..<2 {
            do {
                let range = try self.stateRecord(
                    bytes[(slot * Self.stateSlotSize)..<((slot + 1) * Self.stateSlotSize)], magic: Self.stateMagic, padded: true)
                if best == nil || range.size > best!.range.size { best = (slot, range) }
            } catch {
                problems.append(error.description)
            }
        }
        guard let best else { throw Failure("\(self.path("state")): neither slot holds a state (\(problems.joined(separator: "; ")))") }
        self.stateSlot = best.slot
        return best.range
    }

    /// One state record: the magic, the size, the right edge, SHA-256 over them (then zeros, in a slot).
    private func stateRecord(_ bytes: ArraySlice<UInt8>, magic: [UInt8], padded: Bool) throws(Failure) -> CompactRange {
        let bytes = Array(bytes)
        let header = magic.count
        guard bytes.count >= header + 8 + 32, bytes.starts(with: magic) else {
            throw Failure("\(self.path("state")) is not a log state")
        }
        let size = bytes[header..<(header + 8)].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let edgeLength = padded ? size.nonzeroBitCount * MerkleHash.size : bytes.count - header - 8 - 32
        guard edgeLength >= 0, edgeLength % 32 == 0, header + 8 + edgeLength + 32 <= bytes.count else {
            throw Failure("\(self.path("state")) has a torn right edge")
        }
        let bodyEnd = header + 8 + edgeLength
        guard Array(SHA256.hash(data: bytes[..<bodyEnd])) == Array(bytes[bodyEnd..<(bodyEnd + 32)]) else {
            throw Failure("\(self.path("state")) fails its checksum")
        }
        guard !padded || bytes[(bodyEnd + 32)...].allSatisfy({ $0 == 0 }) else { throw Failure("\(self.path("state")) has bytes past its checksum") }
        let edge = Array(bytes[(header + 8)..<bodyEnd])
        let hashes = stride(from: 0, to: edge.count, by: 32).map { Array(edge[$0..<($0 + 32)]) }
        do {
            return try CompactRange(size: size, hashes: hashes)
        } catch {
            throw Failure("\(self.path("state")): \(error.reason)")
        }
    }

    /// The slot's bytes for `range`.
    private static func stateSlotBytes(_ range: CompactRange) -> [UInt8] {
        var body = Self.stateMagic
        body += (0..<8).map { UInt8(truncatingIfNeeded: range.size >> UInt64(56 - 8 * $0)) }
        for hash in range.hashes { body += hash }
        body += Array(SHA256.hash(data: body))
        return body + [UInt8](repeating: 0, count: Self.stateSlotSize - body.count)
    }

    /// Commits `range`: its slot written in place and synced (one write and one `fdatasync`), or,
    /// with no two-slot `state` yet, a new one (the range in slot 0) replacing the file by a rename.
    private func writeState(_ range: CompactRange) throws(Failure) {
        let slot = Self.stateSlotBytes(range)
        guard let current = self.stateSlot, self.stateDescriptor >= 0 else {
            try self.replaceFile("state", with: slot + [UInt8](repeating: 0, count: Self.stateSlotSize))
            if self.stateDescriptor >= 0 { close(self.stateDescriptor) }
            self.stateDescriptor = open(self.path("state"), O_RDWR | O_CLOEXEC)
            guard self.stateDescriptor >= 0 else { throw Failure("cannot open \(self.path("state")): \(Self.lastError())") }
            self.stateSlot = 0
            return
        }
        let next = 1 - current
        var written = 0
        while written < slot.count {
            let count = slot.withUnsafeBytes {
                pwrite(self.stateDescriptor, $0.baseAddress! + written, $0.count - written, off_t(next * Self.stateSlotSize + written))
            }
            if count < 0 {
                if errno == EINTR { continue }
                throw Failure("cannot write \(self.path("state")): \(Self.lastError())")
            }
            written += count
        }
        guard fdatasync(self.stateDescriptor) == 0 else { throw Failure("cannot sync \(self.path("state")): \(Self.lastError())") }
        self.stateSlot = next
    }

    /// Replaces `<directory>/<name>` durably: a new file (0600) written and synced, renamed over
    /// the old one, the directory synced. The log's state, and the checkpoint its service writes
    /// beside it, are both written so.
    public func replaceFile(_ name: String, with bytes: [UInt8]) throws(Failure) {
        let path = self.path(name)
        let temporary = path + ".new"
        try FileIO.writeSynced(bytes, to: temporary, exclusive: false)
        guard rename(temporary, path) == 0 else { throw Failure("cannot rename \(temporary): \(Self.lastError())") }
        try FileIO.syncDirectory(self.directory)
    }

    private static func makeDirectory(_ path: String) throws(Failure) {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw Failure("cannot create \(path): \(error)")
        }
    }

    private static func lastError() -> String { FileIO.lastError() }
}
