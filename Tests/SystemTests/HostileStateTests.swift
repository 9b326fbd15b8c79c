//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Issue 31, the classes about state and counters, against the built binary (`formattest-dev
/// serve --dev-simulator`, a SQLite store): a reordered delivery never retires an honest key
/// (class 12), a user's assertions are budgeted (class 5), the low-space guard refuses new forms
/// and says why on /healthz (class 5), and the admin listing is paged (class 4). Class 2
/// (evidence for a key registered without valid receipts) needs a key the simulated device
/// forgets across the restart that turns evidence on; the route tests cover it in process.
struct HostileStateTests {
    /// A running service and a tiny JSON client for it.
    struct Service {
        let server: Formattest.Running
        let port: Int
        let files: TemporaryFiles

        /// `files`: another instance's, to share its store and data directory.
        init(_ extra: [String], logLevel: String = "warning", files: TemporaryFiles? = nil) throws {
            self.files = try files ?? TemporaryFiles()
            self.port = Formattest.freePort()
            self.server = try Formattest.start(
                [
                    "serve", "--dev-simulator", "--port", String(self.port), "--log-level", logLevel,
                    "--store", "sqlite:" + self.files.directory.appendingPathComponent("store.sqlite").path,
                    "--data-dir", self.files.directory.appendingPathComponent("data").path,
                ] + extra
            )
        }

        func stop() async { _ = await self.server.terminate(within: 10) }

        /// The same, blocking the calling thread: for `defer` blocks.
        func stop() { _ = self.server.terminate(within: 10) }

        /// Stops the service and returns what it logged.
        func stopAndLog() async -> String {
            _ = await self.server.terminate(within: 10)
            return await self.server.finish().stderr
        }

        func send(_ method: String, _ path: String, _ body: [String: Any]? = nil, bearer: String? = nil) async throws -> (Int, [String: Any]) {
            let (status, object, _) = try await self.exchange(method, path, body, bearer: bearer)
            return (status, object)
        }

        /// `send` with more request headers, and the answer's headers.
        func exchange(
            _ method: String, _ path: String, _ body: [String: Any]? = nil, bearer: String? = nil, headers: [String: String] = [:]
        ) async throws -> (Int, [String: Any], [AnyHashable: Any]) {
            var request = URLRequest(url: URL(string: "http://127.0.0.1:\(self.port)\(path)")!)
            request.httpMethod = method
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            if let bearer { request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization") }
            for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
            if let body { request.httpBody = try JSONSerialization.data(withJSONObject: body) }
            let (data, response) = try await URLSession.shared.data(for: request)
            let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:]
            let http = response as? HTTPURLResponse
            return (http?.statusCode ?? 0, object, http?.allHeaderFields ?? [:])
        }

        static func form(_ amount: String, user: String = "alice", action: String = "transfer") -> [String: Any] {
            let stamp = ISO8601DateFormatter().string(from: Date())
            return ["action": action, "amount": amount, "to": "bob", "username": user, "timestamp": stamp, "nonce": UUID().uuidString]
        }

        /// Registers a key of `user` over a fresh form; its keyId. The form is a device
        /// registration, not a transfer: no factor policy here asks more of it than App Attest.
        func register(user: String = "alice") async throws -> String {
            let form = Self.form("1.00", user: user, action: "device-registration")
            let (_, simulated) = try await self.send("POST", "/api/dev/simulate", ["action": "attest", "form": form])
            let keyID = try #require(simulated["keyId"] as? String)
            let (status, answer) = try await self.send(
                "POST", "/api/appattest/attest",
                ["username": user, "keyId": keyID, "attestationObject": simulated["attestationObject"] ?? "", "form": form]
            )
            #expect(status == 200, "\(answer)")
            return keyID
        }

