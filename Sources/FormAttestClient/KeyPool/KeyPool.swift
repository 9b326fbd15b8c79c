//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Foundation
import RFC3339

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Pre-attested keys in a shared container directory, for app extensions (which cannot call App
/// Attest themselves).
///
/// Layout under the container:
/// ```
/// AppAttest/KeyPool/<keyId base64url>/{keyId.txt, attestation.dat, challenge.txt, metadata.json}
/// AppAttest/InUse/<keyId base64url>.<unique>/   entries taken by an extension
/// AppAttest/pool_status.json
/// ```
/// - Writes are atomic: an entry is written in a hidden staging directory, then renamed into
///   place, so a crash never leaves a half-written entry visible; `pool_status.json` is written
///   to a temporary file and renamed.
/// - Taking is exclusive across processes: an entry moves to `InUse/` by `rename(2)`, which only
///   one process can win for a given source; the losers move on to the next entry.
/// - Entries older than ``Configuration/maximumAge`` (default 30 days) are pruned, never handed out.
public struct KeyPool: Sendable {
    public struct Configuration: Sendable, Hashable {
        /// How many keys the main app keeps ready. Default 10.
        public var targetSize: Int
        /// Refill when fewer than this many remain. Default 5.
        public var refillThreshold: Int
        /// Entries older than this are removed. Default 30 days (the pool challenge's lifetime).
        public var maximumAge: TimeInterval

        public init(targetSize: Int = 10, refillThreshold: Int = 5, maximumAge: TimeInterval = 30 * 86_400) {
            self.targetSize = targetSize
            self.refillThreshold = refillThreshold
            self.maximumAge = maximumAge
        }
    }

    /// The pool's status file contents.
    public struct Status: Sendable, Hashable, Codable {
        public var available: Int
        public var inUse: Int
        public var targetSize: Int
        public var needsRefill: Bool
        public var updatedAt: Date
    }

    /// An error of the pool's file operations.
    public struct PoolError: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// `<container>/AppAttest`.
    public let root: URL
    public let configuration: Configuration
    private let now: @Sendable () -> Date

    private var poolDirectory: URL { self.root.appendingPathComponent("KeyPool") }
    private var inUseDirectory: URL { self.root.appendingPathComponent("InUse") }
    private var statusFile: URL { self.root.appendingPathComponent("pool_status.json") }

    /// Opens (and creates) the pool in a container directory shared by the app and its extensions.
    public init(
        containerDirectory: URL,
        configuration: Configuration = Configuration(),
        now: @escaping @Sendable () -> Date = { Date() }
    ) throws {
        self.root = containerDirectory.appendingPathComponent("AppAttest")
        self.configuration = configuration
        self.now = now
        for directory in [self.poolDirectory, self.inUseDirectory] {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        }
    }

    // MARK: - Main app: filling

    /// Adds an entry atomically.
    ///
    /// - Throws: ``PoolError`` when an entry for this keyId exists, or on a file error.
    public func add(_ entry: KeyPoolEntry) throws {
        let staging = self.poolDirectory.appendingPathComponent(StagingName.make(at: self.now()))
        try FileManager.default.createDirectory(at: staging, withIntermediateDirectories: false)
        do {
            try Data(entry.keyId.utf8).write(to: staging.appendingPathComponent("keyId.txt"))
            try entry.attestation.write(to: staging.appendingPathComponent("attestation.dat"))
            try Data(entry.challenge.utf8).write(to: staging.appendingPathComponent("challenge.txt"))
            let metadata = KeyPoolEntry.Metadata(
                keyId: entry.keyId,
                createdAt: entry.createdAt,
                challengeExpiresAt: entry.challengeExpiresAt
            )
            try Self.encoder.encode(metadata).write(to: staging.appendingPathComponent("metadata.json"))
            let destination = self.poolDirectory.appendingPathComponent(entry.directoryName)
            // rename(2) of a directory onto an existing non-empty directory fails: no overwrite.
            guard !FileManager.default.fileExists(atPath: destination.path) else {
                throw PoolError(description: "the pool already holds key \(entry.keyId)")
            }
            try Self.renameAtomically(staging, destination)
        } catch {
            try? FileManager.default.removeItem(at: staging)
            throw error
        }
        try self.writeStatus()
    }

    /// Tops the pool up to ``Configuration/targetSize`` when it fell below the threshold.
    ///
    /// - Parameter makeEntry: makes one entry (asks the server for a pool challenge, then has the
    ///   ``AppAttestClient`` register a key over it).
    /// - Returns: how many entries were added.
    public func refillIfNeeded(_ makeEntry: () async throws -> KeyPoolEntry) async throws -> Int {
        try self.prune()
        let available = try self.availableEntries().count
        guard available < self.configuration.refillThreshold else { return 0 }
        var added = 0
        for _ in available..<self.configuration.targetSize {
            try self.add(try await makeEntry())
            added += 1
        }
        return added
    }

    // MARK: - Extensions: taking

    /// Takes the oldest usable entry for this process alone, or returns `nil` when none is left.
    public func take() throws -> KeyPoolEntry? {
        for entry in try self.availableEntries() {
            let source = self.poolDirectory.appendingPathComponent(entry.directoryName)
            let destination = self.inUseDirectory.appendingPathComponent("\(entry.directoryName).\(UUID().uuidString)")
            guard (try? Self.renameAtomically(source, destination)) != nil else {
                continue  // Another process took it first.
            }
            try self.writeStatus()
            return entry
        }
        return nil
    }

    /// Marks a taken entry used: it is deleted and never handed out again.
    public func markUsed(_ entry: KeyPoolEntry) throws {
        let prefix = entry.directoryName + "."
        for name in try FileManager.default.contentsOfDirectory(atPath: self.inUseDirectory.path)
        where name.hasPrefix(prefix) {
            try FileManager.default.removeItem(at: self.inUseDirectory.appendingPathComponent(name))
        }
        try self.writeStatus()
    }

    // MARK: - Reading and housekeeping

    /// Entries ready to take, oldest first; expired ones are left out.
    public func availableEntries() throws -> [KeyPoolEntry] {
        let cutoff = self.now().addingTimeInterval(-self.configuration.maximumAge)
        return try self.allEntries().filter { $0.createdAt > cutoff }.sorted { $0.createdAt < $1.createdAt }
    }

    /// Whether the main app should refill.
    public func needsRefill() throws -> Bool {
        try self.availableEntries().count < self.configuration.refillThreshold
    }

    /// Removes expired entries and staging directories left by a crash. Returns how many went.
    @discardableResult
    public func prune() throws -> Int {
        let cutoff = self.now().addingTimeInterval(-self.configuration.maximumAge)
        var removed = 0
        for name in try FileManager.default.contentsOfDirectory(atPath: self.poolDirectory.path) {
            let url = self.poolDirectory.appendingPathComponent(name)
            if name.hasPrefix(StagingName.prefix) {
                // Staging directories older than an hour belong to a process that died mid-write.
                // Their age comes from the injected clock, stamped into the name when the write
                // began; file times follow the real clock, which the injected one need not.
                guard let started = StagingName.startTime(of: name) else {
                    // No stamp (an older version's, or someone else's): adopt it with a stamp of
                    // now, so that it goes an hour from now by the same clock.
                    // (Another process may have adopted or removed it first: that is as good.)
                    try? Self.renameAtomically(url, self.poolDirectory.appendingPathComponent(StagingName.make(at: self.now())))
                    continue
                }
                if self.now().timeIntervalSince(started) > StagingName.abandonedAfter {
                    try FileManager.default.removeItem(at: url)
                }
                continue
            }
            guard let entry = try? self.readEntry(at: url), entry.createdAt > cutoff else {
                try FileManager.default.removeItem(at: url)
                removed += 1
                continue
            }
        }
        try self.writeStatus()
        return removed
    }

    /// The status now (also written to `pool_status.json` after every change).
    public func status() throws -> Status {
        let available = try self.availableEntries().count
        let inUse = try FileManager.default.contentsOfDirectory(atPath: self.inUseDirectory.path).count
        return Status(
            available: available,
            inUse: inUse,
            targetSize: self.configuration.targetSize,
            needsRefill: available < self.configuration.refillThreshold,
            updatedAt: self.now()
        )
    }

    private func allEntries() throws -> [KeyPoolEntry] {
        try FileManager.default.contentsOfDirectory(atPath: self.poolDirectory.path)
            .filter { !$0.hasPrefix(".") }
            .compactMap { try? self.readEntry(at: self.poolDirectory.appendingPathComponent($0)) }
    }

    private func readEntry(at directory: URL) throws -> KeyPoolEntry {
        let metadata = try Self.decoder.decode(
            KeyPoolEntry.Metadata.self,
            from: Data(contentsOf: directory.appendingPathComponent("metadata.json"))
        )
        return KeyPoolEntry(
            keyId: String(decoding: try Data(contentsOf: directory.appendingPathComponent("keyId.txt")), as: UTF8.self),
            attestation: try Data(contentsOf: directory.appendingPathComponent("attestation.dat")),
            challenge: String(decoding: try Data(contentsOf: directory.appendingPathComponent("challenge.txt")), as: UTF8.self),
            createdAt: metadata.createdAt,
            challengeExpiresAt: metadata.challengeExpiresAt
        )
    }

    private func writeStatus() throws {
        let temporary = self.root.appendingPathComponent(".pool_status-\(UUID().uuidString).json")
        try Self.encoder.encode(try self.status()).write(to: temporary)
        try Self.renameAtomically(temporary, self.statusFile)
    }

    /// POSIX rename(2): atomic on one file system; fails (ENOENT) for all but one concurrent
    /// renamer of the same source.
    private static func renameAtomically(_ source: URL, _ destination: URL) throws {
        let result = source.withUnsafeFileSystemRepresentation { from in
            destination.withUnsafeFileSystemRepresentation { to in
                guard let from, let to else { return Int32(-1) }
                return rename(from, to)
            }
        }
        guard result == 0 else {
            throw PoolError(description: "rename \(source.lastPathComponent) -> \(destination.lastPathComponent): errno \(errno)")
        }
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .rfc3339UTC()
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }()

    private static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .rfc3339UTC
        return decoder
    }()
}

/// The name of a staging directory: `.staging-<start, ms since 1970 by the pool's clock>-<UUID>`.
enum StagingName {
    static let prefix = ".staging-"
    /// A write takes milliseconds; a staging directory this old was left by a crash.
    static let abandonedAfter: TimeInterval = 3600

    static func make(at start: Date) -> String {
        let milliseconds = Int64((start.timeIntervalSince1970 * 1000).rounded(.down))
        return "\(prefix)\(milliseconds)-\(UUID().uuidString)"
    }

    /// The stamped start, or nil when the name carries none.
    static func startTime(of name: String) -> Date? {
        guard name.hasPrefix(prefix) else { return nil }
        let rest = name.utf8.dropFirst(prefix.utf8.count)
        let digits = rest.prefix { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
        // 1 to 15 digits (beyond the year 33000 in ms), followed by the separator.
        guard (1...15).contains(digits.count), rest.dropFirst(digits.count).first == UInt8(ascii: "-") else { return nil }
        let milliseconds = digits.reduce(Int64(0)) { $0 * 10 + Int64($1 - UInt8(ascii: "0")) }
        return Date(timeIntervalSince1970: Double(milliseconds) / 1000)
    }
}
