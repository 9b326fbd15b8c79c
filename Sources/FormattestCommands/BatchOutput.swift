//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Where `wrap --batch` writes its records, in input order.
protocol BatchOutput: AnyObject {
    /// Called once, after the records of an earlier run were checked and before the first new
    /// record: cuts off a torn tail after `validEnd`, then appends from there.
    func prepareAppend(at validEnd: UInt64) throws
    /// Checks one record an earlier run wrote (a rerun), beyond what its parsing checked.
    func check(_ record: BatchRecord) throws
    /// Writes one record (`.tokens` or `.error`); returns it as written.
    func write(_ record: BatchRecord) throws -> BatchRecord
    /// Makes everything written durable.
    func finish() throws
}

/// POSIX file IO with every error a usage error naming the file.
enum BatchFile {
    static func writeAll(_ fd: Int32, _ bytes: [UInt8], path: String) throws {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { raw in
                // `offset < bytes.count`, so the base address exists and the range is in bounds.
                write(fd, raw.baseAddress.map { $0 + offset }, bytes.count - offset)
            }
            if written < 0 {
                if errno == EINTR { continue }
                throw UsageError("cannot write \(path): \(String(cString: strerror(errno)))")
            }
            offset += written
        }
    }

    static func sync(_ fd: Int32, path: String) throws {
        guard fsync(fd) == 0 else { throw UsageError("cannot flush \(path) to disk: \(String(cString: strerror(errno)))") }
    }

    /// Makes every file written on the file system holding `path` durable with one call (Linux's
    /// `syncfs`; `fsync` of the directory elsewhere, after the caller's own `fsync`s).
    static func syncFileSystem(holding path: String) throws {
        let fd = open(path, O_RDONLY | O_DIRECTORY)
        guard fd >= 0 else { throw UsageError("cannot open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        #if os(Linux)
            // Glibc declares syncfs only under _GNU_SOURCE, which Swift's Glibc module does not set:
            // the symbol is looked up once instead. Without it, sync(2) flushes every file system.
            if let syncfs = Self.syncfs {
                guard syncfs(fd) == 0 else { throw UsageError("cannot flush \(path) to disk: \(String(cString: strerror(errno)))") }
            } else {
                Glibc.sync()
            }
        #else
            try Self.sync(fd, path: path)
        #endif
    }

    #if os(Linux)
        private typealias SyncFS = @convention(c) (Int32) -> Int32
        /// syncfs(2) from the C library, when it has one (glibc ≥ 2.14).
        private static let syncfs: SyncFS? = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "syncfs").map { unsafeBitCast($0, to: SyncFS.self) }
    #endif

    static func sha256(ofFileAt path: String) -> String? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        return HexCoding.encode(SHA256.hash(data: data))
    }
}

/// `--out FILE|-`: one JSON line per item. A file is made durable in groups (``syncRecords``
/// records or ``syncInterval``, whichever comes first) and at the end, never once per record.
final class BatchLinesOutput: BatchOutput {
    static let syncRecords = 1000
    static let syncInterval: Duration = .seconds(1)
    /// Records are written to the file in chunks of about this size.
    static let chunkBytes = 256 * 1024

    private let fd: Int32
    private let path: String
    private let durable: Bool
    private var buffer: [UInt8] = []
    private var unsynced = 0
    private let clock = ContinuousClock()
    private var lastSync: ContinuousClock.Instant

    /// `-` is stdout (never synced, never resumed); a file is created, or opened to resume.
    init(path: String) throws {
        self.path = path
        self.lastSync = ContinuousClock.now
        if path == "-" {
            self.fd = STDOUT_FILENO
            self.durable = false
            return
        }
        self.durable = true
        let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw UsageError("cannot create or open \(path): \(String(cString: strerror(errno)))") }
        self.fd = fd
    }

    deinit {
        if self.fd != STDOUT_FILENO { close(self.fd) }
    }

    func prepareAppend(at validEnd: UInt64) throws {
        guard self.durable else { return }
        guard let offset = off_t(exactly: validEnd), ftruncate(self.fd, offset) == 0, lseek(self.fd, offset, SEEK_SET) == offset else {
            throw UsageError("cannot cut \(self.path) after its last complete record: \(String(cString: strerror(errno)))")
        }
    }

    func check(_ record: BatchRecord) throws {}

    func write(_ record: BatchRecord) throws -> BatchRecord {
        self.buffer += record.bytes
        self.unsynced += 1
        if self.buffer.count >= Self.chunkBytes { try self.flush() }
        if self.durable && (self.unsynced >= Self.syncRecords || self.clock.now - self.lastSync >= Self.syncInterval) {
            try self.flush()
            try self.sync()
        }
        return record
    }

    /// Writes what is buffered.
    func flush() throws {
        guard !self.buffer.isEmpty else { return }
        try BatchFile.writeAll(self.fd, self.buffer, path: self.path)
        self.buffer.removeAll(keepingCapacity: true)
    }

    func sync() throws {
        if self.durable { try BatchFile.sync(self.fd, path: self.path) }
        self.unsynced = 0
        self.lastSync = self.clock.now
    }

    func finish() throws {
        try self.flush()
        try self.sync()
    }
}

