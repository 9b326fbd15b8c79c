//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Files named by the SHA-256 of their bytes, each written once: the evidence log's key
/// registrations (issue 34), `<directory>/<2 hex>/<2 hex>/<64 hex><suffix>`.
///
/// Two levels of 256 directories keep every directory small (at 10,000,000 files, about 150 in
/// each of the 65,536 leaf directories). A file is written to a temporary name in its directory,
/// synced, then given its name with `link(2)`, which never replaces a file: the name appears with
/// all its bytes or not at all, whatever crashes, and a name that exists must hold the same bytes
/// (else ``store(_:)`` refuses). The directory is synced before ``store(_:)`` returns. Files are
/// 0600, directories 0700.
public struct ContentAddressedDirectory: Sendable {
    public typealias Failure = TileLogDirectory.Failure

    /// The directory the files are under (created on the first ``store(_:)``, in an existing parent).
    public let directory: String
    /// Appended to each file's name (`.json`).
    public let suffix: String

    public init(directory: String, suffix: String = ".json") {
        self.directory = directory
        self.suffix = suffix
    }

    /// An id's path below ``directory``: `ab/cd/abcd….json` for the lowercase hex of `id`.
    public func relativePath(of id: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        let hex = String(decoding: id.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0F)]] }, as: UTF8.self)
        return "\(hex.prefix(2))/\(hex.dropFirst(2).prefix(2))/\(hex)\(self.suffix)"
    }

    /// An id's file.
    public func path(of id: [UInt8]) -> String { self.directory + "/" + self.relativePath(of: id) }

    /// SHA-256 of `bytes`: the id they are stored under.
    public static func id(of bytes: [UInt8]) -> [UInt8] { Array(SHA256.hash(data: bytes)) }

    /// Stores `bytes` under their SHA-256 and returns it, once the file and its directory are
    /// durable. A file already there with the same bytes is kept (and its directory synced, in
    /// case its writer has not yet); one with other bytes is refused and left as it is.
    @discardableResult
    public func store(_ bytes: [UInt8]) throws(Failure) -> [UInt8] {
        let id = Self.id(of: bytes)
        let path = self.path(of: id)
        let parent = (path as NSString).deletingLastPathComponent
        try FileIO.makeDurableDirectory(parent, inside: (self.directory as NSString).deletingLastPathComponent)
        var random = SystemRandomNumberGenerator()
        let temporary = parent + "/.\((path as NSString).lastPathComponent).\(String(random.next() as UInt64, radix: 16)).tmp"
        defer { unlink(temporary) }
        try FileIO.writeSynced(bytes, to: temporary, exclusive: true)
        if link(temporary, path) != 0 {
            guard errno == EEXIST else { throw Failure("cannot link \(path): \(FileIO.lastError())") }
            guard try FileIO.read(path) == bytes else {
                throw Failure("\(path) exists and does not hold the bytes its name is the SHA-256 of: refusing to replace it")
            }
        }
        try FileIO.syncDirectory(parent)
        return id
    }

    /// The file stored under `id`, or nil when there is none. The caller checks that its bytes
    /// hash to `id` (a file can be altered after it was stored).
    public func read(_ id: [UInt8]) throws(Failure) -> [UInt8]? {
        try FileIO.read(self.path(of: id))
    }
}
