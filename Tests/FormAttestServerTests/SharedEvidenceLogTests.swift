//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestFlows
import FormAttestServer
import FormAttestTestSupport
import Foundation
import Testing
import TransparencyLog
import TransparencyLogFiles

/// A ``SharedLogStore`` in memory, as MongoDB's behaves (a unique insert per first index, batches
/// read in index order); `alterRegistrations` plays a store whose documents were changed.
actor MemorySharedLog: SharedLogStore {
    private var batches: [UInt64: LogBatch] = [:]
    private var registrations: [[UInt8]: [UInt8]] = [:]
    private var status: SharedLogStatus?
    var alterRegistrations = false

    /// Run once, when a batch is about to be inserted at `index`: what happens meanwhile.
    private var beforeInsert: (index: UInt64, body: @Sendable () async throws -> Void)?

    func setBeforeInsert(at index: UInt64, _ body: @escaping @Sendable () async throws -> Void) { self.beforeInsert = (index, body) }

    func insertLogBatch(_ batch: LogBatch) async throws(StoreError) -> Bool {
        if let hook = self.beforeInsert, hook.index == batch.first {
            self.beforeInsert = nil
            try? await hook.body()
        }
        guard self.batches[batch.first] == nil else { return false }
        self.batches[batch.first] = batch
        return true
    }

    func takeBackLogBatch(first: UInt64, rootAfter: [UInt8]) async throws(StoreError) -> Bool {
        guard self.batches[first]?.rootAfter == rootAfter else { return false }
        self.batches[first] = nil
        return true
    }

    func logBatches(from first: UInt64, limit: Int) async throws(StoreError) -> [LogBatch] {
        Array(self.batches.keys.filter { $0 >= first }.sorted().prefix(limit).map { self.batches[$0]! })
    }

    func logBatchExtent(before index: UInt64) async throws(StoreError) -> LogBatchExtent? {
        self.batches.keys.filter { $0 < index }.max().map { Self.extent(self.batches[$0]!) }
    }

    func logBatchExtents(from first: UInt64, before end: UInt64, limit: Int) async throws(StoreError) -> [LogBatchExtent] {
        self.batches.keys.filter { $0 >= first && $0 < end }.sorted().prefix(limit).map { Self.extent(self.batches[$0]!) }
    }

    private static func extent(_ batch: LogBatch) -> LogBatchExtent { LogBatchExtent(first: batch.first, end: batch.end, rootAfter: batch.rootAfter) }

    func sharedLogStatus() async throws(StoreError) -> SharedLogStatus? { self.status }

    func replaceSharedLogStatus(_ old: SharedLogStatus?, with new: SharedLogStatus?) async throws(StoreError) -> Bool {
        guard self.status == old else { return false }
        self.status = new
        // The mark is kept with the status (MongoDB: a field of its document).
        if new == nil { self.highWater = LogHighWater(answered: 0) }
        return true
    }

    private var highWater = LogHighWater(answered: 0)

    func logHighWater() async throws(StoreError) -> LogHighWater { self.highWater }

    /// Run once, when the mark is about to be raised to `end`.
    private var beforeRaise: (end: UInt64, body: @Sendable () async throws -> Void)?

    func setBeforeRaise(to end: UInt64, _ body: @escaping @Sendable () async throws -> Void) { self.beforeRaise = (end, body) }

    @discardableResult
    func raiseLogHighWater(to end: UInt64) async throws(StoreError) -> UInt64 {
        if let hook = self.beforeRaise, hook.end == end {
            self.beforeRaise = nil
            try? await hook.body()
        }
        guard self.status != nil else { throw StoreError(code: .unavailable, reason: "no status") }
        let before = self.highWater.answered
        self.highWater.answered = max(before, end)
        return before
    }

    func reportLogHole(at index: UInt64) async throws(StoreError) {
        guard self.status != nil else { return }
        self.highWater.hole = min(self.highWater.hole ?? index, index)
    }

    func clearLogHole(below end: UInt64) async throws(StoreError) {
        if let hole = self.highWater.hole, hole < end { self.highWater.hole = nil }
    }

    /// A writer to the database sets the mark.
    func setHighWater(_ answered: UInt64) { self.highWater.answered = answered }

    /// The store as restored from a backup taken when the log ended at `end`: the batches from
    /// there on and the high-water mark are gone.
    func restore(endingAt end: UInt64) {
        self.batches = self.batches.filter { $0.value.end <= end }
        self.highWater.answered = min(self.highWater.answered, end)
    }

    func storeLogRegistration(id: [UInt8], document: [UInt8]) async throws(StoreError) {
        self.registrations[id] = document
    }

    func logRegistration(id: [UInt8]) async throws(StoreError) -> [UInt8]? {
        guard let document = self.registrations[id] else { return nil }
        return self.alterRegistrations ? document + [0x20] : document
    }

    func setAlterRegistrations(_ alter: Bool) { self.alterRegistrations = alter }

    /// A batch lost (a database restored from an older backup).
    func deleteBatch(first: UInt64) { self.batches[first] = nil }
}

