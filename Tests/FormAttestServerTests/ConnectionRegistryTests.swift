//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestServer
import Foundation
import NIOCore
import Testing

/// The listener's choice of the connection to shed over its total (``ConnectionRegistry``), with
/// the clock given: the order of the ranks (silent, idle, body in progress, served most), what
/// holds each back, and the cap. The system tests (HostileUserTests "r5 F2", "r5 F3") drive the
/// same through the real service.
struct ConnectionRegistryTests {
    /// The sheds asked for, by connection name.
    final class Sheds: @unchecked Sendable {
        private let lock = NSLock()
        private var asked: [(name: String, how: ConnectionRegistry.Shed)] = []
        var all: [(name: String, how: ConnectionRegistry.Shed)] { self.lock.withLock { self.asked } }
        func record(_ name: String, _ how: ConnectionRegistry.Shed) { self.lock.withLock { self.asked.append((name, how)) } }
    }

    /// The clock's start.
    let start = NIODeadline.uptimeNanoseconds(1_000_000_000_000)

    func at(_ seconds: Double) -> NIODeadline { self.start + .nanoseconds(Int64(seconds * 1e9)) }

    /// Admits `name` at `seconds`; runs the victim it names, if any.
    @discardableResult
    func admit(_ registry: ConnectionRegistry, _ name: String, at seconds: Double, sheds: Sheds) -> Int {
        switch registry.admit(name, now: self.at(seconds), shed: { how in sheds.record(name, how) }) {
        case .refused:
            Issue.record("\(name) refused")
            return -1
        case .admitted(let id):
            return id
        case .admittedShedding(let id, let victim):
            victim?()
            return id
        }
    }

    @Test("over the total: a connection that sent nothing for 1 s goes first, then the keep-alive idle longest; neither younger than 1 s")
    func idleFirst() {
        let registry = ConnectionRegistry(total: 3, perAddress: nil)
        let sheds = Sheds()
        let keepAlive = self.admit(registry, "keep-alive", at: 0, sheds: sheds)
        registry.mark(keepAlive, busy: true, now: self.at(0.1))
        registry.mark(keepAlive, busy: false, now: self.at(0.2))
        self.admit(registry, "silent", at: 0.5, sheds: sheds)
        let busy = self.admit(registry, "busy", at: 0.6, sheds: sheds)
        registry.mark(busy, busy: true, now: self.at(0.6))
        // At 1.3 s the silent one is 0.8 s old: nothing is chosen but the keep-alive idle 1.1 s.
        self.admit(registry, "first", at: 1.3, sheds: sheds)
        #expect(sheds.all.map(\.name) == ["keep-alive"] && sheds.all.allSatisfy { $0.how == .idle }, "\(sheds.all)")
        // At 1.6 s the silent one is 1.1 s old: it goes.
        self.admit(registry, "second", at: 1.6, sheds: sheds)
        #expect(sheds.all.map(\.name) == ["keep-alive", "silent"], "\(sheds.all)")
    }

    /// Admits `name` at `seconds` with its request head arriving at once (a newcomer that sent
    /// nothing holds busy sheds back), then chooses again.
    func admitBusy(_ registry: ConnectionRegistry, _ name: String, at seconds: Double, sheds: Sheds) {
        let id = self.admit(registry, name, at: seconds, sheds: sheds)
        registry.mark(id, busy: true, now: self.at(seconds))
        for victim in registry.chooseAgain(now: self.at(seconds)) { victim() }
    }

    @Test(
        "with nothing idle: a connection served more than once is retired first; then the oldest body in progress for 1 s is shed (408), before a connection served once; a body younger than 1 s is not"
    )
    func bodiesThenRetired() {
        let registry = ConnectionRegistry(total: 3, perAddress: nil)
        let sheds = Sheds()
        let served = self.admit(registry, "served-most", at: 0, sheds: sheds)
        for step in 0..<5 {
            registry.mark(served, busy: true, now: self.at(0.1 * Double(step)))
            registry.mark(served, busy: false, now: self.at(0.1 * Double(step) + 0.05))
        }
        registry.mark(served, busy: true, now: self.at(0.9))
        let older = self.admit(registry, "older-body", at: 0.1, sheds: sheds)
        registry.mark(older, busy: true, body: true, now: self.at(0.2))
        let younger = self.admit(registry, "younger-body", at: 0.3, sheds: sheds)
        registry.mark(younger, busy: true, body: true, now: self.at(0.4))
        // At 1.1 s the older body is 0.9 s in progress, the younger 0.7 s: neither is shed; the
        // connection served most (5 requests, one in flight) is retired.
        self.admitBusy(registry, "first", at: 1.1, sheds: sheds)
        #expect(sheds.all.map(\.name) == ["served-most"] && sheds.all.first?.how == .retire, "\(sheds.all)")
        // At 1.3 s the older body is 1.1 s in progress: it is shed.
        self.admitBusy(registry, "second", at: 1.3, sheds: sheds)
        #expect(sheds.all.map(\.name) == ["served-most", "older-body"] && sheds.all.last?.how == .body, "\(sheds.all)")
        // The younger body arrives whole: it is no longer shed as a body; retired, as the
        // connection open longest among those served once.
        registry.bodyEnded(younger)
        self.admitBusy(registry, "third", at: 1.6, sheds: sheds)
        #expect(sheds.all.map(\.name) == ["served-most", "older-body", "younger-body"] && sheds.all.last?.how == .retire, "\(sheds.all)")
    }

