//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestClient
import FormAttestForm
import Foundation
import Testing

struct KeyPoolTests {
    final class Directory {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("keypool-\(UUID().uuidString)")
        deinit { try? FileManager.default.removeItem(at: self.url) }
    }

    static func entry(_ index: Int, at date: Date) -> KeyPoolEntry {
        KeyPoolEntry(
            keyId: Data(repeating: UInt8(index), count: 32).base64EncodedString(),
            attestation: Data([0xA3, UInt8(index)]),
            challenge: "challenge-\(index)",
            createdAt: date
        )
    }

    @Test("entries are laid out as specified, taken oldest first, each once, and deleted when used")
    func lifecycle() throws {
        let directory = Directory()
        let clock = ManualClock()
        let pool = try KeyPool(containerDirectory: directory.url, now: { clock.now })
        for index in 0..<3 {
            try pool.add(Self.entry(index, at: clock.now.addingTimeInterval(Double(index))))
        }
        let first = Self.entry(0, at: clock.now)
        let entryDirectory = directory.url.appendingPathComponent("AppAttest/KeyPool/\(Base64URL.encode(Data(base64Encoded: first.keyId)!))")
        for file in ["keyId.txt", "attestation.dat", "challenge.txt", "metadata.json"] {
            #expect(FileManager.default.fileExists(atPath: entryDirectory.appendingPathComponent(file).path), "\(file)")
        }
        #expect(FileManager.default.fileExists(atPath: directory.url.appendingPathComponent("AppAttest/pool_status.json").path))

        let taken = try #require(try pool.take())
        #expect(taken.keyId == first.keyId)
        #expect(taken.attestation == first.attestation)
        #expect(taken.challenge == "challenge-0")
        #expect(try pool.status().available == 2)
        #expect(try pool.status().inUse == 1)
        try pool.markUsed(taken)
        #expect(try pool.status().inUse == 0)
        #expect(try pool.take()?.keyId == Self.entry(1, at: clock.now).keyId)
        #expect(try pool.take()?.keyId == Self.entry(2, at: clock.now).keyId)
        #expect(try pool.take() == nil)
    }

    @Test("a keyId already in the pool is refused")
    func duplicate() throws {
        let directory = Directory()
        let pool = try KeyPool(containerDirectory: directory.url)
        try pool.add(Self.entry(1, at: Date()))
        #expect(throws: KeyPool.PoolError.self) { try pool.add(Self.entry(1, at: Date())) }
        #expect(try pool.availableEntries().count == 1)
    }

