//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import Crypto
import FormAttestFlows
import FormAttestForm
import FormAttestServer
import FormAttestTokens
import Foundation
import HTTPTypes
import Testing

/// A store whose writes fail (as a full, read-only or locked SQLite file does) while reads still
/// work, with a reason full of internals that must never reach a client.
actor WriteFailingStore: OperationalAttestationStore {
    let inner: MemoryAttestationStore
    private var failing = false
    static let leakyReason = "SQLite: database is locked - while executing `BEGIN IMMEDIATE TRANSACTION` on /var/lib/formattest/formattest.sqlite"

    init(inner: MemoryAttestationStore) { self.inner = inner }

    func setFailing(_ failing: Bool) { self.failing = failing }

    /// When set, every key read is revoked in the store right after it is read: an operator's
    /// revocation landing between the flows' load and their commit.
    private var revokingAfterLoad = false
    func setRevokingAfterLoad(_ revoking: Bool) { self.revokingAfterLoad = revoking }

    /// Each purge step's limit and what it deleted, in order.
    private(set) var purgeSteps: [(limit: Int, deleted: Int)] = []

    /// When set, ``passkeyCredentials(username:)`` answers no reader until this many have read.
    private var heldReads: Int?
    private var readersWaiting: [CheckedContinuation<Void, Never>] = []
    func holdPasskeyReads(until count: Int) { self.heldReads = count }

    /// The rate-limit windows counted and given back, in order (their ids).
    private(set) var counted: [[UInt8]] = []
    private(set) var refunded: [[UInt8]] = []
    func forgetWindows() {
        self.counted = []
        self.refunded = []
    }

    private func write() throws(StoreError) {
        if self.failing { throw StoreError(code: .unavailable, reason: Self.leakyReason) }
    }

    func loadKey(keyID: [UInt8]) async throws(StoreError) -> StoredKey? {
        let key = try await self.inner.loadKey(keyID: keyID)
        if self.revokingAfterLoad, key != nil { try await self.inner.revokeKey(keyID: keyID, at: Date()) }
        return key
    }
    func requireReattestation(keyID: [UInt8]) async throws(StoreError) {
        try self.write()
        try await self.inner.requireReattestation(keyID: keyID)
    }
    func keys(username: String) async throws(StoreError) -> [StoredKey] { try await self.inner.keys(username: username) }
    func countKeys(username: String, _ filter: KeyCountFilter) async throws(StoreError) -> Int {
        try await self.inner.countKeys(username: username, filter)
    }
    func keys(username: String, after position: KeyPosition?, limit: Int) async throws(StoreError) -> [StoredKey] {
        try await self.inner.keys(username: username, after: position, limit: limit)
    }
    func revokeKey(keyID: [UInt8], at date: Date) async throws(StoreError) {
        try self.write()
        try await self.inner.revokeKey(keyID: keyID, at: date)
    }
    func countRequest(in window: RateLimitWindow) async throws(StoreError) -> Int {
        try self.write()
        self.counted.append(window.id)
        return try await self.inner.countRequest(in: window)
    }
    func refundRequest(in window: RateLimitWindow) async throws(StoreError) {
        try self.write()
        self.refunded.append(window.id)
        try await self.inner.refundRequest(in: window)
    }
    func replaceReceipt(keyID: [UInt8], previous: [UInt8], with receipt: [UInt8]) async throws(StoreError) -> Bool {
        try self.write()
        return try await self.inner.replaceReceipt(keyID: keyID, previous: previous, with: receipt)
    }
    func issueChallenge(_ challenge: IssuedChallenge) async throws(StoreError) {
        try self.write()
        try await self.inner.issueChallenge(challenge)
    }
    func recordFormHash(_ record: ReplayRecord, now: Date) async throws(StoreError) {
        try self.write()
        try await self.inner.recordFormHash(record, now: now)
    }
    func isFormHashRecorded(_ formHash: [UInt8], now: Date) async throws(StoreError) -> Bool {
        try await self.inner.isFormHashRecorded(formHash, now: now)
    }
    func commitRegistration(_ commit: RegistrationCommit) async throws(StoreError) {
        try self.write()
        try await self.inner.commitRegistration(commit)
    }
    func commitAssertion(_ commit: AssertionCommit) async throws(StoreError) {
        try self.write()
        try await self.inner.commitAssertion(commit)
    }
    func loadPasskey(credentialID: [UInt8]) async throws(StoreError) -> StoredPasskey? {
        try await self.inner.loadPasskey(credentialID: credentialID)
    }
    func passkeys(username: String) async throws(StoreError) -> [StoredPasskey] { try await self.inner.passkeys(username: username) }
    func passkeys(username: String, after position: KeyPosition?, limit: Int) async throws(StoreError) -> [StoredPasskey] {
        try await self.inner.passkeys(username: username, after: position, limit: limit)
    }
    func passkeyCredentials(username: String) async throws(StoreError) -> PasskeyCredentials {
        let credentials = try await self.inner.passkeyCredentials(username: username)
        // Held until `count` readers have read: every one of them past the flows' check before
        // any commits.
        if let count = self.heldReads {
            if self.readersWaiting.count + 1 >= count {
                self.heldReads = nil
                for waiting in self.readersWaiting { waiting.resume() }
                self.readersWaiting = []
            } else {
                await withCheckedContinuation { self.readersWaiting.append($0) }
            }
        }
        return credentials
    }
    func countPasskeys(username: String, _ filter: KeyCountFilter) async throws(StoreError) -> Int {
        try await self.inner.countPasskeys(username: username, filter)
    }
    func revokePasskey(credentialID: [UInt8], at date: Date) async throws(StoreError) {
        try self.write()
        try await self.inner.revokePasskey(credentialID: credentialID, at: date)
    }
    func commitPasskeyRegistration(_ commit: PasskeyRegistrationCommit) async throws(StoreError) {
        try self.write()
        try await self.inner.commitPasskeyRegistration(commit)
    }
    func purgeExpired(now: Date, limit: Int) async throws(StoreError) -> PurgeStep {
        try self.write()
        let step = try await self.inner.purgeExpired(now: now, limit: limit)
        self.purgeSteps.append((limit, step.deleted))
        return step
    }
    func purgeRevoked(before cutoff: Date, limit: Int) async throws(StoreError) -> PurgeStep {
        try self.write()
        return try await self.inner.purgeRevoked(before: cutoff, limit: limit)
    }
    func shutdown() async { await self.inner.shutdown() }
}

