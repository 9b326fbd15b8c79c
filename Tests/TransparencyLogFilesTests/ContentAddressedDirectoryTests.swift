//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
import Foundation
import Testing
import TransparencyLogFiles

/// The evidence log's key registrations: files named by their SHA-256, written once.
struct ContentAddressedDirectoryTests {
    /// A fresh directory whose `registrations` subdirectory is the store (created by the first write).
    final class Fixture {
        let root = NSTemporaryDirectory() + "cas-" + UUID().uuidString
        var files: ContentAddressedDirectory { ContentAddressedDirectory(directory: self.root + "/registrations") }
        init() throws { try FileManager.default.createDirectory(atPath: self.root, withIntermediateDirectories: false) }
        deinit { try? FileManager.default.removeItem(atPath: self.root) }

        func mode(_ path: String) throws -> Int {
            ((try FileManager.default.attributesOfItem(atPath: path))[.posixPermissions] as? NSNumber)?.intValue ?? -1
        }

        /// Every file under the store, relative to it.
        func listing() -> [String] {
            (FileManager.default.enumerator(atPath: self.files.directory)?.allObjects as? [String] ?? []).filter { name in
                var isDirectory: ObjCBool = false
                return FileManager.default.fileExists(atPath: self.files.directory + "/" + name, isDirectory: &isDirectory) && !isDirectory.boolValue
            }.sorted()
        }
    }

    @Test("a file is stored under its SHA-256 in two levels of directories, 0600 in 0700, and reads back")
    func stores() throws {
        let fixture = try Fixture()
        let bytes = Array(#"{"type":"formattest-key-registration"}"#.utf8)
        let id = try fixture.files.store(bytes)
        #expect(id == Array(SHA256.hash(data: bytes)))
        let hex = id.map { String(format: "%02x", $0) }.joined()
        #expect(fixture.files.relativePath(of: id) == "\(hex.prefix(2))/\(hex.dropFirst(2).prefix(2))/\(hex).json")
        #expect(fixture.listing() == [fixture.files.relativePath(of: id)], "no temporary file is left")
        #expect(FileManager.default.contents(atPath: fixture.files.path(of: id)) == Data(bytes))
        #expect(try fixture.files.read(id) == bytes)
        #expect(try fixture.mode(fixture.files.path(of: id)) == 0o600)
        for directory in [
            fixture.files.directory, fixture.files.directory + "/" + hex.prefix(2),
            fixture.files.directory + "/" + hex.prefix(2) + "/" + hex.dropFirst(2).prefix(2),
        ] {
            #expect(try fixture.mode(directory) == 0o700, "\(directory)")
        }
        #expect(try fixture.files.read(Array(SHA256.hash(data: [1]))) == nil, "an id never stored")
    }

    @Test("storing the same bytes again keeps the one file; a file at the name with other bytes is refused and left as it is")
    func once() throws {
        let fixture = try Fixture()
        let bytes = [UInt8](repeating: 0x41, count: 9_000)
        let id = try fixture.files.store(bytes)
        #expect(try fixture.files.store(bytes) == id)
        #expect(fixture.listing().count == 1)
        // Someone altered the file: storing the original bytes must not hide it by replacing it.
        var altered = bytes
        altered[4_500] = 0x42
        #expect(FileManager.default.createFile(atPath: fixture.files.path(of: id) + ".x", contents: Data(altered)))
        #expect(rename(fixture.files.path(of: id) + ".x", fixture.files.path(of: id)) == 0)
        #expect(throws: ContentAddressedDirectory.Failure.self) { try fixture.files.store(bytes) }
        #expect(try fixture.files.read(id) == altered)
        #expect(fixture.listing().count == 1, "no temporary file is left")
        // Other bytes go to their own name.
        let other = try fixture.files.store(altered)
        #expect(other != id && fixture.listing().count == 2)
    }

    @Test("a store whose parent directory does not exist is refused (nothing is created above it)")
    func missingParent() throws {
        let fixture = try Fixture()
        let files = ContentAddressedDirectory(directory: fixture.root + "/missing/registrations")
        #expect(throws: ContentAddressedDirectory.Failure.self) { try files.store([1, 2, 3]) }
        #expect(!FileManager.default.fileExists(atPath: fixture.root + "/missing"))
    }
}
