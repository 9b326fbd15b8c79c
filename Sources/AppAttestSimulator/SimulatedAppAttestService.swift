//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
public import FormAttestClient
public import Foundation

/// `DCAppAttestServiceProtocol` backed by a ``SimulatedDevice``: keys live in memory, attestations
/// are signed by the simulated CA, and each key's assertion counter starts at 1.
///
/// For Linux, tests, the demo page and benchmarks. A verifier accepts its output only when it
/// trusts the simulator's root.
public final class SimulatedAppAttestService: DCAppAttestServiceProtocol, @unchecked Sendable {
    /// The device that signs.
    public let device: SimulatedDevice
    private let now: @Sendable () -> Date
    // Invariant: `keys` and `counters` are only touched while holding `lock`.
    private let lock = NSLock()
    private var keys: [String: SimulatedKey] = [:]
    private var counters: [String: UInt32] = [:]

    public init(device: SimulatedDevice, now: @escaping @Sendable () -> Date = { Date() }) {
        self.device = device
        self.now = now
    }

    public var isSupported: Bool { true }

    public func generateKey(completionHandler: @escaping @Sendable (String?, (any Error)?) -> Void) {
        let key = self.device.generateKey()
        let keyId = Data(key.keyID).base64EncodedString()
        self.lock.withLock { self.keys[keyId] = key }
        completionHandler(keyId, nil)
    }

    public func attestKey(
        _ keyId: String,
        clientDataHash: Data,
        completionHandler: @escaping @Sendable (Data?, (any Error)?) -> Void
    ) {
        guard let key = self.lock.withLock({ self.keys[keyId] }) else {
            completionHandler(nil, DCErrorCode.invalidKey.error)
            return
        }
        do {
            let attestation = try self.device.attest(key, clientDataHash: Array(clientDataHash), at: self.now())
            completionHandler(Data(attestation), nil)
        } catch {
            completionHandler(nil, error)
        }
    }

    public func generateAssertion(
        _ keyId: String,
        clientDataHash: Data,
        completionHandler: @escaping @Sendable (Data?, (any Error)?) -> Void
    ) {
        let next: (SimulatedKey, UInt32)? = self.lock.withLock {
            guard let key = self.keys[keyId] else { return nil }
            let counter = (self.counters[keyId] ?? 0) + 1
            self.counters[keyId] = counter
            return (key, counter)
        }
        guard let (key, counter) = next else {
            completionHandler(nil, DCErrorCode.invalidKey.error)
            return
        }
        do {
            let assertion = try self.device.assert(key, clientDataHash: Array(clientDataHash), counter: counter)
            completionHandler(Data(assertion), nil)
        } catch {
            completionHandler(nil, error)
        }
    }
}
