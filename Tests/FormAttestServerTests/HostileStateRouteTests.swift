//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import CanonicalJSON
import Crypto
import FormAttestEvidence
import FormAttestFlows
import FormAttestForm
import FormAttestServer
import FormAttestTokens
import Foundation
import HTTPTypes
import RFC3339
import Testing

/// Issue 31, the classes about state, evidence and counters, over the API in process.
struct HostileStateRouteTests {
    static func assertBody(_ keyID: String, _ assertion: String, _ form: JSONValue, user: String = "alice") -> [(String, JSONValue)] {
        [
            ("username", .string(JSONString(user))), ("keyId", .string(JSONString(keyID))), ("assertion", .string(JSONString(assertion))),
            ("form", form),
        ]
    }

    @Test("class 12: two forms delivered in the opposite order: the late one is 409 counter_out_of_order and the key keeps signing")
    func reorderedDelivery() async throws {
        let harness = try ServiceHarness()
        try await harness.run { client in
            let (keyID, registered) = try await ServiceHarness.register(client, form: ServiceHarness.form())
            try #require(registered.status == 200)
            let first = ServiceHarness.form(amount: "1.00")
            let second = ServiceHarness.form(amount: "2.00")
            let firstAssertion = try await ServiceHarness.assertion(client, keyID: keyID, form: first)  // counter 1
            let secondAssertion = try await ServiceHarness.assertion(client, keyID: keyID, form: second)  // counter 2
            #expect(try await client.post("/api/appattest/assert", Self.assertBody(keyID, secondAssertion, second)).status == 200)
            let late = try await client.post("/api/appattest/assert", Self.assertBody(keyID, firstAssertion, first))
            #expect(late.status == 409)
            #expect(late.errorCode == "counter_out_of_order")
            // The key is not retired: the app signs the late form again and it is accepted.
            let again = try await client.post(
                "/api/appattest/assert", Self.assertBody(keyID, try await ServiceHarness.assertion(client, keyID: keyID, form: first), first))
            #expect(again.status == 200, "\(again.errorCode ?? "")")
            let keyBytes = try #require(Base64URL.decode(keyID))
            let key = try #require(try await harness.store.loadKey(keyID: keyBytes))
            #expect(key.reattestationRequired == false)
            #expect(key.counter == 3)
        }
    }

    @Test("class 12: with counter-rule strict the same delivery retires the key (428 for every later form)")
    func reorderedDeliveryStrict() async throws {
        var harness = try ServiceHarness()
        harness.configuration.flows.counterRule = .strict
        try await harness.run { client in
            let (keyID, registered) = try await ServiceHarness.register(client, form: ServiceHarness.form())
            try #require(registered.status == 200)
            let first = ServiceHarness.form(amount: "1.00")
            let second = ServiceHarness.form(amount: "2.00")
            let firstAssertion = try await ServiceHarness.assertion(client, keyID: keyID, form: first)
            let secondAssertion = try await ServiceHarness.assertion(client, keyID: keyID, form: second)
            #expect(try await client.post("/api/appattest/assert", Self.assertBody(keyID, secondAssertion, second)).status == 200)
            let late = try await client.post("/api/appattest/assert", Self.assertBody(keyID, firstAssertion, first))
            #expect(late.status == 428)
            #expect(late.errorCode == "requires_reattestation")
            let again = try await client.post(
                "/api/appattest/assert", Self.assertBody(keyID, try await ServiceHarness.assertion(client, keyID: keyID, form: first), first))
            #expect(again.status == 428)
        }
    }

