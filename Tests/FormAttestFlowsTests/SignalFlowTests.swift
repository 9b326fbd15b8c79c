//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import Crypto
import FormAttestFlows
import FormAttestForm
import Foundation
import SQLiteAttestStore
import Testing

/// The iOS 27 signals through the flows: the policy at registration and at every assertion, and
/// the stored key's last signals, written with the counter.
struct SignalFlowTests {
    static let cdHash = Array(SHA256.hash(data: Array("release 2.4".utf8)))

    static func profile(_ category: ValidationCategory = .appStore, version: String = "2.4", spelling: SimulatedSignals.Spelling = .apple)
        -> SimulatedDevice.Profile
    {
        var signals = SimulatedSignals(validationCategory: category, bundleVersion: version, cdHash: Self.cdHash)
        signals.spelling = spelling
        return .iOS27(signals)
    }

    static func stores() throws -> [(String, any AttestationStore)] {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("signals-\(UUID().uuidString)/formattest.sqlite").path
        return [("memory", MemoryAttestationStore()), ("sqlite", try SQLiteAttestationStore(path: path))]
    }

    @Test("the last signals seen are stored at registration and replaced, with the counter, by each assertion that carries any")
    func lastSignals() async throws {
        for (name, store) in try Self.stores() {
            let harness = try FlowHarness(store: store, profile: Self.profile()) {
                $0.validationCategories = .only([.appStore, .testFlight])
                $0.minimumBundleVersion = BundleVersion("2.0")
            }
            let key = harness.device.key(0)
            let outcome = try await harness.register(key)
            #expect(outcome.attestation.extensions?.validationCategory == .appStore, "\(name)")
            let registered = try #require(try await store.loadKey(keyID: key.keyID))
            #expect(registered.lastSignals == KeySignals(validationCategory: 4, bundleVersion: "2.4", cdHash: Self.cdHash, cdHashType: 2), "\(name)")

            // An upgrade to TestFlight 2.5 with the documentation spelling and AT clear: stored with the counter.
            var upgraded = Self.profile(.testFlight, version: "2.5", spelling: .documentation)
            upgraded.assertionFlags = 0x00
            let signed = try await harness.flows.assert(
                try harness.assertRequest(key: key, form: FlowHarness.form(nonce: "a1"), counter: 1, profile: upgraded),
                now: FlowHarness.now
            )
            let expected = KeySignals(validationCategory: 2, bundleVersion: "2.5", cdHash: Self.cdHash, cdHashType: 2)
            #expect(signed.key.lastSignals == expected, "\(name)")
            var stored = try #require(try await store.loadKey(keyID: key.keyID))
            #expect(stored.counter == 1)
            #expect(stored.lastSignals == expected, "\(name)")

            // An assertion without the map (seen live on iOS 27): accepted, the last signals kept.
            var bare = upgraded
            bare.assertionsCarrySignals = false
            _ = try await harness.flows.assert(
                try harness.assertRequest(key: key, form: FlowHarness.form(nonce: "a2"), counter: 2, profile: bare), now: FlowHarness.now)
            stored = try #require(try await store.loadKey(keyID: key.keyID))
            #expect(stored.counter == 2)
            #expect(stored.lastSignals == expected, "\(name)")

            // A refused one (a development build) writes nothing: counter, signals, replay record.
            let form = FlowHarness.form(nonce: "a3")
            await expectFlowError("validation_category_not_allowed", .verificationFailed) {
                try await harness.flows.assert(
                    try harness.assertRequest(key: key, form: form, counter: 3, profile: Self.profile(.development)), now: FlowHarness.now)
            }
            await expectFlowError("bundle_version_too_old", .verificationFailed) {
                try await harness.flows.assert(
                    try harness.assertRequest(key: key, form: form, counter: 3, profile: Self.profile(version: "1.9")), now: FlowHarness.now)
            }
            stored = try #require(try await store.loadKey(keyID: key.keyID))
            #expect(stored.counter == 2)
            #expect(stored.lastSignals == expected, "\(name)")
            #expect(try await store.isFormHashRecorded(FlowHarness.hash(form), now: FlowHarness.now) == false)
        }
    }

    @Test("the SQLite store keeps the last signals across a reopen")
    func sqliteReopen() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("signals-\(UUID().uuidString)/formattest.sqlite").path
        let harness = try FlowHarness(store: try SQLiteAttestationStore(path: path), profile: Self.profile())
        let key = harness.device.key(0)
        try await harness.register(key)
        let reopened = try SQLiteAttestationStore(path: path)
        #expect(try await reopened.loadKey(keyID: key.keyID)?.lastSignals?.bundleVersion == "2.4")
    }

    @Test("registration: each signal policy refuses the attestation with its code and stores nothing")
    func registrationRefused() async throws {
        let cases: [(String, (inout AppAttestPolicy) -> Void)] = [
            ("validation_category_not_allowed", { $0.validationCategories = .only([.testFlight]) }),
            ("bundle_version_too_old", { $0.minimumBundleVersion = BundleVersion("2.4.1") }),
            ("cdhash_not_allowed", { $0.allowedCDHashes = .init([Array(SHA256.hash(data: Array("release 2.3".utf8)))]) }),
            ("extensions_required", { $0.requireExtensions = true }),
        ]
        for (code, configure) in cases {
            var profile = Self.profile()
            if code == "extensions_required" { profile.signals?.bundleVersion = nil }
            let harness = try FlowHarness(profile: profile, policy: configure)
            let key = harness.device.key(0)
            await expectFlowError(code, .verificationFailed) { try await harness.register(key) }
            #expect(try await harness.store.loadKey(keyID: key.keyID) == nil)
        }
        // And a device before iOS 27 under a restricting policy without require-extensions: registered.
        let legacy = try FlowHarness { $0.validationCategories = .only([.appStore]) }
        try await legacy.register(legacy.device.key(0))
        #expect(try await legacy.store.loadKey(keyID: legacy.device.key(0).keyID)?.lastSignals == nil)
    }

    @Test("a pooled key keeps the signals of the assertion it was registered with")
    func pooled() async throws {
        let harness = try FlowHarness(profile: Self.profile())
        let challenge = try await harness.flows.issueChallenge(purpose: .pool, username: "alice", now: FlowHarness.now)
        let key = harness.device.key(0)
        let attestation = try harness.device.attest(key, clientDataHash: challenge.value, at: FlowHarness.now)
        let form = FlowHarness.form(nonce: "pooled")
        var device = harness.device
        device.profile = Self.profile(version: "2.6")
        let assertion = try device.assert(key, clientDataHash: FlowHarness.hash(form), counter: 1)
        _ = try await harness.flows.registerPooled(
            FormFlows.PooledRequest(
                username: "alice", keyID: key.keyID, attestationObject: attestation, poolChallenge: challenge.value, assertion: assertion, form: form),
            now: FlowHarness.now
        )
        #expect(try await harness.store.loadKey(keyID: key.keyID)?.lastSignals?.bundleVersion == "2.6")
    }
}
