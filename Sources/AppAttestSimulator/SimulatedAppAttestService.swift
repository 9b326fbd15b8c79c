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
        completionHandler(self.generateKey(), nil)
    }

    public func attestKey(
        _ keyId: String,
        clientDataHash: Data,
        completionHandler: @escaping @Sendable (Data?, (any Error)?) -> Void
    ) {
        do {
            completionHandler(Data(try self.attestKey(keyId, clientDataHash: Array(clientDataHash), profile: self.device.profile)), nil)
        } catch {
            completionHandler(nil, error)
        }
    }

    public func generateAssertion(
        _ keyId: String,
        clientDataHash: Data,
        completionHandler: @escaping @Sendable (Data?, (any Error)?) -> Void
    ) {
        do {
            completionHandler(Data(try self.generateAssertion(keyId, clientDataHash: Array(clientDataHash), profile: self.device.profile)), nil)
        } catch {
            completionHandler(nil, error)
        }
    }

    // MARK: - Direct calls, with a profile per call

    /// Makes and keeps a fresh key; returns its keyId (base64).
    public func generateKey() -> String {
        let key = self.device.generateKey()
        let keyId = Data(key.keyID).base64EncodedString()
        self.lock.withLock { self.keys[keyId] = key }
        return keyId
    }

    /// Attests a kept key as a device of `profile` would (the demo's iOS 27 and macOS 27 devices).
    ///
    /// - Throws: `DCError.invalidKey` for an unknown keyId.
    public func attestKey(_ keyId: String, clientDataHash: [UInt8], profile: SimulatedDevice.Profile) throws -> [UInt8] {
        guard let key = self.lock.withLock({ self.keys[keyId] }) else { throw DCErrorCode.invalidKey.error }
        var device = self.device
        device.profile = profile
        return try device.attest(key, clientDataHash: clientDataHash, at: self.now())
    }

    /// Signs with a kept key, its counter one above the last, as a device of `profile` would.
    ///
    /// - Throws: `DCError.invalidKey` for an unknown keyId.
    public func generateAssertion(_ keyId: String, clientDataHash: [UInt8], profile: SimulatedDevice.Profile) throws -> [UInt8] {
        let next: (SimulatedKey, UInt32)? = self.lock.withLock {
            guard let key = self.keys[keyId] else { return nil }
            let counter = (self.counters[keyId] ?? 0) + 1
            self.counters[keyId] = counter
            return (key, counter)
        }
        guard let (key, counter) = next else { throw DCErrorCode.invalidKey.error }
        var device = self.device
        device.profile = profile
        return try device.assert(key, clientDataHash: clientDataHash, counter: counter)
    }
}