/// The evidence log shared by many instances (issue 34), on a store in memory: the sequencing,
/// the copies and their checks. The same through two real services on MongoDB, with a kill -9:
/// `EvidenceCommandTests` "serve --evidence-log on MongoDB: …".
struct SharedEvidenceLogTests {
    static func configuration(_ directory: URL) throws -> EvidenceLogConfiguration {
        // Catch-ups as often as asked: these tests read the store right after writing it.
        EvidenceLogConfiguration(
            directory: directory.path, signer: try NoteSigner(name: "bank.example/evidence", seed: [UInt8](repeating: 7, count: 32)),
            catchUpInterval: .zero)
    }

    /// Two instances on one store in memory, a having appended `count` leaves (one batch each)
    /// and b having copied them.
    static func twoInstances(_ files: TemporaryFiles, appended count: Int) async throws -> (MemorySharedLog, EvidenceLog, EvidenceLog) {
        let shared = MemorySharedLog()
        let a = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("a")), shared: shared)
        let b = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("b")), shared: shared)
        for n in 0..<count { _ = try await a.append(Self.leaf("a", n)) }
        #expect(try await b.size(atLeast: UInt64(count)) == UInt64(count))
        return (shared, a, b)
    }

    /// A leaf as a version-1 record's payload looks to the log (canonical JSON, `version` 1).
    static func leaf(_ instance: String, _ n: Int) -> [UInt8] { Array("{\"instance\":\"\(instance)\",\"n\":\(n),\"version\":1}".utf8) }

    /// A log of `count` leaves in `directory`, written alone (no shared store).
    static func aloneLog(_ directory: URL, _ count: Int) throws -> TileLogDirectory {
        let log = try TileLogDirectory(directory: directory.path)
        _ = try log.append((0..<count).map { Self.leaf("alone", $0) })
        return log
    }

    @Test("two instances appending at once get one sequence of indexes, and each copy signs the same tree")
    func oneSequence() async throws {
        let files = try TemporaryFiles()
        let shared = MemorySharedLog()
        let a = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("a")), shared: shared)
        let b = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("b")), shared: shared)
        let indexes = try await withThrowingTaskGroup(of: UInt64.self) { group in
            for n in 0..<40 {
                group.addTask { try await a.append(Self.leaf("a", n)) }
                group.addTask { try await b.append(Self.leaf("b", n)) }
            }
            return try await group.reduce(into: [UInt64]()) { $0.append($1) }
        }
        #expect(indexes.sorted() == Array(0..<80))
        let noteA = try await a.checkpoint()
        let noteB = try await b.checkpoint()
        #expect(noteA == noteB)
        let verifier = try NoteVerifier(keyString: try Self.configuration(files.directory).signer.verifierKey)
        let checkpoint = try Checkpoint(body: Array(try SignedNote.open(Array(noteA.utf8), verifier: verifier).utf8))
        #expect(checkpoint.size == 80)
        // Each copy holds every leaf at the index its append was given.
        let copyA = try TileLogDirectory(readingDirectory: files.directory.appendingPathComponent("a").path)
        let copyB = try TileLogDirectory(readingDirectory: files.directory.appendingPathComponent("b").path)
        for index in [UInt64(0), 41, 79] { #expect(try copyA.entry(at: index) == copyB.entry(at: index)) }
        #expect(copyA.root == checkpoint.rootHash && copyB.root == checkpoint.rootHash)
    }

    @Test("a proof for a tree another instance signed is answered once the copy catches up; one never appended to copies at opening")
    func catchUp() async throws {
        let files = try TemporaryFiles()
        let shared = MemorySharedLog()
        let a = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("a")), shared: shared)
        let b = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("b")), shared: shared)
        for n in 0..<5 { #expect(try await a.append(Self.leaf("a", n)) == UInt64(n)) }
        #expect(try await b.size() == 0)
        #expect(try await b.size(atLeast: 5) == 5)
        #expect(try await b.inclusionProof(index: 4, size: 5) == a.inclusionProof(index: 4, size: 5))
        let c = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("c")), shared: shared)
        #expect(try await c.size() == 5)
    }

    @Test("a batch whose stated root is not the copy's is refused: nothing of it is copied, and no index is given past it")
    func forgedBatch() async throws {
        let files = try TemporaryFiles()
        let shared = MemorySharedLog()
        let a = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("a")), shared: shared)
        for n in 0..<2 { _ = try await a.append(Self.leaf("a", n)) }
        // Another writer (a bug, an attacker with the database) inserts a batch with a wrong root.
        let forged = LogBatch(
            first: 2, leaves: [Self.leaf("x", 0)], registrations: [], rootAfter: [UInt8](repeating: 0, count: 32), insertedAt: Date())
        #expect(try await shared.insertLogBatch(forged))
        // A new instance starts (the log stops, not the service), says why, and appends nothing.
        let b = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("b")), shared: shared)
        #expect(await b.stopped?.contains("does not hash to the root it states") == true)
        #expect(try await b.size() == 2)
        await #expect(throws: (any Error).self) { try await b.append(Self.leaf("b", 0)) }
        await #expect(throws: (any Error).self) { try await a.append(Self.leaf("a", 2)) }
        #expect(try await a.size() == 2)
        // The same batch with its true root is copied.
        let honest = files.directory.appendingPathComponent("honest")
        let reference = try TileLogDirectory(directory: honest.path)
        _ = try reference.append([Self.leaf("a", 0), Self.leaf("a", 1), Self.leaf("x", 0)])
        let other = MemorySharedLog()
        let first = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("c")), shared: other)
        for n in 0..<2 { _ = try await first.append(Self.leaf("a", n)) }
        #expect(
            try await other.insertLogBatch(
                LogBatch(first: 2, leaves: [Self.leaf("x", 0)], registrations: [], rootAfter: reference.root, insertedAt: Date())))
        #expect(try await first.size(atLeast: 3) == 3)
    }

    @Test("a directory that is not a copy of the shared log's first leaves is refused at opening, and left as it is")
    func notACopy() async throws {
        let files = try TemporaryFiles()
        let shared = MemorySharedLog()
        let a = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("a")), shared: shared)
        for n in 0..<3 { _ = try await a.append(Self.leaf("a", n)) }
        // A log of its own: the same size, other leaves.
        let alone = files.directory.appendingPathComponent("alone")
        do {
            let log = try TileLogDirectory(directory: alone.path)
            _ = try log.append([Self.leaf("z", 0), Self.leaf("z", 1), Self.leaf("z", 2)])
        }
        do {
            _ = try await EvidenceLog.open(Self.configuration(alone), shared: shared)
            Issue.record("a log that is not a copy was opened as one")
        } catch {
            #expect("\(error)".contains("not a copy of the shared log"), "\(error)")
        }
        #expect(try TileLogDirectory(readingDirectory: alone.path).size == 3)
        // Shorter than the shared log, at a point no batch ends: refused too.
        let short = files.directory.appendingPathComponent("short")
        do {
            let log = try TileLogDirectory(directory: short.path)
            _ = try log.append([Self.leaf("a", 0), Self.leaf("a", 1)])
        }
        let batches = try await shared.logBatches(from: 0, limit: 10)
        if batches.contains(where: { $0.end == 2 }) {
            // The group commit put leaves 0 and 1 in batches of their own: a true prefix, copied.
            #expect(try await EvidenceLog.open(Self.configuration(short), shared: shared).size() == 3)
        } else {
            await #expect(throws: (any Error).self) { try await EvidenceLog.open(Self.configuration(short), shared: shared) }
        }
        // A true prefix that ends inside a batch (a put-back's batch, or files cut back by hand) is
        // completed from it (r10 G7, r11 H9); one whose leaves there differ is refused: a store
        // whose one batch holds three leaves, copies of two.
        let other = MemorySharedLog()
        _ = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("claims")), shared: other)
        let three = try TileLogDirectory(directory: files.directory.appendingPathComponent("three").path)
        _ = try three.append((0..<3).map { Self.leaf("t", $0) })
        #expect(
            try await other.insertLogBatch(
                LogBatch(first: 0, leaves: (0..<3).map { Self.leaf("t", $0) }, registrations: [], rootAfter: three.root, insertedAt: Date())))
        let cut = files.directory.appendingPathComponent("cut")
        do {
            let log = try TileLogDirectory(directory: cut.path)
            _ = try log.append((0..<2).map { Self.leaf("t", $0) })
        }
        #expect(try await EvidenceLog.open(Self.configuration(cut), shared: other).size() == 3)
        #expect(try TileLogDirectory(readingDirectory: cut.path).root == three.root)
        let forked = files.directory.appendingPathComponent("forked")
        do {
            let log = try TileLogDirectory(directory: forked.path)
            _ = try log.append([Self.leaf("t", 0), Self.leaf("z", 1)])
        }
        do {
            _ = try await EvidenceLog.open(Self.configuration(forked), shared: other)
            Issue.record("a copy whose leaves differ inside a batch was opened")
        } catch {
            #expect("\(error)".contains("holds this copy's end (2) but not its leaves"), "\(error)")
        }
        #expect(try TileLogDirectory(readingDirectory: forked.path).size == 2)
    }

    @Test(
        "a log moving into the store: no other instance starts while it moves, and the same log takes a move that stopped over where it stopped (r9 F1, F2)"
    )
    func moveResumes() async throws {
        let files = try TemporaryFiles()
        let shared = MemorySharedLog()
        let alone = files.directory.appendingPathComponent("alone")
        let (size, root, rootAt256) = try {
            let log = try Self.aloneLog(alone, 600)
            return (log.size, log.root, try log.root(size: 256))
        }()
        // A mover that claimed the log and died after its first batch.
        let key = try Self.configuration(files.directory).signer.verifierKey
        #expect(try await shared.replaceSharedLogStatus(nil, with: SharedLogStatus(verifierKey: key, moving: .init(size: size, root: root))))
        let firstBatch = LogBatch(
            first: 0, leaves: (0..<256).map { Self.leaf("alone", $0) }, registrations: [], rootAfter: rootAt256, insertedAt: Date())
        #expect(try await shared.insertLogBatch(firstBatch))
        // An instance with another log (here: none) may not start in the middle of the move.
        do {
            _ = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("b")), shared: shared)
            Issue.record("an instance started while another log was moving in")
        } catch {
            #expect("\(error)".contains("is moving a log of 600 leaves"), "\(error)")
        }
        // The same log takes the move over from leaf 256.
        let mover = try await EvidenceLog.open(Self.configuration(alone), shared: shared)
        #expect(try await shared.sharedLogStatus() == SharedLogStatus(verifierKey: key))
        #expect(try await shared.logBatches(from: 0, limit: 10).map(\.first) == [0, 256, 512])
        #expect(try await mover.append(Self.leaf("a", 600)) == 600)
        let b = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("b")), shared: shared)
        #expect(try await b.size() == 601)
        #expect(try await b.checkpoint() == mover.checkpoint())
    }

    @Test("a directory whose entries do not hash to its tree is refused before it claims the shared log (r9 F3)")
    func damagedMove() async throws {
        let files = try TemporaryFiles()
        let shared = MemorySharedLog()
        let alone = files.directory.appendingPathComponent("alone")
        _ = try Self.aloneLog(alone, 300)
        // One digit of leaf 5's entry changed, its length kept: the tiles still hold the true hash.
        let bundle = alone.appendingPathComponent(TileLayout.entryBundlePath(index: 0)).path
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: bundle)))
        let original = Self.leaf("alone", 5)
        let at = try #require((0...(bytes.count - original.count)).first { Array(bytes[$0..<($0 + original.count)]) == original })
        bytes[at + original.count - 14] = UInt8(ascii: "7")
        try Data(bytes).write(to: URL(fileURLWithPath: bundle))
        do {
            _ = try await EvidenceLog.open(Self.configuration(alone), shared: shared)
            Issue.record("a damaged log was moved into the store")
        } catch {
            #expect("\(error)".contains("is damaged"), "\(error)")
        }
        #expect(try await shared.sharedLogStatus() == nil)
        #expect(try await shared.logBatches(from: 0, limit: 10).isEmpty)
        // The shared log is still free: an instance with an empty directory starts it.
        let b = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("b")), shared: shared)
        #expect(try await b.append(Self.leaf("b", 0)) == 0)
    }

    @Test("a stray batch past the log's end (not the next one) is not part of the log: appends and copies go on before it (r9 F5)")
    func strayBatch() async throws {
        let files = try TemporaryFiles()
        let shared = MemorySharedLog()
        let a = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("a")), shared: shared)
        let b = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("b")), shared: shared)
        _ = try await a.append(Self.leaf("a", 0))
        #expect(
            try await shared.insertLogBatch(
                LogBatch(first: 1 << 40, leaves: [[0x78]], registrations: [], rootAfter: [UInt8](repeating: 0, count: 32), insertedAt: Date())))
        #expect(try await b.append(Self.leaf("b", 0)) == 1)
        #expect(try await a.append(Self.leaf("a", 1)) == 2)
        #expect(try await a.checkpoint() == b.checkpoint())
        let c = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("c")), shared: shared)
        #expect(try await c.size() == 3)
        // r11 H7: nor does it keep a put-back from finding the log's end.
        await shared.deleteBatch(first: 2)
        #expect(try await a.append(Self.leaf("a", 2)) == 3)
        #expect(try await c.append(Self.leaf("c", 0)) == 4)
    }

    @Test("a store that lost its last batches (restored from an older backup) gets them back from a copy that holds them")
    func restoreFromCopy() async throws {
        let files = try TemporaryFiles()
        let shared = MemorySharedLog()
        let a = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("a")), shared: shared)
        for n in 0..<3 { #expect(try await a.append(Self.leaf("a", n)) == UInt64(n)) }
        let copy = files.directory.appendingPathComponent("copy")
        do {
            let log = try TileLogDirectory(directory: copy.path)
            _ = try log.append((0..<3).map { Self.leaf("a", $0) })
        }
        let lost = try #require(try await shared.logBatches(from: 2, limit: 1).first)
        await shared.deleteBatch(first: 2)
        let restored = try await EvidenceLog.open(Self.configuration(copy), shared: shared)
        #expect(await restored.stopped == nil)
        #expect(try await shared.logBatches(from: 2, limit: 1).first?.rootAfter == lost.rootAfter)
        #expect(try await a.append(Self.leaf("a", 3)) == 3)
        #expect(try await restored.size(atLeast: 4) == 4)
        // A copy that differs from what the store holds is still refused.
        let other = files.directory.appendingPathComponent("other")
        do {
            let log = try TileLogDirectory(directory: other.path)
            _ = try log.append((0..<6).map { Self.leaf("z", $0) })
        }
        await #expect(throws: (any Error).self) { try await EvidenceLog.open(Self.configuration(other), shared: shared) }
    }

    @Test(
        "r10 G1: a store that lost answered batches while instances ran: no instance appends into them or past them; the instance holding them puts them back at its next append, and every instance goes on"
    )
    func lostWhileRunning() async throws {
        let files = try TemporaryFiles()
        let shared = MemorySharedLog()
        let a = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("a")), shared: shared)
        let b = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("b")), shared: shared)
        for n in 0..<3 { #expect(try await a.append(Self.leaf("a", n)) == UInt64(n)) }
        #expect(try await b.size(atLeast: 3) == 3)
        for n in 3..<6 { #expect(try await a.append(Self.leaf("a", n)) == UInt64(n)) }
        #expect(try await shared.logHighWater().answered == 6)
        // Indexes 3, 4 and 5 were answered; the store loses them (its mark stays).
        for first in UInt64(3)..<6 { await shared.deleteBatch(first: first) }
        // b never copied them: it appends nothing (an insert at 3 would answer 3 again).
        do {
            _ = try await b.append(Self.leaf("b", 0))
            Issue.record("an instance appended into batches the store lost")
        } catch {
            #expect("\(error)".contains("indexes up to 6 were answered"), "\(error)")
        }
        // Nor does an instance started now: its log stops and says why.
        let c = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("c")), shared: shared)
        #expect(await c.stopped?.contains("the store lost batches") == true)
        await #expect(throws: (any Error).self) { try await c.append(Self.leaf("c", 0)) }
        #expect(try await shared.logBatches(from: 3, limit: 1).isEmpty)
        // a holds them: its next append puts them back first, then goes on after them.
        #expect(try await a.append(Self.leaf("a", 6)) == 6)
        #expect(try await b.append(Self.leaf("b", 0)) == 7)
        #expect(try await c.append(Self.leaf("c", 0)) == 8)
        let note = try await a.checkpoint()
        #expect(try await b.checkpoint() == note)
        #expect(try await c.checkpoint() == note)
        let copyC = try TileLogDirectory(readingDirectory: files.directory.appendingPathComponent("c").path)
        #expect(try copyC.entry(at: 4) == Self.leaf("a", 4))
    }

    @Test(
        "r11 H2: a batch lost in the middle of the store: an instance started then stops (no checkpoint) and reports the hole; the next append of an instance holding it puts it back, and all go on"
    )
    func lostInTheMiddle() async throws {
        let files = try TemporaryFiles()
        let (shared, a, b) = try await Self.twoInstances(files, appended: 8)
        await shared.deleteBatch(first: 3)
        // a's last batch is there: it goes on past the hole (a fresh index, answered once).
        #expect(try await a.append(Self.leaf("a", 8)) == 8)
        let c = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("c")), shared: shared)
        #expect(await c.stopped?.contains("batches end at 3, but indexes up to 9 were answered") == true)
        #expect(try await shared.logHighWater() == LogHighWater(answered: 9, hole: 3))
        // Its copy of 3 leaves is not the current log: no checkpoint.
        await #expect(throws: (any Error).self) { try await c.checkpoint() }
        // b holds leaf 3: its next append puts it back (and clears the hole), then goes on.
        #expect(try await b.append(Self.leaf("b", 0)) == 9)
        #expect(try await shared.logHighWater() == LogHighWater(answered: 10))
        #expect(try await shared.logBatches(from: 3, limit: 1).first?.leaves == [Self.leaf("a", 3)])
        #expect(try await c.append(Self.leaf("c", 0)) == 10)
        let note = try await a.checkpoint()
        #expect(try await b.checkpoint() == note)
        #expect(try await c.checkpoint() == note)
    }

    @Test(
        "r11 H3: a batch inserted past a hole (an insert racing a deletion): an instance whose copy ends at the hole's end puts the hole back, then copies on and appends"
    )
    func batchPastAHole() async throws {
        let files = try TemporaryFiles()
        let (shared, a, b) = try await Self.twoInstances(files, appended: 6)
        // 3..5 deleted, and another instance's batch at 6 landed after the deletion.
        for first in UInt64(3)..<6 { await shared.deleteBatch(first: first) }
        let reference = try TileLogDirectory(directory: files.directory.appendingPathComponent("reference").path)
        _ = try reference.append((0..<6).map { Self.leaf("a", $0) } + [Self.leaf("x", 0)])
        #expect(
            try await shared.insertLogBatch(
                LogBatch(first: 6, leaves: [Self.leaf("x", 0)], registrations: [], rootAfter: reference.root, insertedAt: Date())))
        #expect(try await b.append(Self.leaf("b", 0)) == 7)
        #expect(try await shared.logBatches(from: 3, limit: 1).first?.leaves == (3..<6).map { Self.leaf("a", $0) })
        #expect(try await a.append(Self.leaf("a", 6)) == 8)
        #expect(try await a.checkpoint() == b.checkpoint())
    }

    @Test(
        "r11 H9: a put-back cuts the lost leaves into batches of its own: a copy that ends inside one is completed from it, running or starting"
    )
    func copyInsidePutBack() async throws {
        let files = try TemporaryFiles()
        let shared = MemorySharedLog()
        let a = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("a")), shared: shared)
        let b = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("b")), shared: shared)
        for n in 0..<4 { _ = try await a.append(Self.leaf("a", n)) }
        #expect(try await b.size(atLeast: 4) == 4)
        for n in 4..<7 { _ = try await a.append(Self.leaf("a", n)) }
        // A copy of b's 4 leaves, to start later.
        let later = files.directory.appendingPathComponent("later")
        do {
            let log = try TileLogDirectory(directory: later.path)
            _ = try log.append((0..<4).map { Self.leaf("a", $0) })
        }
        for first in UInt64(2)..<7 { await shared.deleteBatch(first: first) }
        #expect(try await a.append(Self.leaf("a", 7)) == 7)
        // Put back as one batch, 2..<7: b's copy (4) ends inside it.
        #expect(try await shared.logBatches(from: 2, limit: 1).first?.end == 7)
        #expect(try await b.append(Self.leaf("b", 0)) == 8)
        let started = try await EvidenceLog.open(Self.configuration(later), shared: shared)
        #expect(await started.stopped == nil)
        let note = try await a.checkpoint()
        #expect(try await b.checkpoint() == note)
        #expect(try await started.checkpoint() == note)
    }

    @Test(
        "r11 H4: the store loses another instance's answered batch while this one's insert is on its way: the mark before the raise tells, and this one answers nothing, signs nothing more"
    )
    func lostDuringInsert() async throws {
        let files = try TemporaryFiles()
        let (shared, a, b) = try await Self.twoInstances(files, appended: 6)
        // a's checks pass; before its insert lands, b answers 6 and the store loses b's batch.
        await shared.setBeforeInsert(at: 6) {
            let index = try await b.append(Self.leaf("b", 0))
            #expect(index == 6)
            await shared.deleteBatch(first: 6)
        }
        do {
            _ = try await a.append(Self.leaf("a", 6))
            Issue.record("index 6 was answered twice")
        } catch {
            #expect("\(error)".contains("were answered by another instance before this one inserted its batch there"), "\(error)")
        }
        #expect(try await a.size() == 6)
        await #expect(throws: (any Error).self) { try await a.checkpoint() }
        await #expect(throws: (any Error).self) { try await a.append(Self.leaf("a", 7)) }
        // a took its batch back and reported the hole (r12 K2): b, which answered 6, puts its batch
        // back at its next append, and a new instance copies b's record at 6.
        #expect(try await shared.logHighWater() == LogHighWater(answered: 7, hole: 6))
        #expect(try await b.append(Self.leaf("b", 1)) == 7)
        #expect(try await shared.logBatches(from: 6, limit: 1).first?.leaves == [Self.leaf("b", 0)])
        let later = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("later")), shared: shared)
        #expect(try await later.checkpoint() == b.checkpoint())
        // The same race without the loss is an ordinary one: a's batch goes after b's.
        let store = MemorySharedLog()
        let c = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("c")), shared: store)
        let d = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("d")), shared: store)
        for n in 0..<6 { _ = try await c.append(Self.leaf("c", n)) }
        #expect(try await d.size(atLeast: 6) == 6)
        await store.setBeforeInsert(at: 6) {
            let index = try await d.append(Self.leaf("d", 0))
            #expect(index == 6)
        }
        #expect(try await c.append(Self.leaf("c", 6)) == 7)
        #expect(try await c.checkpoint() == d.checkpoint())
        // No false alarm: an instance that starts and copies c's batch before c's raise (it raises
        // nothing), and one that appends after c's batch before c's raise.
        let configurationE = try Self.configuration(files.directory.appendingPathComponent("e"))
        await store.setBeforeRaise(to: 9) {
            let e = try await EvidenceLog.open(configurationE, shared: store)
            #expect(try await e.size() == 9)
        }
        #expect(try await c.append(Self.leaf("c", 7)) == 8)
        await store.setBeforeRaise(to: 10) {
            let index = try await d.append(Self.leaf("d", 1))
            #expect(index == 10)
        }
        #expect(try await c.append(Self.leaf("c", 8)) == 9)
        #expect(try await c.checkpoint() == d.checkpoint())
    }

    @Test(
        "r12 K1: an instance that puts a hole back while another's insert waits for its raise marks only what it put back: no false fork"
    )
    func putBackDuringInsert() async throws {
        let files = try TemporaryFiles()
        let (shared, a, _) = try await Self.twoInstances(files, appended: 6)
        await shared.deleteBatch(first: 2)
        let n = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("n")), shared: shared)
        #expect(await n.stopped != nil)
        // A copy that holds the hole and a's next batch starts while a's raise is on its way.
        let holder = files.directory.appendingPathComponent("holder")
        do {
            let log = try TileLogDirectory(directory: holder.path)
            _ = try log.append((0..<7).map { Self.leaf("a", $0) })
        }
        let configuration = try Self.configuration(holder)
        await shared.setBeforeRaise(to: 7) {
            let started = try await EvidenceLog.open(configuration, shared: shared)
            #expect(await started.stopped == nil)
        }
        #expect(try await a.append(Self.leaf("a", 6)) == 6)
        #expect(try await shared.logHighWater() == LogHighWater(answered: 7))
        #expect(try await n.append(Self.leaf("n", 0)) == 7)
        #expect(try await n.checkpoint() == a.checkpoint())
    }

    @Test(
        "r12 K6: a put-back whose instance died holds the claim: a running instance that holds the same log takes it over at its next look for the hole"
    )
    func putBackTakenOver() async throws {
        let files = try TemporaryFiles()
        let (shared, a, b) = try await Self.twoInstances(files, appended: 6)
        await shared.deleteBatch(first: 2)
        // The instance that claimed the put-back of a's 6 leaves died (kill -9) before inserting.
        let ready = try #require(try await shared.sharedLogStatus())
        let root = try TileLogDirectory(readingDirectory: files.directory.appendingPathComponent("a").path).root
        #expect(
            try await shared.replaceSharedLogStatus(ready, with: SharedLogStatus(verifierKey: ready.verifierKey, moving: .init(size: 6, root: root))))
        // A stopped instance reported the hole; b holds the log and takes the put-back over.
        try await shared.reportLogHole(at: 2)
        #expect(try await b.append(Self.leaf("b", 0)) == 6)
        #expect(try await shared.sharedLogStatus() == ready)
        #expect(try await shared.logBatches(from: 2, limit: 1).first?.leaves == [Self.leaf("a", 2)])
        #expect(try await a.append(Self.leaf("a", 6)) == 7)
        let started = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("new")), shared: shared)
        #expect(try await started.checkpoint() == a.checkpoint())
    }

    @Test(
        "r10 G1: a store restored from an older backup (its batches and mark) while instances ran: the instance that saw the lost batches puts them back; if another appended into them first, it refuses to append"
    )
    func restoredWhileRunning() async throws {
        let files = try TemporaryFiles()
        let shared = MemorySharedLog()
        let a = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("a")), shared: shared)
        let b = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("b")), shared: shared)
        for n in 0..<3 { _ = try await a.append(Self.leaf("a", n)) }
        #expect(try await b.append(Self.leaf("b", 0)) == 3)
        for n in 3..<5 { _ = try await a.append(Self.leaf("a", n)) }
        // The backup was taken when the log held 4 leaves; a answered 4 and 5 since.
        await shared.restore(endingAt: 4)
        #expect(try await shared.logHighWater().answered == 4)
        #expect(try await a.append(Self.leaf("a", 5)) == 6)
        #expect(try await b.append(Self.leaf("b", 1)) == 7)
        #expect(try await a.checkpoint() == b.checkpoint())
        // The residual (docs/reliability.md): a answers 8 and 9, the store goes back to 8 leaves,
        // and b, which never saw them, appends first: the store cannot tell it, and 8 is answered
        // twice. a then finds another batch where its leaves were, and appends nothing.
        for n in 10..<12 { #expect(try await a.append(Self.leaf("a", n)) == UInt64(n - 2)) }
        await shared.restore(endingAt: 8)
        #expect(try await b.append(Self.leaf("b", 2)) == 8)
        do {
            _ = try await a.append(Self.leaf("a", 12))
            Issue.record("an instance appended over a fork")
        } catch {
            #expect("\(error)".contains("is not a copy of the shared log"), "\(error)")
        }
        #expect(try await a.size() == 10)
        #expect(try await shared.sharedLogStatus() == SharedLogStatus(verifierKey: try Self.configuration(files.directory).signer.verifierKey))
    }

    @Test("a store that holds batches but lost its status is refused, and nothing is claimed (r10 G3)")
    func lostStatus() async throws {
        let files = try TemporaryFiles()
        let shared = MemorySharedLog()
        let a = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("a")), shared: shared)
        _ = try await a.append(Self.leaf("a", 0))
        let status = try await shared.sharedLogStatus()
        #expect(try await shared.replaceSharedLogStatus(status, with: nil))
        do {
            _ = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("b")), shared: shared)
            Issue.record("an instance started on a log without a status")
        } catch {
            #expect("\(error)".contains("no log status"), "\(error)")
        }
        #expect(try await shared.sharedLogStatus() == nil)
    }

    @Test("an instance already running appends nothing in the middle of a log moving in: its append waits for the move (r10 G2, G6)")
    func noAppendDuringMove() async throws {
        let files = try TemporaryFiles()
        let shared = MemorySharedLog()
        let a = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("a")), shared: shared)
        #expect(try await a.append(Self.leaf("a", 0)) == 0)
        // A mover claims the log and inserts its next batch, as a restore or a move does.
        let ready = try #require(try await shared.sharedLogStatus())
        let reference = try TileLogDirectory(directory: files.directory.appendingPathComponent("reference").path)
        _ = try reference.append([Self.leaf("a", 0), Self.leaf("m", 1)])
        let moving = SharedLogStatus(verifierKey: ready.verifierKey, moving: .init(size: 2, root: reference.root))
        #expect(try await shared.replaceSharedLogStatus(ready, with: moving))
        #expect(
            try await shared.insertLogBatch(
                LogBatch(first: 1, leaves: [Self.leaf("m", 1)], registrations: [], rootAfter: reference.root, insertedAt: Date())))
        await #expect(throws: (any Error).self) { try await a.append(Self.leaf("a", 1)) }
        #expect(try await shared.replaceSharedLogStatus(moving, with: ready))
        #expect(try await a.append(Self.leaf("a", 2)) == 2)
    }

    @Test("a proof for a tree the copy has not reached waits for the next catch-up the interval allows, not a 400 (r10 G4)")
    func throttledCatchUp() async throws {
        let files = try TemporaryFiles()
        let shared = MemorySharedLog()
        let a = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("a")), shared: shared)
        var slow = try Self.configuration(files.directory.appendingPathComponent("b"))
        slow.catchUpInterval = .seconds(1)
        let b = try await EvidenceLog.open(slow, shared: shared)
        // b caught up when it opened, well under a second ago: this catch-up is held back, then made.
        _ = try await a.append(Self.leaf("a", 0))
        #expect(try await b.size(atLeast: 1) == 1)
    }

    @Test("key registrations another instance stored are copied with its leaves, checked against their ids")
    func registrations() async throws {
        let files = try TemporaryFiles()
        let shared = MemorySharedLog()
        let a = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("a")), shared: shared)
        let document = Array("{\"type\":\"formattest-key-registration\"}".utf8)
        let id = ContentAddressedDirectory.id(of: document)
        try await a.storeRegistration(document)
        #expect(try await a.append(Self.leaf("a", 0), registration: id) == 0)
        // A store whose document no longer hashes to its id: the copy refuses the batch.
        await shared.setAlterRegistrations(true)
        let altered = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("altered")), shared: shared)
        #expect(await altered.stopped?.contains("does not hold intact") == true)
        #expect(try await altered.size() == 0)
        #expect(try ContentAddressedDirectory(directory: files.directory.appendingPathComponent("altered/registrations").path).read(id) == nil)
        await shared.setAlterRegistrations(false)
        let b = try await EvidenceLog.open(Self.configuration(files.directory.appendingPathComponent("b")), shared: shared)
        #expect(try await b.size() == 1)
        #expect(try ContentAddressedDirectory(directory: files.directory.appendingPathComponent("b/registrations").path).read(id) == document)
    }
}