    @Test(
        "class 2: with evidence on, a key registered while receipts were not required is refused 428 key_attestation_unverifiable and nothing is recorded; a key with a valid receipt signs"
    )
    func unverifiableKeyRefused() async throws {
        let archive = FileManager.default.temporaryDirectory.appendingPathComponent("evidence-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: archive, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(at: archive) }
        var harness = try ServiceHarness()
        harness.configuration.policy.requireValidReceipt = true
        harness.configuration.evidence = EvidenceConfiguration(archiveDirectory: archive.path)
        var lenientPolicy = harness.configuration.policy
        lenientPolicy.requireValidReceipt = false
        let lenient = try AppAttestVerifier(policy: lenientPolicy)
        let store = harness.store
        let signers = try SignedEvidence.signers(jwks: harness.keys.jwks.canonicalBytes)
        let anchors = [harness.authority.rootCertificate]
        let receiptAnchors = [harness.authority.receiptAuthority.rootCertificate]
        try await harness.run { client in
            /// A key as a deployment without required receipts registered it: its receipt broken
            /// (`breakReceipt`), or its attestation not kept (`keep` false).
            func legacyKey(breakReceipt: Bool, keep: Bool) async throws -> String {
                let form = ServiceHarness.form()
                let simulated = try await client.post("/api/dev/simulate", [("action", .string(JSONString("attest"))), ("form", form)])
                let keyID = try #require(simulated.json?["keyId"]?.stringValue)
                let encoded = try #require(simulated.json?["attestationObject"]?.stringValue)
                var object = try #require(Base64URL.decode(encoded))
                let keyBytes = try #require(Base64URL.decode(keyID))
                let formHash = try SignedForm(value: form).clientDataHash
                let now = RFC3339UTC.millisecondPrecision(Date())
                let intact = try await lenient.verifyAttestation(object, keyID: keyBytes, clientDataHash: formHash, at: now)
                if breakReceipt {
                    let receipt = try #require(object.firstRange(of: intact.receipt))
                    object[receipt.lowerBound + receipt.count / 2] ^= 0x01
                }
                // Receipts not required: the broken one registers.
                let verified = try await lenient.verifyAttestation(object, keyID: keyBytes, clientDataHash: formHash, at: now)
                try await store.insertKey(
                    StoredKey(
                        keyID: keyBytes, username: "alice", publicKey: Array(verified.publicKey.x963Representation), counter: 0,
                        appID: verified.appID,
                        environment: verified.environment, receipt: verified.receipt, createdAt: now, lastUsed: now,
                        attestation: keep ? KeyAttestation(object: object, clientDataHash: formHash) : nil, counterFormHash: formHash
                    )
                )
                return keyID
            }
            for (breakReceipt, keep) in [(true, true), (false, false)] {
                let keyID = try await legacyKey(breakReceipt: breakReceipt, keep: keep)
                let form = ServiceHarness.form(amount: "50.00")
                let answer = try await client.post(
                    "/api/appattest/assert", Self.assertBody(keyID, try await ServiceHarness.assertion(client, keyID: keyID, form: form), form))
                #expect(answer.status == 428, "broken receipt \(breakReceipt), kept \(keep)")
                #expect(answer.errorCode == "key_attestation_unverifiable")
                #expect(answer.json?["evidenceId"] == nil)
                // Nothing changed: the counter stays, the form can still be accepted by a new key.
                let keyBytes = try #require(Base64URL.decode(keyID))
                #expect(try await store.loadKey(keyID: keyBytes)?.counter == 0)
                #expect(try await store.isFormHashRecorded(try SignedForm(value: form).clientDataHash, now: Date()) == false)
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: archive.path).isEmpty)

            // One thing changed: the same legacy key with its receipt intact signs, and its record verifies.
            let keyID = try await legacyKey(breakReceipt: false, keep: true)
            let form = ServiceHarness.form(amount: "51.00")
            let answer = try await client.post(
                "/api/appattest/assert", Self.assertBody(keyID, try await ServiceHarness.assertion(client, keyID: keyID, form: form), form))
            try #require(answer.status == 200, "\(answer.errorCode ?? "")")
            #expect(answer.json?["evidenceArchived"] == .bool(true))
            let id = try #require(answer.json?["evidenceId"]?.stringValue)
            _ = try await SignedEvidence.verify(
                try Array(Data(contentsOf: archive.appendingPathComponent("\(id).json"))), signers: signers, trustAnchors: anchors,
                receiptTrustAnchors: receiptAnchors
            )
        }
    }

    @Test("class 2: without evidence, the same legacy key (broken receipt) signs as before")
    func legacyKeyWithoutEvidence() async throws {
        let harness = try ServiceHarness()
        let lenient = try AppAttestVerifier(policy: harness.configuration.policy)
        let store = harness.store
        try await harness.run { client in
            let form = ServiceHarness.form()
            let simulated = try await client.post("/api/dev/simulate", [("action", .string(JSONString("attest"))), ("form", form)])
            let keyID = try #require(simulated.json?["keyId"]?.stringValue)
            let encoded = try #require(simulated.json?["attestationObject"]?.stringValue)
            var object = try #require(Base64URL.decode(encoded))
            let keyBytes = try #require(Base64URL.decode(keyID))
            let formHash = try SignedForm(value: form).clientDataHash
            let now = RFC3339UTC.millisecondPrecision(Date())
            let intact = try await lenient.verifyAttestation(object, keyID: keyBytes, clientDataHash: formHash, at: now)
            let receipt = try #require(object.firstRange(of: intact.receipt))
            object[receipt.lowerBound + receipt.count / 2] ^= 0x01
            try await store.insertKey(
                StoredKey(
                    keyID: keyBytes, username: "alice", publicKey: Array(intact.publicKey.x963Representation), counter: 0, appID: intact.appID,
                    environment: intact.environment, receipt: intact.receipt, createdAt: now, lastUsed: now,
                    attestation: KeyAttestation(object: object, clientDataHash: formHash), counterFormHash: formHash
                )
            )
            let signed = ServiceHarness.form(amount: "50.00")
            let answer = try await client.post(
                "/api/appattest/assert", Self.assertBody(keyID, try await ServiceHarness.assertion(client, keyID: keyID, form: signed), signed))
            #expect(answer.status == 200, "\(answer.errorCode ?? "")")
        }
    }