        /// A form and the simulated device's assertion over it (the device's next counter).
        func signed(_ keyID: String, amount: String, user: String = "alice") async throws -> [String: Any] {
            let form = Self.form(amount, user: user)
            let (_, simulated) = try await self.send("POST", "/api/dev/simulate", ["action": "assert", "keyId": keyID, "form": form])
            return ["username": user, "keyId": keyID, "assertion": try #require(simulated["assertion"] as? String), "form": form]
        }

        func code(_ answer: [String: Any]) -> String? { (answer["error"] as? [String: Any])?["code"] as? String }
    }

    /// `object` (an attestation object's CBOR) with its receipt's byte string replaced by the
    /// five bytes of a DER INTEGER, `30 03 02 01 00`: not a CMS SignedData. The receipt is outside
    /// the attestation's signature, so the key still registers where receipts are not required.
    static func withGarbageReceipt(_ object: [UInt8]) throws -> [UInt8] {
        let name = [0x67] + Array("receipt".utf8)
        let start = try #require((0...(object.count - name.count)).first { Array(object[$0..<$0 + name.count]) == name }) + name.count
        var length = 0
        var header = 1
        switch object[start] {
        case 0x40...0x57: length = Int(object[start] - 0x40)
        case 0x58: (length, header) = (Int(object[start + 1]), 2)
        case 0x59: (length, header) = (Int(object[start + 1]) << 8 | Int(object[start + 2]), 3)
        case 0x5A: (length, header) = (object[(start + 1)...(start + 4)].reduce(0) { $0 << 8 | Int($1) }, 5)
        default: Issue.record("the receipt is not a byte string")
        }
        return Array(object[..<start]) + [0x45, 0x30, 0x03, 0x02, 0x01, 0x00] + Array(object[(start + header + length)...])
    }

    @Test("r3 F7: a refusal from a library's error (SwiftASN1) carries no source location in its message; the log keeps it")
    func noSourceLocationsInMessages() async throws {
        // Instance A, receipts not required, registers a key whose attestation carries a garbage receipt.
        let first = try Service([])
        defer { first.stop() }
        try #require(await Formattest.waitForListener(port: first.port, process: first.server.process))
        let form = Service.form("1.00")
        let (_, simulated) = try await first.send("POST", "/api/dev/simulate", ["action": "attest", "form": form])
        let keyID = try #require(simulated["keyId"] as? String)
        let text = try #require(simulated["attestationObject"] as? String).replacingOccurrences(of: "-", with: "+").replacingOccurrences(
            of: "_", with: "/")
        let object = try #require(Data(base64Encoded: text + String(repeating: "=", count: (4 - text.count % 4) % 4)))
        let garbage = Data(try Self.withGarbageReceipt(Array(object))).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        let (registered, answer) = try await first.send(
            "POST", "/api/appattest/attest", ["username": "alice", "keyId": keyID, "attestationObject": garbage, "form": form])
        #expect(registered == 200, "\(answer)")
        // Instance B, on the same store with evidence records: the key's receipt is parsed, and refused.
        let second = try Service(["--evidence-dir", first.files.directory.path], logLevel: "info", files: first.files)
        try #require(await Formattest.waitForListener(port: second.port, process: second.server.process))
        let (status, refused) = try await second.send("POST", "/api/appattest/assert", try await first.signed(keyID, amount: "2.00"))
        let message = ((refused["error"] as? [String: Any])?["message"] as? String) ?? ""
        #expect(status == 428 && second.code(refused) == "key_attestation_unverifiable", "\(status) \(refused)")
        #expect(message.contains("receipt") && !message.contains(".swift:"), "\(message)")
        let log = await second.stopAndLog()
        #expect(log.contains("rejected: library detail") && log.contains(".swift:"), "\(log)")
    }