struct HostileRouteTests {
    static func text(_ value: String) -> JSONValue { .string(JSONString(value)) }

    @Test("a username with a control character is 400 invalid_request, in a body or a query string, and registers nothing")
    func controlCharacters() async throws {
        let harness = try ServiceHarness()
        let store = harness.store
        try await harness.run { client in
            for query in ["bob%00x", "bob%01", "bob%7F", "bob%C2%85", "%00", "a%0Ab"] {
                let answer = try await client.send(
                    .get, "/api/appattest/challenge?purpose=form&username=\(query)", template: "/api/appattest/challenge")
                #expect(answer.status == 400 && answer.errorCode == "invalid_request", "\(query): \(answer.status)")
            }
            // alice\0evil tries to register a key (a genuine attestation over a genuine form).
            let form = ServiceHarness.form(user: "alice\u{0}evil")
            let simulated = try await client.post("/api/dev/simulate", [("action", Self.text("attest")), ("form", form)])
            let keyID = try #require(simulated.json?["keyId"]?.stringValue)
            let attest = try await client.post(
                "/api/appattest/attest",
                [
                    ("username", Self.text("alice\u{0}evil")), ("keyId", Self.text(keyID)),
                    ("attestationObject", simulated.json?["attestationObject"] ?? .null), ("form", form),
                ]
            )
            #expect(attest.status == 400 && attest.errorCode == "invalid_request", "\(attest.status) \(attest.errorCode ?? "")")
            #expect(try await store.loadKey(keyID: try #require(Base64URL.decode(keyID))) == nil)
            // Nor can alice's key be used by alice\0evil.
            let (aliceKey, registered) = try await ServiceHarness.register(client, form: ServiceHarness.form(user: "alice"))
            #expect(registered.status == 200)
            let evilForm = ServiceHarness.form(user: "alice\u{0}evil")
            let assert = try await client.post(
                "/api/appattest/assert",
                [
                    ("username", Self.text("alice\u{0}evil")), ("keyId", Self.text(aliceKey)),
                    ("assertion", Self.text(try await ServiceHarness.assertion(client, keyID: aliceKey, form: evilForm))), ("form", evilForm),
                ]
            )
            #expect(assert.status == 400 && assert.errorCode == "invalid_request")
        }
    }

    /// The id of a rate-limit window as the service names it (`RateLimiter.digest`): SHA-256 of
    /// a label, the endpoint, the kind and the subject, each ended by a NUL.
    static func window(_ endpoint: String, _ kind: String, _ subject: String) -> [UInt8] {
        var hasher = SHA256()
        for part in ["formattest-rate-limit", endpoint, kind, subject] { hasher.update(data: Array(part.utf8) + [0]) }
        return Array(hasher.finalize())
    }