    /// A key of `user` as a store holds it (the listing verifies nothing), registered `age` seconds ago.
    static func storedKey(_ id: Int, user: String = "alice", age: TimeInterval, revoked: Bool = false) -> StoredKey {
        let now = Date()
        var keyID = [UInt8](repeating: 0, count: 32)
        keyID[30] = UInt8(id >> 8)
        keyID[31] = UInt8(id & 0xFF)
        return StoredKey(
            keyID: keyID, username: user, publicKey: [0x04] + [UInt8](repeating: UInt8(id & 0xFF), count: 64), counter: 0,
            appID: ServiceHarness.appID, environment: .production, receipt: [UInt8](repeating: 0xEE, count: 4_000),
            createdAt: now.addingTimeInterval(-age), lastUsed: now, revokedAt: revoked ? now : nil
        )
    }

    @Test("class 4: the admin listing is paged (limit, after, next) with counts of all the user's keys; bad paging is 400")
    func pagedListing() async throws {
        let adminSecret = String(repeating: "z", count: 48)
        var harness = try ServiceHarness()
        harness.configuration.adminSecrets = try BackendSecrets(fileText: adminSecret)
        // 7 keys of alice: 2 revoked, 3 registered more than 30 days ago; one key of bob.
        for id in 1...7 {
            try await harness.store.insertKey(
                Self.storedKey(id, age: id <= 3 ? 40 * 86_400 + Double(id) : Double(100 - id), revoked: id == 2 || id == 6))
        }
        try await harness.store.insertKey(Self.storedKey(99, user: "bob", age: 5))
        try await harness.run { client in
            let admin = client.with(bearer: adminSecret)
            var seen: [String] = []
            var after: String?
            var pages = 0
            repeat {
                let path = "/admin/users/alice/keys?limit=3" + (after.map { "&after=\($0)" } ?? "")
                let page = try await admin.send(.get, path, template: "/admin/users/{username}/keys")
                try #require(page.status == 200, "\(page.errorCode ?? "")")
                #expect(page.json?["totalKeys"] == .number(7))
                #expect(page.json?["activeKeys"] == .number(5))
                #expect(page.json?["recentRegistrations"] == .number(4))
                guard case .array(let entries)? = page.json?["keys"] else { Issue.record("no keys array"); return }
                #expect(entries.count <= 3)
                seen += entries.compactMap { $0["keyId"]?.stringValue }
                after = page.json?["next"]?.stringValue
                pages += 1
            } while after != nil && pages < 10
            #expect(pages == 3)
            // Every key once, oldest first.
            let expected = [3, 2, 1, 4, 5, 6, 7].map { Base64URL.encode(Self.storedKey($0, age: 0).keyID) }
            #expect(seen == expected)
            // The default page is bounded; paging that is not a number in range, or names no key of
            // this user, is refused.
            for query in [
                "limit=0", "limit=501", "limit=abc", "limit=-1", "after=xyz", "after=\(Base64URL.encode(Self.storedKey(99, age: 0).keyID))",
            ] {
                let answer = try await admin.send(.get, "/admin/users/alice/keys?" + query, template: "/admin/users/{username}/keys")
                #expect(answer.status == 400 && answer.errorCode == "invalid_request", "\(query): \(answer.status)")
            }
            // The query string is decoded strictly, as everywhere: a parameter named twice, bad
            // percent-encoding or invalid UTF-8 is refused, never one value picked.
            for query in ["limit=1&limit=2", "limit=2&limit=1", "limit=1&x=1&x=2", "limit=1&x=%ff", "foo=%", "limit=%zz", "limit=1&after=%ff"] {
                let answer = try await admin.send(.get, "/admin/users/alice/keys?" + query, template: "/admin/users/{username}/keys")
                #expect(answer.status == 400 && answer.errorCode == "invalid_query", "\(query): \(answer.status) \(answer.errorCode ?? "")")
            }
        }
    }