    @Test("class 12: forms delivered in the opposite order: 409 counter_out_of_order and the key signs on; --counter-rule strict retires it")
    func reorderedDelivery() async throws {
        for rule in ["tolerant", "strict"] {
            let service = try Service(["--counter-rule", rule])
            defer { service.stop() }
            try #require(await Formattest.waitForListener(port: service.port, process: service.server.process))
            let keyID = try await service.register()
            let first = try await service.signed(keyID, amount: "1.00")
            let second = try await service.signed(keyID, amount: "2.00")
            #expect(try await service.send("POST", "/api/appattest/assert", second).0 == 200)
            let (lateStatus, late) = try await service.send("POST", "/api/appattest/assert", first)
            let (againStatus, again) = try await service.send("POST", "/api/appattest/assert", try await service.signed(keyID, amount: "1.00"))
            if rule == "tolerant" {
                #expect(lateStatus == 409 && service.code(late) == "counter_out_of_order", "\(late)")
                #expect(againStatus == 200, "\(again)")
            } else {
                #expect(lateStatus == 428 && service.code(late) == "requires_reattestation", "\(late)")
                #expect(againStatus == 428, "\(again)")
            }
        }
    }

    @Test("class 5: one user's assertions are budgeted per window (429 rate_limited with Retry-After); another user still signs")
    func assertionBudget() async throws {
        let service = try Service(["--rate-limit-assertions-per-user", "3", "--rate-limit-window", "3600"])
        defer { service.stop() }
        try #require(await Formattest.waitForListener(port: service.port, process: service.server.process))
        try await Formattest.awayFromWindowEdge(3600, margin: 120)
        let alice = try await service.register()
        let bob = try await service.register(user: "bob")
        var statuses: [Int] = []
        for index in 0..<5 {
            let (status, answer) = try await service.send("POST", "/api/appattest/assert", try await service.signed(alice, amount: "\(index).00"))
            statuses.append(status)
            if status == 429 { #expect(service.code(answer) == "rate_limited") }
        }
        #expect(statuses == [200, 200, 200, 429, 429], "\(statuses)")
        #expect(try await service.send("POST", "/api/appattest/assert", try await service.signed(bob, amount: "9.00", user: "bob")).0 == 200)
    }

    @Test("F4: a stranger's assertions for alice (her keyId, no valid signature) do not spend her budget; a refusal by budget stores nothing")
    func assertionBudgetAfterSignature() async throws {
        let files = try TemporaryFiles()
        let store = "sqlite:" + files.directory.appendingPathComponent("budget.sqlite").path
        func start(_ budget: String) throws -> Service {
            try Service([
                "--rate-limit-assertions-per-user", budget, "--rate-limit-window", "3600", "--rate-limit-per-address", "1000", "--store", store,
            ])
        }
        let service = try start("3")
        try #require(await Formattest.waitForListener(port: service.port, process: service.server.process))
        try await Formattest.awayFromWindowEdge(3600, margin: 120)
        let alice = try await service.register()
        // Five forged assertions: alice's keyId, an assertion over another form (401 each).
        var forged: [Int] = []
        for index in 0..<5 {
            var request = try await service.signed(alice, amount: "\(index).50")
            request["form"] = Service.form("999.00")
            forged.append(try await service.send("POST", "/api/appattest/assert", request).0)
        }
        #expect(forged == [401, 401, 401, 401, 401], "\(forged)")
        // Alice's own three still pass; the fourth is over her budget.
        var statuses: [Int] = []
        for index in 0..<3 {
            statuses.append(try await service.send("POST", "/api/appattest/assert", try await service.signed(alice, amount: "\(index).00")).0)
        }
        #expect(statuses == [200, 200, 200], "alice's budget was spent by the forgeries: \(statuses)")
        let refusedRequest = try await service.signed(alice, amount: "4.00")
        let (refused, answer) = try await service.send("POST", "/api/appattest/assert", refusedRequest)
        #expect(refused == 429 && service.code(answer) == "rate_limited", "\(refused) \(answer)")
        await service.stop()
        // The refused form changed nothing: with a larger budget, the very same request is accepted
        // (not a replay, its counter still above the stored one).
        let larger = try start("100")
        defer { larger.stop() }
        try #require(await Formattest.waitForListener(port: larger.port, process: larger.server.process))
        let (again, againAnswer) = try await larger.send("POST", "/api/appattest/assert", refusedRequest)
        #expect(again == 200, "\(again) \(againAnswer)")
    }

    @Test("F4: without caller authentication /assert spends the per-address budget, whatever the user or key")
    func assertionAddressBudget() async throws {
        let service = try Service(["--rate-limit-per-address", "3", "--rate-limit-window", "3600"])
        defer { service.stop() }
        try #require(await Formattest.waitForListener(port: service.port, process: service.server.process))
        try await Formattest.awayFromWindowEdge(3600, margin: 120)
        var statuses: [Int] = []
        for index in 0..<5 {
            let request: [String: Any] = [
                "username": "user\(index)", "keyId": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "assertion": "oA",
                "form": Service.form("1.00", user: "user\(index)"),
            ]
            statuses.append(try await service.send("POST", "/api/appattest/assert", request).0)
        }
        #expect(statuses.prefix(3).allSatisfy { $0 != 429 } && Array(statuses.suffix(2)) == [429, 429], "\(statuses)")
    }

    @Test("class 5: below min-free-space the service takes no new form (507 insufficient_storage) and /healthz says which filesystem")
    func lowSpace() async throws {
        // 100 TB free required (the largest threshold): no filesystem of this machine has it.
        let low = try Service(["--min-free-space", "100000000"])
        defer { low.stop() }
        try #require(await Formattest.waitForListener(port: low.port, process: low.server.process))
        let (challengeStatus, challenge) = try await low.send("GET", "/api/appattest/challenge?username=alice")
        #expect(challengeStatus == 507 && low.code(challenge) == "insufficient_storage", "\(challenge)")
        let form = Service.form("1.00")
        let (_, simulated) = try await low.send("POST", "/api/dev/simulate", ["action": "attest", "form": form])
        let (attestStatus, attest) = try await low.send(
            "POST", "/api/appattest/attest",
            ["username": "alice", "keyId": simulated["keyId"] ?? "", "attestationObject": simulated["attestationObject"] ?? "", "form": form]
        )
        #expect(attestStatus == 507 && low.code(attest) == "insufficient_storage", "\(attest)")
        let (healthStatus, health) = try await low.send("GET", "/healthz")
        #expect(healthStatus == 503 && health["status"] as? String == "insufficient_storage", "\(health)")
        #expect((health["path"] as? String)?.isEmpty == false)
        #expect((health["minimumFreeBytes"] as? Int) == 100_000_000_000_000)

        // One thing changed: 1 MB required, and the same requests are taken.
        let roomy = try Service(["--min-free-space", "1"])
        defer { roomy.stop() }
        try #require(await Formattest.waitForListener(port: roomy.port, process: roomy.server.process))
        #expect(try await roomy.send("GET", "/api/appattest/challenge?username=alice").0 == 200)
        _ = try await roomy.register()
        let (roomyHealth, roomyAnswer) = try await roomy.send("GET", "/healthz")
        #expect(roomyHealth == 200 && roomyAnswer["status"] as? String == "ok")
    }

    @Test("class 4: the admin listing is paged and counts every key")
    func pagedListing() async throws {
        let secretFiles = try TemporaryFiles()
        let secret = String(repeating: "a", count: 48)
        let secretFile = try secretFiles.write(secret + "\n", named: "admin-secrets")
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: secretFile)
        let service = try Service(["--admin-secret-file", secretFile, "--max-keys-per-user", "2"])
        defer { service.stop() }
        try #require(await Formattest.waitForListener(port: service.port, process: service.server.process))
        for _ in 0..<5 { _ = try await service.register() }
        var seen = 0
        var path = "/admin/users/alice/keys?limit=2"
        var pages = 0
        while pages < 10 {
            let (status, page) = try await service.send("GET", path, bearer: secret)
            try #require(status == 200, "\(page)")
            #expect(page["totalKeys"] as? Int == 5 && page["activeKeys"] as? Int == 2 && page["recentRegistrations"] as? Int == 5, "\(page)")
            seen += (page["keys"] as? [Any])?.count ?? 0
            pages += 1
            guard let next = page["next"] as? String else { break }
            path = "/admin/users/alice/keys?limit=2&after=\(next)"
        }
        #expect(seen == 5 && pages == 3)
    }
}
