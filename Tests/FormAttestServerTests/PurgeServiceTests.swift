//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestFlows
import FormAttestServer
import Foundation
import Logging
import Testing

/// The purge works a backlog off in bounded steps (docs/performance.md, "Sustained operation").
struct PurgeServiceTests {
    @Test("the pacer moves the step limit towards the target, at most doubling or halving, within its bounds")
    func pacer() {
        var pacer = PurgePacer(target: .milliseconds(5), initialLimit: 256, minimumLimit: 32, maximumLimit: 1000)
        #expect(pacer.limit == 256)
        // A full step at twice the target: half the rows next time.
        pacer.record(deleted: 256, limit: 256, elapsed: .milliseconds(10), complete: false)
        #expect(pacer.limit == 128)
        // Four times too slow still only halves.
        pacer.record(deleted: 128, limit: 128, elapsed: .milliseconds(20), complete: false)
        #expect(pacer.limit == 64)
        // A quarter of the target: it only doubles.
        pacer.record(deleted: 64, limit: 64, elapsed: .microseconds(1250), complete: false)
        #expect(pacer.limit == 128)
        // Near the target: proportional (5 / 4 of 128 = 160).
        pacer.record(deleted: 128, limit: 128, elapsed: .milliseconds(4), complete: false)
        #expect(pacer.limit == 160)
        // A step that ended the pass with less than its limit says nothing about a full one.
        pacer.record(deleted: 3, limit: 160, elapsed: .milliseconds(50), complete: true)
        #expect(pacer.limit == 160)
        // A short step that did not end the pass (a sweep that examined its share and found few
        // expired) did a full step's work: it counts (twice the target: half).
        pacer.record(deleted: 3, limit: 160, elapsed: .milliseconds(10), complete: false)
        #expect(pacer.limit == 80)
        pacer.record(deleted: 80, limit: 80, elapsed: .milliseconds(2), complete: false)
        #expect(pacer.limit == 160)
        // Never below the minimum, never above the maximum.
        for _ in 0..<10 { pacer.record(deleted: pacer.limit, limit: pacer.limit, elapsed: .seconds(1), complete: false) }
        #expect(pacer.limit == 32)
        for _ in 0..<10 { pacer.record(deleted: pacer.limit, limit: pacer.limit, elapsed: .microseconds(1), complete: false) }
        #expect(pacer.limit == 1000)
    }

    @Test("a pass deletes a backlog in steps no larger than the pacer allows, until one comes back short, and keeps live records")
    func passInSteps() async throws {
        let now = Date()
        let inner = MemoryAttestationStore()
        for index in 0..<1000 {
            let hash = Array(withUnsafeBytes(of: UInt32(index).bigEndian, Array.init)) + [UInt8](repeating: 0xAB, count: 28)
            try await inner.recordFormHash(
                ReplayRecord(formHash: hash, expiresAt: now.addingTimeInterval(-Double(index) - 1)), now: now.addingTimeInterval(-7200))
        }
        let live = [UInt8](repeating: 0x11, count: 32)
        try await inner.recordFormHash(ReplayRecord(formHash: live, expiresAt: now.addingTimeInterval(3600)), now: now)
        let store = WriteFailingStore(inner: inner)
        let service = PurgeService(
            store: store,
            interval: .seconds(60),
            pacer: PurgePacer(),
            now: { now },
            logger: Logger(label: "test")
        )
        // A pacer whose limit never moves (the target is far above any step's time) makes the
        // steps exact: 1000 records in steps of 64 are 15 full steps and one of 40.
        var pacer = PurgePacer(target: .seconds(3600), initialLimit: 64, minimumLimit: 64, maximumLimit: 64)
        try await service.pass(&pacer)
        let steps = await store.purgeSteps
        #expect(steps.map(\.limit) == Array(repeating: 64, count: 16))
        #expect(steps.map(\.deleted) == Array(repeating: 64, count: 15) + [40])
        #expect(try await inner.isFormHashRecorded(live, now: now))
        #expect(try await inner.purgeExpired(now: now, limit: 10_000).deleted == 0)

        // Nothing left: the next pass is one short step.
        try await service.pass(&pacer)
        #expect(await store.purgeSteps.count == 17)
    }

    @Test("a pass that meets a failing store stops at once and changes nothing")
    func failingStore() async throws {
        let now = Date()
        let inner = MemoryAttestationStore()
        try await inner.recordFormHash(
            ReplayRecord(formHash: [UInt8](repeating: 1, count: 32), expiresAt: now.addingTimeInterval(-1)), now: now.addingTimeInterval(-60))
        let store = WriteFailingStore(inner: inner)
        await store.setFailing(true)
        let service = PurgeService(store: store, interval: .seconds(60), pacer: PurgePacer(), now: { now }, logger: Logger(label: "test"))
        var pacer = PurgePacer()
        try await service.pass(&pacer)
        #expect(await store.purgeSteps.isEmpty)
        await store.setFailing(false)
        #expect(try await inner.purgeExpired(now: now, limit: 10).deleted == 1)
    }
}