/// `--out-dir DIR`: `DIR/<name>.json` per wrapped item, never over an existing file, made durable
/// in groups without an `fsync` per file, with a journal that a rerun checks.
///
/// Each item's file is first written to `DIR/.formattest-staging/<line>.json`. Every
/// ``groupSize`` items (or ``groupInterval``), one group is committed: (1) one `syncfs` makes the
/// group's staged files durable (and the previous group's links); (2) the previous group's staged
/// names are removed; (3) the group's records are appended to the journal
/// `DIR/.formattest-batch.jsonl`, which is `fsync`ed; (4) each staged file is hard-linked to
/// `DIR/<name>.json` (`link` never replaces a file). So every journal record names a file that is
/// durable under its final or its staged name, and every final file has its record: a rerun
/// checks each record's file by its SHA-256, finishes a link a crash interrupted, and removes
/// staged files that have no record.
final class BatchDirectoryOutput: BatchOutput {
    static let groupSize = 256
    static let groupInterval: Duration = .seconds(1)
    static let journalName = ".formattest-batch.jsonl"
    static let stagingName = ".formattest-staging"

    private let directory: String
    private let staging: String
    private let journal: BatchLinesOutput
    private var group: [(record: BatchRecord, staged: String?, final: String?)] = []
    private var groupNames: Set<String> = []
    /// Staged names of the last committed group, removed once the next `syncfs` made its links durable.
    private var linkedStaged: [String] = []
    private let clock = ContinuousClock()
    private var groupStart: ContinuousClock.Instant
    private var stagingExists = false

    init(directory: String) throws {
        self.directory = directory
        self.staging = directory + "/" + Self.stagingName
        self.journal = try BatchLinesOutput(path: directory + "/" + Self.journalName)
        self.groupStart = ContinuousClock.now
    }

    static func journalPath(_ directory: String) -> String { directory + "/" + Self.journalName }

    func prepareAppend(at validEnd: UInt64) throws {
        // Staged files of items with no record were never committed: their lines are done again.
        let leftovers = (try? FileManager.default.contentsOfDirectory(atPath: self.staging)) ?? []
        for name in leftovers { unlink(self.staging + "/" + name) }
        try self.journal.prepareAppend(at: validEnd)
    }

    func check(_ record: BatchRecord) throws {
        guard case .file(let path, let sha256) = record.outcome else { return }
        guard !path.contains("/"), !path.hasPrefix(".") else {
            throw UsageError("\(Self.journalPath(self.directory)): line \(record.line) names \(path), not a file of this directory")
        }
        let final = self.directory + "/" + path
        let staged = self.staging + "/\(record.line).json"
        if FileManager.default.fileExists(atPath: final) {
            guard BatchFile.sha256(ofFileAt: final) == sha256 else {
                throw UsageError("\(final) is not the file the journal recorded for line \(record.line) (SHA-256 differs); not resuming over it")
            }
            unlink(staged)
            return
        }
        // The crash came between the journal and the link: the staged file is the output.
        guard BatchFile.sha256(ofFileAt: staged) == sha256, link(staged, final) == 0 else {
            throw UsageError("\(final), recorded for line \(record.line), is missing; not resuming without it")
        }
        unlink(staged)
    }

    func write(_ record: BatchRecord) throws -> BatchRecord {
        guard case .tokens(let tokens) = record.outcome, let name = record.name else {
            self.group.append((record, nil, nil))
            try self.commitIfDue()
            return record
        }
        let file = "\(name).json"
        let final = self.directory + "/" + file
        if self.groupNames.contains(file) || FileManager.default.fileExists(atPath: final) {
            var failed = record
            failed.outcome = .error(code: "exists", message: "\(file) exists and is not overwritten")
            self.group.append((failed, nil, nil))
            try self.commitIfDue()
            return failed
        }
        if !self.stagingExists {
            do {
                try FileManager.default.createDirectory(atPath: self.staging, withIntermediateDirectories: true)
            } catch {
                throw UsageError("cannot create \(self.staging)")
            }
            self.stagingExists = true
        }
        let staged = self.staging + "/\(record.line).json"
        let fd = open(staged, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw UsageError("cannot create \(staged): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        try BatchFile.writeAll(fd, tokens, path: staged)
        var written = record
        written.outcome = .file(path: file, sha256: HexCoding.encode(SHA256.hash(data: tokens)))
        self.group.append((written, staged, final))
        self.groupNames.insert(file)
        try self.commitIfDue()
        return written
    }

    private func commitIfDue() throws {
        if self.group.count >= Self.groupSize || self.clock.now - self.groupStart >= Self.groupInterval { try self.commit() }
    }

    private func commit() throws {
        // (1) The group's staged files, and the previous group's links, durable at once.
        try BatchFile.syncFileSystem(holding: self.directory)
        // (2) The previous group's staged names: its final names are durable now.
        for staged in self.linkedStaged { unlink(staged) }
        self.linkedStaged = []
        // (3) The records, durable before any final name appears.
        for entry in self.group { _ = try self.journal.write(entry.record) }
        try self.journal.finish()
        // (4) The final names; `link` fails rather than replace a file.
        for entry in self.group {
            guard let staged = entry.staged, let final = entry.final else { continue }
            guard link(staged, final) == 0 else {
                throw UsageError(
                    "\(final) appeared while the batch ran (\(String(cString: strerror(errno)))); the journal records line \(entry.record.line) as written to it, so rerunning will report it"
                )
            }
            self.linkedStaged.append(staged)
        }
        self.group = []
        self.groupNames = []
        self.groupStart = self.clock.now
    }

    func finish() throws {
        try self.commit()
        // The last group's links, durable; then its staged names go.
        try BatchFile.syncFileSystem(holding: self.directory)
        for staged in self.linkedStaged { unlink(staged) }
        self.linkedStaged = []
        try? FileManager.default.removeItem(atPath: self.staging)
    }
}