    @Test(
        "r8 F3: a registration the flow refuses spends none of its lasting budgets (no count, no refund); one verified and then refused by the store gives them back"
    )
    func lastingBudgetsAtAdmission() async throws {
        let secret = String(repeating: "k", count: 48)
        var harness = try ServiceHarness()
        harness.configuration.callerAuthentication = .trustedBackend(try BackendSecrets(fileText: secret))
        let store = WriteFailingStore(inner: harness.store)
        harness.storeOverride = store
        // What a registration of alice's through the backend leaves in the store for long.
        let backend = try BackendSecrets(fileText: secret).backend(presenting: secret)
        let lasting = [
            Self.window("registration", "user-registrations", "alice"),
            Self.window("registration", "backend-registrations", try #require(backend)),
            Self.window("registration", "backend-registrations-user", try #require(backend) + "\u{0}alice"),
        ]
        try await harness.run { anonymous in
            let client = anonymous.with(bearer: secret)
            // An attestation that does not verify: refused for what it is, 401.
            let junk = try await client.post(
                "/api/appattest/attest",
                [
                    ("username", Self.text("alice")), ("keyId", Self.text("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")),
                    ("attestationObject", Self.text("oA")), ("form", ServiceHarness.form(user: "alice", action: "device-registration")),
                ]
            )
            #expect((400..<500).contains(junk.status) && junk.status != 429, "\(junk.status) \(junk.errorCode ?? "")")
            let junkCounted = await store.counted
            #expect(!junkCounted.isEmpty, "the endpoint's own budgets are counted")
            #expect(Set(junkCounted).isDisjoint(with: lasting), "a refused registration counted a lasting budget")
            #expect(await store.refunded.isEmpty, "nothing spent, nothing given back")

            // A genuine registration spends each lasting budget once, and keeps it.
            await store.forgetWindows()
            let form = ServiceHarness.form(user: "alice", action: "device-registration")
            let simulated = try await client.post("/api/dev/simulate", [("action", Self.text("attest")), ("form", form)])
            let body: [(String, JSONValue)] = [
                ("username", Self.text("alice")), ("keyId", simulated.json?["keyId"] ?? .null),
                ("attestationObject", simulated.json?["attestationObject"] ?? .null), ("form", form),
            ]
            let registered = try await client.post("/api/appattest/attest", body)
            #expect(registered.status == 200, "\(registered.errorCode ?? "")")
            #expect(await store.counted.filter(lasting.contains) == lasting)
            #expect(await store.refunded.isEmpty)

            // The same registration again verifies, spends them at admission, and the store refuses
            // its commit (the form was accepted): what it spent is given back.
            await store.forgetWindows()
            let again = try await client.post("/api/appattest/attest", body)
            #expect((400..<500).contains(again.status) && again.status != 429, "\(again.status) \(again.errorCode ?? "")")
            #expect(await store.counted.filter(lasting.contains) == lasting)
            #expect(await store.refunded == lasting)
        }
    }

    @Test("a store that cannot write: 503 store_unavailable with nothing internal, /healthz 503 though reads work; both recover")
    func storeCannotWrite() async throws {
        var harness = try ServiceHarness()
        let failing = WriteFailingStore(inner: harness.store)
        harness.storeOverride = failing
        try await harness.run { client in
            let (keyID, registered) = try await ServiceHarness.register(client, form: ServiceHarness.form())
            #expect(registered.status == 200)
            #expect(try await client.send(.get, "/healthz", template: "/healthz").status == 200)
            await failing.setFailing(true)
            let form = ServiceHarness.form(nonce: "while-down")
            let body: [(String, JSONValue)] = [
                ("username", Self.text("alice")), ("keyId", Self.text(keyID)),
                ("assertion", Self.text(try await ServiceHarness.assertion(client, keyID: keyID, form: form))), ("form", form),
            ]
            let down = try await client.post("/api/appattest/assert", body)
            #expect(down.status == 503 && down.errorCode == "store_unavailable")
            let message = down.json?["error"]?["message"]?.stringValue ?? ""
            for word in ["SQLite", "database", "locked", "BEGIN", "TRANSACTION", "/var/lib"] {
                #expect(!message.contains(word), "\(message)")
            }
            let challenge = try await client.send(.get, "/api/appattest/challenge?purpose=form", template: "/api/appattest/challenge")
            #expect(challenge.status == 503 && !(challenge.json?["error"]?["message"]?.stringValue ?? "").contains("SQLite"))
            let health = try await client.send(.get, "/healthz", template: "/healthz")
            #expect(health.status == 503 && health.json?["status"]?.stringValue == "store_unavailable")
            await failing.setFailing(false)
            #expect(try await client.send(.get, "/healthz", template: "/healthz").status == 200)
            // Nothing was written by the refused request: the same form is accepted now.
            #expect(try await client.post("/api/appattest/assert", body).status == 200)
        }
        try await OpenAPIConformance.check(harness.recorder)
    }

    @Test("a key revoked after the flows loaded it is refused by the commit (401 key_revoked), and the form is not recorded")
    func keyRevokedBeforeCommit() async throws {
        var harness = try ServiceHarness()
        let inner = harness.store
        let store = WriteFailingStore(inner: inner)
        harness.storeOverride = store
        try await harness.run { client in
            let (keyID, registered) = try await ServiceHarness.register(client, form: ServiceHarness.form())
            #expect(registered.status == 200)
            let form = ServiceHarness.form(nonce: "revoked-meanwhile")
            let body: [(String, JSONValue)] = [
                ("username", Self.text("alice")), ("keyId", Self.text(keyID)),
                ("assertion", Self.text(try await ServiceHarness.assertion(client, keyID: keyID, form: form))), ("form", form),
            ]
            await store.setRevokingAfterLoad(true)
            let refused = try await client.post("/api/appattest/assert", body)
            await store.setRevokingAfterLoad(false)
            #expect(refused.status == 401 && refused.errorCode == "key_revoked", "\(refused.status) \(refused.errorCode ?? "")")
            let formHash = try SignedForm(value: form).clientDataHash
            #expect(try await inner.isFormHashRecorded(formHash, now: Date()) == false, "the refused form was recorded")
            // Loaded revoked from now on: refused before any commit, with the same answer.
            let again = try await client.post("/api/appattest/assert", body)
            #expect(again.status == 401 && again.errorCode == "key_revoked")
        }
        try await OpenAPIConformance.check(harness.recorder)
    }

    @Test("a body on GET or DELETE is bounded by size like any other")
    func bodiesOnEveryMethod() async throws {
        let harness = try ServiceHarness()
        try await harness.run { client in
            let big = [UInt8](repeating: UInt8(ascii: "a"), count: 70 * 1024)
            let get = try await client.send(.get, "/healthz", template: "/healthz", body: big)
            #expect(get.status == 413 && get.errorCode == "body_too_large")
            let delete = try await client.send(.delete, "/api/appattest/assert", template: "/api/appattest/assert", body: big)
            #expect(delete.status == 413)
        }
    }

    @Test("forms with inexact numbers are 400 form_inexact_number at every endpoint, the simulator's included")
    func inexactNumbers() async throws {
        let harness = try ServiceHarness()
        try await harness.run { client in
            let form = Array(#"{"amount":9007199254740993,"timestamp":"\#(RFC3339Now.text)","username":"alice","nonce":"n"}"#.utf8)
            for path in ["/api/dev/simulate", "/api/appattest/assert", "/api/appattest/attest", "/api/appattest/register-pooled"] {
                let body =
                    Array(
                        #"{"action":"attest","username":"alice","keyId":"AA","assertion":"AA","attestationObject":"AA","poolChallenge":"AA","form":"#
                            .utf8) + form + Array("}".utf8)
                let answer = try await client.send(.post, path, template: path, body: body)
                #expect(answer.status == 400 && answer.errorCode == "form_inexact_number", "\(path): \(answer.status) \(answer.errorCode ?? "")")
            }
        }
    }
}

/// The real clock's now as a form timestamp.
enum RFC3339Now {
    static var text: String {
        var text = ISO8601DateFormatter().string(from: Date())
        text.removeLast()
        return text + ".000Z"
    }
}

struct PackedRouteTests {
    @Test(
        "with an attestation authority configured, a registration's answer carries a packed attestation of the key, over the attested clientDataHash")
    func packedInAnswer() async throws {
        var harness = try ServiceHarness()
        let (authority, _) = try PackedAttestationAuthority.generate(organization: "FormAttest Test Bank", country: "DE")
        harness.configuration.packedAttestation = (authority, "bank.example")
        try await harness.run { client in
            let (keyID, registered) = try await ServiceHarness.register(client, form: ServiceHarness.form())
            #expect(registered.status == 200)
            let packed = try #require(registered.json?["formats"]?["packedAttestation"])
            #expect(packed["fmt"]?.stringValue == "packed" && packed["rpId"]?.stringValue == "bank.example")
            #expect(packed["clientDataHash"] == registered.json?["formHash"])
            let object = try #require(Base64URL.decode(packed["attestationObject"]?.stringValue ?? ""))
            // authData's attested credential data: aaguid, then length 32 and the keyId as the credential id.
            let credential = PackedAttestationAuthority.aaguid + [0, 32] + (try #require(Base64URL.decode(keyID)))
            #expect((0...(object.count - credential.count)).contains { Array(object[$0..<($0 + credential.count)]) == credential })
        }
        try await OpenAPIConformance.check(harness.recorder)
    }
}