    @Test("a half-written entry (a crash mid-write) is never visible, and is cleaned up an hour later by the pool's clock")
    func crashMidWrite() throws {
        let directory = Directory()
        let clock = ManualClock()
        let pool = try KeyPool(containerDirectory: directory.url, now: { clock.now })
        // What a crash between two file writes leaves: a staging directory, stamped with the
        // pool's clock when the write began, with some files.
        let started = Int64(clock.now.timeIntervalSince1970 * 1000)
        let staging = directory.url.appendingPathComponent("AppAttest/KeyPool/.staging-\(started)-crashed")
        try FileManager.default.createDirectory(at: staging, withIntermediateDirectories: true)
        try Data("k".utf8).write(to: staging.appendingPathComponent("keyId.txt"))
        // File times play no part: an ancient modification time does not make it old.
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSince1970: 0)], ofItemAtPath: staging.path)
        #expect(try pool.availableEntries().isEmpty)
        #expect(try pool.take() == nil)
        clock.advance(by: 3599)
        try pool.prune()
        #expect(FileManager.default.fileExists(atPath: staging.path), "removed before it was an hour old by the pool's clock")
        clock.advance(by: 2)
        try pool.prune()
        #expect(!FileManager.default.fileExists(atPath: staging.path))
    }

    @Test("a staging directory with no stamp is adopted at first sight and removed an hour later")
    func unstampedStaging() throws {
        let directory = Directory()
        let clock = ManualClock()
        let pool = try KeyPool(containerDirectory: directory.url, now: { clock.now })
        let poolDirectory = directory.url.appendingPathComponent("AppAttest/KeyPool")
        let staging = poolDirectory.appendingPathComponent(".staging-crashed")
        try FileManager.default.createDirectory(at: staging, withIntermediateDirectories: true)
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSince1970: 0)], ofItemAtPath: staging.path)
        func stagingNames() throws -> [String] {
            try FileManager.default.contentsOfDirectory(atPath: poolDirectory.path).filter { $0.hasPrefix(".staging-") }
        }
        try pool.prune()
        let adopted = try stagingNames()
        #expect(adopted.count == 1 && adopted != [".staging-crashed"], "\(adopted)")
        #expect(adopted.first?.hasPrefix(".staging-\(Int64(clock.now.timeIntervalSince1970 * 1000))-") == true, "\(adopted)")
        clock.advance(by: 1800)
        try pool.prune()
        #expect(try stagingNames() == adopted)
        clock.advance(by: 1801)
        try pool.prune()
        #expect(try stagingNames().isEmpty)
    }

    @Test(
        "an entry whose metadata time is hostile (another process wrote it) is skipped and pruned, never a crash",
        arguments: [
            "2026-01-01T00:00:00.0000000000000000000000000000000000000001Z", "2026-01-01T17:51:13+01:00Z", "\u{FF12}026-01-01T00:00:00Z",
        ])
    func hostileMetadata(createdAt: String) throws {
        let directory = Directory()
        let clock = ManualClock()
        let pool = try KeyPool(containerDirectory: directory.url, now: { clock.now })
        try pool.add(Self.entry(1, at: clock.now))
        let entry = directory.url.appendingPathComponent("AppAttest/KeyPool/hostile")
        try FileManager.default.createDirectory(at: entry, withIntermediateDirectories: true)
        try Data("k".utf8).write(to: entry.appendingPathComponent("keyId.txt"))
        try Data([0xA0]).write(to: entry.appendingPathComponent("attestation.dat"))
        try Data("c".utf8).write(to: entry.appendingPathComponent("challenge.txt"))
        try Data(#"{"keyId":"k","createdAt":"\#(createdAt)","challengeExpiresAt":"\#(createdAt)"}"#.utf8).write(
            to: entry.appendingPathComponent("metadata.json"))
        #expect(try pool.availableEntries().map(\.challenge) == ["challenge-1"])
        #expect(try pool.prune() == 1)
        #expect(!FileManager.default.fileExists(atPath: entry.path))
        #expect(try pool.take()?.challenge == "challenge-1")
    }

    @Test("entries older than 30 days are never handed out and are pruned")
    func expiry() throws {
        let directory = Directory()
        let clock = ManualClock()
        let pool = try KeyPool(containerDirectory: directory.url, now: { clock.now })
        try pool.add(Self.entry(1, at: clock.now))
        try pool.add(Self.entry(2, at: clock.now.addingTimeInterval(86_400)))
        clock.advance(by: 30 * 86_400 + 1)
        #expect(try pool.availableEntries().map(\.challenge) == ["challenge-2"])
        #expect(try pool.prune() == 1)
        #expect(try pool.take()?.challenge == "challenge-2")
    }

    @Test("refill tops up to the target size once below the threshold")
    func refill() async throws {
        let directory = Directory()
        let pool = try KeyPool(containerDirectory: directory.url, configuration: .init(targetSize: 4, refillThreshold: 2))
        var made = 0
        let make = { () async throws -> KeyPoolEntry in
            made += 1
            return Self.entry(made, at: Date())
        }
        #expect(try await pool.refillIfNeeded(make) == 4)
        #expect(try pool.needsRefill() == false)
        #expect(try await pool.refillIfNeeded(make) == 0)
        _ = try pool.take()
        _ = try pool.take()
        _ = try pool.take()
        #expect(try pool.needsRefill())
        #expect(try await pool.refillIfNeeded(make) == 3)
        #expect(try pool.status().available == 4)
    }

    @Test("threads taking concurrently never get the same key")
    func concurrentTakes() async throws {
        let directory = Directory()
        let pool = try KeyPool(containerDirectory: directory.url)
        for index in 0..<40 { try pool.add(Self.entry(index, at: Date().addingTimeInterval(Double(index)))) }
        let taken = try await withThrowingTaskGroup(of: [String].self) { group in
            for _ in 0..<8 {
                group.addTask {
                    var mine: [String] = []
                    while let entry = try pool.take() { mine.append(entry.keyId) }
                    return mine
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        #expect(taken.count == 40)
        #expect(Set(taken).count == 40)
    }
}
