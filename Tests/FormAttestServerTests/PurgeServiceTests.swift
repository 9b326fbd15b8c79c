//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
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

    @Test("with a retention, a pass deletes the keys and passkeys revoked longer ago than it, in paced steps, and nothing else")
    func revokedRetention() async throws {
        let now = Date()
        let day: TimeInterval = 86_400
        let inner = MemoryAttestationStore()
        // 40 keys revoked 31 days ago, one revoked 29 days ago, one active; a passkey revoked 31
        // days ago and one 29 days ago; all created 60 days ago.
        func key(_ id: UInt8, revoked: TimeInterval?) -> StoredKey {
            let created = now.addingTimeInterval(-60 * day)
            return StoredKey(
                keyID: [UInt8](repeating: id, count: 32), username: "alice", publicKey: [0x04] + [UInt8](repeating: id, count: 64), counter: 0,
                appID: "ABCDE12345.com.example", environment: .production, receipt: [UInt8](repeating: 0xEE, count: 4000), createdAt: created,
                lastUsed: created, revokedAt: revoked.map { now.addingTimeInterval(-$0) })
        }
        for id in UInt8(1)...40 { try await inner.insertKey(key(id, revoked: 31 * day + Double(id))) }
        try await inner.insertKey(key(41, revoked: 29 * day))
        try await inner.insertKey(key(42, revoked: nil))
        for (id, age) in [(UInt8(1), 31 * day), (2, 29 * day)] {
            let passkey = StoredPasskey(
                credentialID: [UInt8](repeating: id, count: 16), username: "alice", userHandle: [1], publicKey: [2], signCount: 0,
                backupEligible: false, backedUp: false, aaguid: [UInt8](repeating: 0, count: 16), transports: [], format: "none",
                createdAt: now.addingTimeInterval(-60 * day), lastUsed: now.addingTimeInterval(-60 * day), revokedAt: now.addingTimeInterval(-age))
            try await inner.commitPasskeyRegistration(PasskeyRegistrationCommit(passkey: passkey, challenges: [], now: passkey.createdAt))
        }
        let store = WriteFailingStore(inner: inner)
        var pacer = PurgePacer(target: .seconds(3600), initialLimit: 16, minimumLimit: 16, maximumLimit: 16)

        // Without a retention (a library user's choice): nothing revoked goes.
        let keeping = PurgeService(store: store, interval: .seconds(60), pacer: pacer, now: { now }, logger: Logger(label: "test"))
        try await keeping.pass(&pacer)
        #expect(try await inner.countKeys(username: "alice", .all) == 42)

        let service = PurgeService(
            store: store, interval: .seconds(60), pacer: pacer, now: { now }, revokedRetention: 30 * day, logger: Logger(label: "test"))
        try await service.pass(&pacer)
        #expect(try await inner.countKeys(username: "alice", .all) == 2)
        #expect(try await inner.loadKey(keyID: key(41, revoked: nil).keyID)?.revokedAt != nil, "revoked 29 days ago: kept")
        #expect(try await inner.loadKey(keyID: key(42, revoked: nil).keyID)?.revokedAt == nil, "active: kept")
        #expect(try await inner.passkeys(username: "alice").map(\.credentialID) == [[UInt8](repeating: 2, count: 16)])
        // 41 credentials in steps of at most 16: 16, 16, 9; nothing left for the next pass.
        #expect(try await inner.purgeRevoked(before: now.addingTimeInterval(-30 * day), limit: 100).deleted == 0)

        // A day later, the key and passkey revoked 29 days ago are past the retention too.
        let later = PurgeService(
            store: store, interval: .seconds(60), pacer: pacer, now: { now.addingTimeInterval(2 * day) }, revokedRetention: 30 * day,
            logger: Logger(label: "test"))
        try await later.pass(&pacer)
        #expect(try await inner.keys(username: "alice").map(\.keyID) == [key(42, revoked: nil).keyID])
        #expect(try await inner.passkeys(username: "alice").isEmpty)
    }

    @Test("the application refuses a retention of revoked keys shorter than the window registrations are counted over")
    func retentionFloor() async throws {
        let harness = try ServiceHarness()
        var configuration = harness.configuration
        #expect(configuration.revokedRetention == configuration.minimumRevokedRetention, "the default is the minimum, 30 days")
        configuration.revokedRetention = configuration.minimumRevokedRetention - 1
        await #expect(throws: ServerConfiguration.RevokedRetentionTooShort.self) {
            _ = try await FormAttestApplication.make(
                configuration: configuration, store: harness.store, signingKeys: harness.keys, developmentDevice: nil, logger: Logger(label: "test"))
        }
        // A longer count window raises the floor with it.
        configuration.revokedRetention = 40 * 86_400
        configuration.flows.registrationCountWindow = 41 * 86_400
        await #expect(throws: ServerConfiguration.RevokedRetentionTooShort.self) {
            _ = try await FormAttestApplication.make(
                configuration: configuration, store: harness.store, signingKeys: harness.keys, developmentDevice: nil, logger: Logger(label: "test"))
        }
        configuration.flows.registrationCountWindow = 40 * 86_400
        _ = try await FormAttestApplication.make(
            configuration: configuration, store: harness.store, signingKeys: harness.keys, developmentDevice: nil, logger: Logger(label: "test"))
    }
}