    @Test(
        "a connection that sent nothing yet, younger than 1 s, holds back busy sheds: it makes room itself at 1 s; once it sent a request, a busy one is chosen"
    )
    func silentHoldsBackBusy() {
        let registry = ConnectionRegistry(total: 2, perAddress: nil)
        let sheds = Sheds()
        let busy = self.admit(registry, "busy", at: 0, sheds: sheds)
        registry.mark(busy, busy: true, now: self.at(0))
        registry.mark(busy, busy: false, now: self.at(0.05))
        registry.mark(busy, busy: true, now: self.at(0.1))
        let other = self.admit(registry, "other", at: 0, sheds: sheds)
        registry.mark(other, busy: true, now: self.at(0))
        // A silent newcomer over the total: nothing is chosen, at its admission or after.
        let silent = self.admit(registry, "silent", at: 0.5, sheds: sheds)
        #expect(sheds.all.isEmpty, "\(sheds.all)")
        #expect(registry.chooseAgain(now: self.at(0.7)).isEmpty)
        // The one change: it sends its request; the busy connection served most is retired.
        registry.mark(silent, busy: true, now: self.at(0.8))
        for victim in registry.chooseAgain(now: self.at(0.8)) { victim() }
        #expect(sheds.all.map(\.name) == ["busy"] && sheds.all.first?.how == .retire, "\(sheds.all)")
    }

    @Test("retirements are held to total/16 a second (at least 4); bodies in progress are not")
    func retirementsCapped() {
        let registry = ConnectionRegistry(total: 8, perAddress: nil)
        let sheds = Sheds()
        for index in 0..<8 {
            let id = self.admit(registry, "kept-\(index)", at: 0, sheds: sheds)
            registry.mark(id, busy: true, now: self.at(0))
        }
        for index in 0..<6 { self.admitBusy(registry, "new-\(index)", at: 2 + 0.01 * Double(index), sheds: sheds) }
        #expect(sheds.all.count == 4 && sheds.all.allSatisfy { $0.how == .retire }, "\(sheds.all)")
        // The one change: the kept connections' requests have bodies in progress since 0 s.
        let bodies = ConnectionRegistry(total: 8, perAddress: nil)
        let bodySheds = Sheds()
        for index in 0..<8 {
            let id = self.admit(bodies, "kept-\(index)", at: 0, sheds: bodySheds)
            bodies.mark(id, busy: true, body: true, now: self.at(0))
        }
        for index in 0..<6 { self.admitBusy(bodies, "new-\(index)", at: 2 + 0.01 * Double(index), sheds: bodySheds) }
        #expect(bodySheds.all.count == 6 && bodySheds.all.allSatisfy { $0.how == .body }, "\(bodySheds.all)")
    }

    @Test("r7 F1: polling connections are retired before an honest body is cut; with their retirements capped, the body is still not cut")
    func pollersBeforeBodies() {
        let registry = ConnectionRegistry(total: 8, perAddress: nil)
        let sheds = Sheds()
        // Seven connections polling (a request every 0.5 s, never idle 1 s), and one honest
        // upload whose body has been in progress since 0.1 s.
        var pollers: [Int] = []
        for index in 0..<7 {
            let id = self.admit(registry, "poller-\(index)", at: 0, sheds: sheds)
            for step in 0..<3 {
                registry.mark(id, busy: true, now: self.at(0.5 * Double(step)))
                registry.mark(id, busy: false, now: self.at(0.5 * Double(step) + 0.01))
            }
            registry.mark(id, busy: true, now: self.at(1.5))
            pollers.append(id)
        }
        let upload = self.admit(registry, "upload", at: 0, sheds: sheds)
        registry.mark(upload, busy: true, body: true, now: self.at(0.1))
        // Newcomers over the total at 2 s (the body 1.9 s in progress): pollers are retired, as
        // many as the cap allows (4 a second at this total), and then nothing: never the body.
        for index in 0..<6 { self.admitBusy(registry, "new-\(index)", at: 2 + 0.01 * Double(index), sheds: sheds) }
        #expect(sheds.all.count == 4 && sheds.all.allSatisfy { $0.name.hasPrefix("poller-") && $0.how == .retire }, "\(sheds.all)")
        // The one change: no connection polls (each served its request once): the body is shed.
        let bodies = ConnectionRegistry(total: 8, perAddress: nil)
        let bodySheds = Sheds()
        for index in 0..<7 {
            let id = self.admit(bodies, "once-\(index)", at: 0, sheds: bodySheds)
            bodies.mark(id, busy: true, now: self.at(1.5))
        }
        let alone = self.admit(bodies, "upload", at: 0, sheds: bodySheds)
        bodies.mark(alone, busy: true, body: true, now: self.at(0.1))
        self.admitBusy(bodies, "new", at: 2, sheds: bodySheds)
        #expect(bodySheds.all.map(\.name) == ["upload"] && bodySheds.all.first?.how == .body, "\(bodySheds.all)")
    }
}
