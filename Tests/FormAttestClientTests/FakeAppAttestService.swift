//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestClient
import Foundation

/// A service whose every answer the test decides, and which records every call.
final class FakeAppAttestService: DCAppAttestServiceProtocol, @unchecked Sendable {
    enum Call: Equatable {
        case generateKey
        case attestKey(String)
        case generateAssertion(String)
    }

    typealias Answer<Value> = @Sendable (_ call: Int, _ respond: @escaping @Sendable (Value?, (any Error)?) -> Void) -> Void

    private let lock = NSLock()
    private var recorded: [Call] = []
    let isSupported: Bool
    var keyAnswer: Answer<String> = { call, respond in respond("key-\(call)", nil) }
    var attestAnswer: Answer<Data> = { _, respond in respond(Data(repeating: 0xA3, count: 100), nil) }
    var assertAnswer: Answer<Data> = { _, respond in respond(Data(repeating: 0xA2, count: 80), nil) }

    init(isSupported: Bool = true) {
        self.isSupported = isSupported
    }

    var calls: [Call] { self.lock.withLock { self.recorded } }

    private func record(_ call: Call) -> Int {
        self.lock.withLock {
            self.recorded.append(call)
            return self.recorded.filter { Self.kind($0) == Self.kind(call) }.count
        }
    }

    private static func kind(_ call: Call) -> Int {
        switch call {
        case .generateKey: return 0
        case .attestKey: return 1
        case .generateAssertion: return 2
        }
    }

    func generateKey(completionHandler: @escaping @Sendable (String?, (any Error)?) -> Void) {
        self.keyAnswer(self.record(.generateKey), completionHandler)
    }

    func attestKey(_ keyId: String, clientDataHash: Data, completionHandler: @escaping @Sendable (Data?, (any Error)?) -> Void) {
        self.attestAnswer(self.record(.attestKey(keyId)), completionHandler)
    }

    func generateAssertion(_ keyId: String, clientDataHash: Data, completionHandler: @escaping @Sendable (Data?, (any Error)?) -> Void) {
        self.assertAnswer(self.record(.generateAssertion(keyId)), completionHandler)
    }
}

/// A clock the test moves by hand.
final class ManualClock: @unchecked Sendable {
    private let lock = NSLock()
    private var current: Date

    init(_ start: Date = Date(timeIntervalSince1970: 1_795_341_600)) {
        self.current = start
    }

    var now: Date { self.lock.withLock { self.current } }

    func advance(by interval: TimeInterval) {
        self.lock.withLock { self.current = self.current.addingTimeInterval(interval) }
    }
}