    @Test("class 4: the default page holds at most 100 keys of a user with many")
    func defaultPage() async throws {
        let adminSecret = String(repeating: "z", count: 48)
        var harness = try ServiceHarness()
        harness.configuration.adminSecrets = try BackendSecrets(fileText: adminSecret)
        for id in 1...130 { try await harness.store.insertKey(Self.storedKey(id, age: Double(200 - id), revoked: true)) }
        try await harness.run { client in
            let page = try await client.with(bearer: adminSecret).send(.get, "/admin/users/alice/keys", template: "/admin/users/{username}/keys")
            try #require(page.status == 200)
            guard case .array(let entries)? = page.json?["keys"] else { Issue.record("no keys array"); return }
            #expect(entries.count == 100)
            #expect(page.json?["totalKeys"] == .number(130))
            #expect(page.json?["next"]?.stringValue == Base64URL.encode(Self.storedKey(100, age: 0).keyID))
        }
    }

    @Test("class 5: a user's assertions are budgeted per window (429 rate_limited with Retry-After), refused ones included; another user still signs")
    func assertionBudget() async throws {
        var harness = try ServiceHarness()
        harness.configuration.assertionsPerUser = 3
        harness.configuration.rateLimits.window = 3_600
        let pinned = Date()
        harness.configuration.now = { pinned }
        try await harness.run { client in
            let (alice, _) = try await ServiceHarness.register(client, form: ServiceHarness.form(at: pinned))
            let (bob, _) = try await ServiceHarness.register(client, form: ServiceHarness.form(user: "bob", at: pinned), user: "bob")
            var statuses: [Int] = []
            for index in 0..<5 {
                let form = ServiceHarness.form(amount: "\(index).00", at: pinned)
                let answer = try await client.post(
                    "/api/appattest/assert", Self.assertBody(alice, try await ServiceHarness.assertion(client, keyID: alice, form: form), form))
                statuses.append(answer.status)
                if answer.status == 429 {
                    #expect(answer.errorCode == "rate_limited")
                    #expect(answer.headers[.retryAfter].flatMap { Int($0) }.map { $0 > 0 } == true)
                }
            }
            #expect(statuses == [200, 200, 200, 429, 429], "\(statuses)")
            let form = ServiceHarness.form(user: "bob", at: pinned)
            let other = try await client.post(
                "/api/appattest/assert", Self.assertBody(bob, try await ServiceHarness.assertion(client, keyID: bob, form: form), form, user: "bob"))
            #expect(other.status == 200)
        }
    }

    @Test(
        "class 5: below the free-space threshold new forms and challenges are 507 insufficient_storage, nothing is written, and /healthz says which filesystem; above it they are taken"
    )
    func storageGuard() async throws {
        let directory = FileManager.default.temporaryDirectory.path
        for (threshold, low) in [(UInt64(1) << 52, true), (UInt64(1), false)] {
            var harness = try ServiceHarness()
            harness.configuration.storageGuard = StorageGuardConfiguration(paths: [directory], minimumFreeBytes: threshold, interval: .zero)
            let store = harness.store
            try await harness.run { client in
                let challenge = try await client.send(.get, "/api/appattest/challenge?username=alice", template: "/api/appattest/challenge")
                let form = ServiceHarness.form()
                let (keyID, registered) = try await ServiceHarness.register(client, form: form)
                let health = try await client.send(.get, "/healthz", template: "/healthz")
                if low {
                    #expect(challenge.status == 507 && challenge.errorCode == "insufficient_storage")
                    #expect(registered.status == 507 && registered.errorCode == "insufficient_storage")
                    let keyBytes = try #require(Base64URL.decode(keyID))
                    #expect(try await store.loadKey(keyID: keyBytes) == nil)
                    #expect(health.status == 503)
                    #expect(health.json?["status"]?.stringValue == "insufficient_storage")
                    #expect(health.json?["path"]?.stringValue == directory)
                    #expect(health.json?["minimumFreeBytes"] == .number(Double(threshold)))
                } else {
                    #expect(challenge.status == 200)
                    #expect(registered.status == 200)
                    #expect(health.status == 200 && health.json?["status"]?.stringValue == "ok")
                }
            }
        }
    }

    @Test("class 5: a guarded directory that cannot be examined counts as low (fail closed)")
    func storageGuardMissingPath() async throws {
        var harness = try ServiceHarness()
        let missing = FileManager.default.temporaryDirectory.appendingPathComponent("missing-\(UUID().uuidString)").path
        harness.configuration.storageGuard = StorageGuardConfiguration(paths: [missing], minimumFreeBytes: 1, interval: .zero)
        try await harness.run { client in
            let challenge = try await client.send(.get, "/api/appattest/challenge?username=alice", template: "/api/appattest/challenge")
            #expect(challenge.status == 507)
            let health = try await client.send(.get, "/healthz", template: "/healthz")
            #expect(health.status == 503 && health.json?["path"]?.stringValue == missing && health.json?["availableBytes"] == nil)
        }
    }
}
