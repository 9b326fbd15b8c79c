//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The POSIX reads, writes and syncs the log's files are made of (``TileLogDirectory``,
/// ``ContentAddressedDirectory``).
enum FileIO {
    typealias Failure = TileLogDirectory.Failure

    /// The whole file, or nil when it does not exist.
    static func read(_ path: String) throws(Failure) -> [UInt8]? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            if errno == ENOENT { return nil }
            throw Failure("cannot open \(path): \(Self.lastError())")
        }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw Failure("cannot read \(path): \(Self.lastError())")
            }
            if count == 0 { return bytes }
            bytes += buffer[..<count]
        }
    }

    static func writeAll(_ bytes: [UInt8], to descriptor: Int32, path: String) throws(Failure) {
        var written = 0
        while written < bytes.count {
            let count = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress! + written, $0.count - written) }
            if count < 0 {
                if errno == EINTR { continue }
                throw Failure("cannot write \(path): \(Self.lastError())")
            }
            written += count
        }
    }

    /// Creates `path` (0600; with `exclusive` only if it does not exist, else truncating it),
    /// writes `bytes` and syncs the file.
    static func writeSynced(_ bytes: [UInt8], to path: String, exclusive: Bool) throws(Failure) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (exclusive ? O_EXCL : O_TRUNC), 0o600)
        guard descriptor >= 0 else { throw Failure("cannot open \(path): \(Self.lastError())") }
        defer { close(descriptor) }
        try Self.writeAll(bytes, to: descriptor, path: path)
        guard fsync(descriptor) == 0 else { throw Failure("cannot sync \(path): \(Self.lastError())") }
    }

    static func syncDirectory(_ path: String) throws(Failure) {
        let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw Failure("cannot open \(path) to sync it: \(Self.lastError())") }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw Failure("cannot sync \(path): \(Self.lastError())") }
    }

    /// Creates `path` and its missing parents below `root` (mode 0700), syncing each parent that
    /// gained an entry, so that a file created in it survives a crash.
    static func makeDurableDirectory(_ path: String, inside root: String) throws(Failure) {
        guard path.count > root.count, access(path, F_OK) != 0 else { return }
        let parent = (path as NSString).deletingLastPathComponent
        try Self.makeDurableDirectory(parent, inside: root)
        guard mkdir(path, 0o700) == 0 || errno == EEXIST else { throw Failure("cannot create \(path): \(Self.lastError())") }
        try Self.syncDirectory(parent)
    }

    static func lastError() -> String { String(cString: strerror(errno)) }
}
