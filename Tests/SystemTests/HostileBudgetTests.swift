//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing

/// The red team's fourth pass (r5) on budgets, through the built `formattest serve`: what a
/// request leaves in the store for long is budgeted over as long (F5: a user's pool challenges,
/// kept 30 days; F10: a backend's registrations for fresh users). Each test fails on the
/// service before the fix (docs/reliability.md, "Fourth pass (r5)").
@Suite(.serialized)
struct HostileBudgetTests {
    typealias Service = HostileUserTests.Service

    static func exchange(_ port: Int, _ target: String, method: String = "GET", headers: [(String, String)] = [], body: [UInt8] = [])
        throws -> (status: Int, body: String)
    {
        try HostileUserTests.exchange(port, target, method: method, headers: headers, body: body)
    }

    /// The seconds a 429's message says to wait (`retry in N s`).
    static func retryAfter(_ body: String) -> Int? {
        guard let range = body.range(of: "retry in ") else { return nil }
        return Int(body[range.upperBound...].prefix { $0.isNumber })
    }

    @Test(
        "r5 F5: a user's pool challenges (kept 30 days) are budgeted over 30 days whoever asks: a backend, or a client without caller authentication")
    func poolChallengesPerUser() async throws {
        let files = try TemporaryFiles()
        let secretFile = try files.writeSecret(HostileUserTests.secret, named: "backend-secret")
        let bearer = [("Authorization", "Bearer \(HostileUserTests.secret)")]
        // The backend's own pool budget is far away: only the user's can refuse.
        let backend = try Service(
            [
                "--store", "memory", "--caller-secret-file", secretFile, "--rate-limit-pool", "1000", "--rate-limit-per-backend", "1000",
                "--rate-limit-per-user", "1000", "--rate-limit-pool-per-user", "3",
            ],
            files: files
        )
        var alice: [Int] = []
        for _ in 0..<3 {
            alice.append(try Self.exchange(backend.port, "/api/appattest/challenge?purpose=pool&username=alice", headers: bearer).status)
        }
        let fourth = try Self.exchange(backend.port, "/api/appattest/challenge?purpose=pool&username=alice", headers: bearer)
        #expect(alice == [200, 200, 200], "\(alice)")
        #expect(fourth.status == 429 && HostileUserTests.code(fourth.body) == "rate_limited", "\(fourth)")
        // Counted over the challenges' lifetime, not the minute's window.
        #expect((Self.retryAfter(fourth.body) ?? 0) > 3_600, "\(fourth.body)")
        // Another user's budget is their own; alice's form challenges are not pool challenges.
        #expect(try Self.exchange(backend.port, "/api/appattest/challenge?purpose=pool&username=bob", headers: bearer).status == 200)
        #expect(try Self.exchange(backend.port, "/api/appattest/challenge?username=alice", headers: bearer).status == 200)
        _ = backend.stop()

        // Without caller authentication (the demo's mode), from many addresses' worth of budget.
        let open = try Service(
            [
                "--store", "memory", "--insecure-no-caller-auth", "--rate-limit-per-address", "1000", "--rate-limit-per-user", "1000",
                "--rate-limit-pool-per-user", "2",
            ],
            files: try TemporaryFiles()
        )
        var carol: [Int] = []
        for _ in 0..<3 { carol.append(try Self.exchange(open.port, "/api/appattest/challenge?purpose=pool&username=carol").status) }
        #expect(carol == [200, 200, 429], "\(carol)")
        _ = open.stop()
    }

    @Test("r5 F10: a backend's registrations for fresh users (attest, passkey register) spend its registrations budget, whatever user they name")
    func registrationsPerBackend() async throws {
        let files = try TemporaryFiles()
        let secretFile = try files.writeSecret(HostileUserTests.secret, named: "backend-secret")
        let service = try Service(
            [
                "--store", "memory", "--caller-secret-file", secretFile, "--rate-limit-per-backend", "1000", "--rate-limit-per-user", "1000",
                "--rate-limit-registrations-per-backend", "2", "--rate-limit-window", "3600", "--passkey-rp-id", "bank.example", "--passkey-origin",
                "https://bank.example",
            ],
            files: files
        )
        let headers = [("Authorization", "Bearer \(HostileUserTests.secret)"), ("Content-Type", "application/json")]
        // Each names a user never seen: only the backend's registrations budget can bound them.
        // The budget is spent once the request names its user, before its signatures are
        // verified, as every endpoint's is: these registrations are refused (422) while it
        // lasts, then the budget refuses (429) before verifying anything, an attestation too.
        func attest() throws -> (status: Int, body: String) {
            let body =
                #"{"username":"u\#(UUID().uuidString.prefix(8))","keyId":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","attestationObject":"oA","form":{"action":"device-registration"}}"#
            return try Self.exchange(service.port, "/api/appattest/attest", method: "POST", headers: headers, body: Array(body.utf8))
        }
        func registerPasskey() throws -> (status: Int, body: String) {
            let body = #"{"username":"u\#(UUID().uuidString.prefix(8))","challenge":"AA","userHandle":"AA","credential":{}}"#
            return try Self.exchange(service.port, "/api/passkeys/register", method: "POST", headers: headers, body: Array(body.utf8))
        }
        try await Formattest.awayFromWindowEdge(3600, margin: 120)
        let first = try registerPasskey()
        let second = try registerPasskey()
        let third = try registerPasskey()
        let fourth = try attest()
        #expect(first.status == 422 && second.status == 422, "\(first) \(second)")
        #expect(third.status == 429 && HostileUserTests.code(third.body) == "rate_limited", "\(third)")
        #expect(fourth.status == 429 && HostileUserTests.code(fourth.body) == "rate_limited", "\(fourth)")
        // Challenges are not registrations: still served.
        #expect(try Self.exchange(service.port, "/api/appattest/challenge?username=fresh", headers: headers).status == 200)
        _ = service.stop()
    }
}
