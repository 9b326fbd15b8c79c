//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 31's classes at the service's edge, each through the built `formattest serve` as a
/// hostile user meets it: a foreign key in the identity provider's key set (3), lossy query
/// strings (11), IPv6 budgets (9), budgets spent for others or escaped (6, 1), the inspector (10),
/// unsafe file modes at start-up (8), and idle connections (7). Each test fails on the service
/// before the fix (docs/reliability.md has the figures).
@Suite(.serialized)
struct HostileUserTests {
    // MARK: - Harness

    /// A running `formattest serve` on a free port, with its data directory.
    final class Service {
        let running: Formattest.Running
        let port: Int
        let files: TemporaryFiles

        init(_ arguments: [String], files: TemporaryFiles) async throws {
            self.files = files
            self.port = Formattest.freePort()
            // Budgets counted in an hour's window unless a test sets one: a test that counts to a
            // limit in the default minute's window sees its count start over when it runs across
            // a minute's edge (a few percent of runs); across an hour's, rarely.
            let window = arguments.contains("--rate-limit-window") ? [] : ["--rate-limit-window", "3600"]
            self.running = try Formattest.start(
                ["serve", "--port", String(self.port), "--data-dir", files.directory.appendingPathComponent("data").path, "--log-level", "info"]
                    + window + arguments
            )
            guard await Formattest.waitForListener(port: self.port, process: self.running.process) else {
                let result = await self.running.finish()
                Issue.record("the service did not start: \(result.stderr.suffix(2000))")
                throw CancellationError()
            }
        }

        /// Stops the service and returns its log.
        func stop() async -> String {
            if self.running.process.isRunning { _ = await self.running.terminate(within: 10) }
            return await self.running.finish().stderr
        }

        deinit {
            if self.running.process.isRunning { _ = self.running.terminate(within: 10) }
        }
    }

    /// One HTTP/1.1 exchange on a fresh connection (`Connection: close`): the status and the body.
    static func exchange(
        _ port: Int, _ target: String, method: String = "GET", headers: [(String, String)] = [], body: [UInt8] = [],
        from source: String? = nil
    ) throws -> (status: Int, body: String) {
        let handle = try Self.dial(port, from: source)
        defer { close(handle) }
        var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !body.isEmpty || method == "POST" { head += "Content-Length: \(body.count)\r\n" }
        let request = Array((head + "\r\n").utf8) + body
        _ = request.withUnsafeBytes { send(handle, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        let answer = Self.readAll(handle, seconds: 30)
        let text = String(decoding: answer, as: UTF8.self)
        let statusLine = text.prefix { $0 != "\r" }
        let parts = statusLine.split(separator: " ")
        let status = parts.count >= 2 ? Int(parts[1]) ?? 0 : 0
        let separator = text.range(of: "\r\n\r\n")
        return (status, separator.map { String(text[$0.upperBound...]) } ?? "")
    }

    /// A connection to the service on 127.0.0.1, from `source` (any 127.0.0.0/8 address: each is
    /// a peer of its own to the service) or the kernel's choice.
    static func dial(_ port: Int, from source: String? = nil, receiveBuffer: Int32? = nil) throws -> Int32 {
        let handle = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        if var size = receiveBuffer {
            setsockopt(handle, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_addr.s_addr = inet_addr(source)
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(handle, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            try #require(bound == 0, "cannot bind \(source)")
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(handle, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        try #require(connected == 0, "cannot connect to 127.0.0.1:\(port)")
        return handle
    }

    /// One keep-alive `GET /healthz` on an open connection: the status, 0 when no complete
    /// answer came within `seconds` (the connection stays open).
    static func healthz(on handle: Int32, seconds: Double = 5) -> Int {
        let request = Array("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        _ = request.withUnsafeBytes { send(handle, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(handle, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let count = recv(handle, &buffer, buffer.count, 0)
            if count == 0 { return 0 }
            if count > 0 { answer += buffer[0..<count] }
            let separator: [UInt8] = [13, 10, 13, 10]
            guard let end = (0...max(0, answer.count - 4)).first(where: { answer.count >= 4 && Array(answer[$0..<$0 + 4]) == separator }) else {
                continue
            }
            let head = String(decoding: answer[..<end], as: UTF8.self)
            let length =
                head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
            if answer.count - (end + 4) >= length {
                let parts = head.split(separator: " ")
                return parts.count >= 2 ? Int(parts[1]) ?? 0 : 0
            }
        }
        return 0
    }

    /// Sends a POST's head announcing a body it does not send: a request in flight until the
    /// body timeout.
    static func startSlowPost(_ handle: Int32) {
        let head = Array("POST /api/appattest/inspect HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n".utf8)
        _ = head.withUnsafeBytes { send(handle, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// The CPU time (user and system) a process has used, in seconds, from /proc/PID/stat.
    static func cpuSeconds(_ pid: Int32) -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.range(of: ")", options: .backwards)
        else { return nil }
        // Fields after the command's closing parenthesis: state is field 3; utime and stime 14 and 15.
        let fields = stat[close.upperBound...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// A counter's value in a `/metrics` text (0 when absent).
    static func metric(_ metrics: String, _ series: String) -> Double {
        let line = metrics.split(separator: "\n").first { $0.hasPrefix(series + " ") } ?? ""
        return line.split(separator: " ").last.flatMap { Double($0) } ?? 0
    }

    /// Reads until the peer closes or `seconds` pass.
    static func readAll(_ handle: Int32, seconds: Double) -> [UInt8] {
        var timeout = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(handle, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let count = recv(handle, &buffer, buffer.count, 0)
            if count == 0 { break }
            if count > 0 { answer += buffer[0..<count] }
        }
        return answer
    }

    /// How long until the service closes `handle` (which sends nothing), up to `seconds`; nil if
    /// it is still open then.
    static func closedAfter(_ handle: Int32, seconds: Double) -> Double? {
        let started = Date()
        var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(handle, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var buffer = [UInt8](repeating: 0, count: 4096)
        while Date().timeIntervalSince(started) < seconds {
            let count = recv(handle, &buffer, buffer.count, 0)
            if count == 0 { return Date().timeIntervalSince(started) }
            if count < 0 && errno != EAGAIN && errno != EWOULDBLOCK { return Date().timeIntervalSince(started) }
        }
        return nil
    }

    static func code(_ body: String) -> String? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any],
            let error = object["error"] as? [String: Any]
        else { return nil }
        return error["code"] as? String
    }

    static let secret = "backend-secret-0123456789abcdef0123456789"

    // MARK: - 3. The identity provider's key set, key by key

    /// The provider's JWKS with the keys real providers publish beside their signing keys.
    static func foreignKeySet(_ provider: TestIdentityProvider) throws -> Data {
        let own = try #require(try JSONSerialization.jsonObject(with: Data(try provider.jwks())) as? [String: Any])
        var keys = try #require(own["keys"] as? [[String: Any]])
        let x = "WKn-ZIGevcwGIyyrzFoZNBdaq9_TsqzGl96oc0CWuis"
        let y = "y77t-RvAHRKTsSGdIYUfweuOvwrvDD-Q3Hv5J0fSKbE"
        keys += [
            ["kty": "RSA", "kid": "enc-rsa", "use": "enc", "alg": "RSA-OAEP-256", "n": keys[2]["n"] ?? "", "e": "AQAB"],
            ["kty": "EC", "kid": "enc-ecdh", "crv": "P-256", "alg": "ECDH-ES", "x": x, "y": y],
            ["kty": "EC", "kid": "ops-enc", "crv": "P-256", "key_ops": ["encrypt", "wrapKey"], "x": x, "y": y],
            ["kty": "OKP", "kid": "x25519", "crv": "X25519", "x": "hSDwCYkwp1R0i33ctD73Wg2_Og0mOBr066SpjqqbTmo"],
            ["kty": "EC", "kid": "k256", "crv": "secp256k1", "x": x, "y": y],
            ["kty": "RSA", "kid": "cert-only", "x5c": ["MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA"]],
        ]
        return try JSONSerialization.data(withJSONObject: ["keys": keys], options: [.sortedKeys])
    }

    @Test(
        "3: foreign keys in the provider's JWKS (enc, ECDH-ES, RSA-OAEP, X25519, secp256k1, certificate-only) are skipped, one log line each; valid tokens keep working"
    )
    func foreignProviderKeys() async throws {
        let provider = try TestIdentityProvider()
        let files = try TemporaryFiles()
        let jwks = try files.write(try Self.foreignKeySet(provider), named: "jwks.json")
        let service = try await Service(
            [
                "--store", "memory", "--caller-jwks", jwks, "--caller-issuer", TestIdentityProvider.issuer, "--caller-audience",
                TestIdentityProvider.audience,
            ],
            files: files
        )
        for signer in [TestIdentityProvider.Signer.es256, .eddsa, .rs256] {
            let token = try provider.token(TestIdentityProvider.claims(), signer: signer)
            let answer = try Self.exchange(service.port, "/api/appattest/challenge", headers: [("Authorization", "Bearer \(token)")])
            #expect(answer.status == 200, "\(signer): \(answer.status) \(answer.body)")
        }
        // A token naming a skipped key's kid is refused like any unknown key.
        let foreign = try provider.token(TestIdentityProvider.claims(), kid: "enc-ecdh")
        #expect(
            Self.code(try Self.exchange(service.port, "/api/appattest/challenge", headers: [("Authorization", "Bearer \(foreign)")]).body)
                == "unauthenticated")
        // Each fetch of the set skips the six once. The set is fetched at start, and again for the
        // unknown kid when the start is over a minute (the refresh interval) behind, which a
        // loaded machine may make it.
        let metrics = try Self.exchange(service.port, "/metrics").body
        let fetches = try #require(
            metrics.split(separator: "\n").first { $0.hasPrefix("formattest_caller_jwks_refreshes_total{outcome=\"ok\"} ") }
                .flatMap { Int($0.split(separator: " ").last ?? "") },
            "\(metrics)")
        #expect((1...2).contains(fetches), "\(metrics)")
        #expect(metrics.contains("formattest_caller_jwks_keys_skipped_total \(6 * fetches)"), "\(metrics)")
        let log = await service.stop()
        #expect(log.components(separatedBy: "identity provider key skipped").count - 1 == 6 * fetches, "\(log)")
        for kid in ["enc-rsa", "enc-ecdh", "ops-enc", "x25519", "k256", "cert-only"] {
            #expect(log.contains("kid=\(kid)"), "\(kid): \(log)")
        }
    }

    @Test(
        "r3 F5: an EC and an RSA key under one kid are both kept, the token's alg choosing; two keys of one type under one kid are dropped and logged"
    )
    func sameKidKeyTypes() async throws {
        let provider = try TestIdentityProvider()
        let own = try #require(try JSONSerialization.jsonObject(with: Data(try provider.jwks())) as? [String: Any])
        var keys = try #require(own["keys"] as? [[String: Any]])
        // The provider's EC (ec1) and RSA (rsa1) keys, published under one kid, as during a migration.
        for index in keys.indices where keys[index]["kid"] as? String == "ec1" || keys[index]["kid"] as? String == "rsa1" {
            keys[index]["kid"] = "2026-11"
        }
        // Its Ed25519 key twice under one kid (the second another key): a token cannot tell them apart.
        let ed = try #require(keys.first { $0["kid"] as? String == "ed1" })
        var other = ed
        other["x"] = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
        keys.append(other)
        let files = try TemporaryFiles()
        let jwks = try files.write(try JSONSerialization.data(withJSONObject: ["keys": keys], options: [.sortedKeys]), named: "jwks.json")
        let service = try await Service(
            [
                "--store", "memory", "--caller-jwks", jwks, "--caller-issuer", TestIdentityProvider.issuer, "--caller-audience",
                TestIdentityProvider.audience,
            ],
            files: files
        )
        func status(_ token: String) throws -> (Int, String?) {
            let answer = try Self.exchange(service.port, "/api/appattest/challenge", headers: [("Authorization", "Bearer \(token)")])
            return (answer.status, Self.code(answer.body))
        }
        let es256 = try status(try provider.token(TestIdentityProvider.claims(), signer: .es256, kid: "2026-11"))
        #expect(es256.0 == 200, "\(es256)")
        let rs256 = try status(try provider.token(TestIdentityProvider.claims(), signer: .rs256, kid: "2026-11"))
        #expect(rs256.0 == 200, "\(rs256)")
        // The same kid, ES256, with a signature over other bytes (the header naming kid ec1): the
        // EC key is the one chosen, and it refuses.
        let honest = try provider.token(TestIdentityProvider.claims(), signer: .es256, kid: "2026-11").split(separator: ".")
        let elsewhere = try provider.token(TestIdentityProvider.claims(), signer: .es256).split(separator: ".")
        let forged = try status([honest[0], honest[1], elsewhere[2]].joined(separator: "."))
        #expect(forged.0 == 401 && forged.1 == "unauthenticated", "\(forged)")
        // EdDSA under the kid of the EC and RSA keys: no OKP key there.
        let mismatched = try status(try provider.token(TestIdentityProvider.claims(), signer: .eddsa, kid: "2026-11"))
        #expect(mismatched.0 == 401 && mismatched.1 == "unauthenticated", "\(mismatched)")
        // The two Ed25519 keys under ed1: both dropped.
        let ambiguous = try status(try provider.token(TestIdentityProvider.claims(), signer: .eddsa))
        #expect(ambiguous.0 == 401 && ambiguous.1 == "unauthenticated", "\(ambiguous)")
        let log = await service.stop()
        #expect(log.components(separatedBy: "another OKP key of the set has this kid").count - 1 == 2, "\(log)")
        #expect(!log.contains("kid=2026-11"), "\(log)")
    }

    @Test("3: a key set that cannot be read is logged and counted; requests fail closed (503), never silently")
    func refreshFailureCounted() async throws {
        let files = try TemporaryFiles()
        let jwks = try files.write(#"{"keys": "not an array"}"#, named: "jwks.json")
        let service = try await Service(
            [
                "--store", "memory", "--caller-jwks", jwks, "--caller-issuer", TestIdentityProvider.issuer, "--caller-audience",
                TestIdentityProvider.audience,
            ],
            files: files
        )
        let token = try TestIdentityProvider().token(TestIdentityProvider.claims())
        let answer = try Self.exchange(service.port, "/api/appattest/challenge", headers: [("Authorization", "Bearer \(token)")])
        #expect(answer.status == 503 && Self.code(answer.body) == "identity_provider_unavailable", "\(answer)")
        let metrics = try Self.exchange(service.port, "/metrics").body
        #expect(metrics.contains(#"formattest_caller_jwks_refreshes_total{outcome="failed"} 1"#), "\(metrics)")
        await #expect(service.stop().contains("the identity provider's key set could not be refreshed"))
    }

    // MARK: - 11. Query strings

    @Test(
        "11: a query-string username with invalid UTF-8, a bad % escape, a raw byte or given twice is 400 invalid_query; valid UTF-8 is read exactly")
    func strictQueryStrings() async throws {
        let files = try TemporaryFiles()
        let service = try await Service(["--store", "memory", "--insecure-no-caller-auth"], files: files)
        for target in [
            "/api/appattest/challenge?username=%FF", "/api/appattest/challenge?username=al%C3", "/api/appattest/challenge?username=%ED%A0%80",
            "/api/appattest/challenge?username=a%ZZ", "/api/appattest/challenge?username=a%2", "/api/appattest/challenge?username=alice&username=bob",
            "/api/appattest/challenge?purpose=form&purpose=pool",
        ] {
            let answer = try Self.exchange(service.port, target)
            #expect(answer.status == 400 && Self.code(answer.body) == "invalid_query", "\(target): \(answer)")
        }
        // The one change that makes it valid: well-formed percent-encoded UTF-8.
        #expect(try Self.exchange(service.port, "/api/appattest/challenge?username=jos%C3%A9").status == 200)
        #expect(try Self.exchange(service.port, "/api/appattest/challenge?username=alice").status == 200)
        _ = await service.stop()
    }

    // MARK: - 9. IPv6 by prefix

    @Test("9: per-address limits key IPv6 by /64 (configurable) and read IPv4-mapped IPv6 as IPv4")
    func ipv6Prefixes() async throws {
        let files = try TemporaryFiles()
        let service = try await Service(
            [
                "--store", "memory", "--insecure-no-caller-auth", "--trusted-proxy-hops", "1", "--rate-limit-per-address", "2",
                "--rate-limit-per-user", "100",
            ],
            files: files
        )
        func challenge(from address: String, user: String) throws -> Int {
            try Self.exchange(service.port, "/api/appattest/challenge?username=\(user)", headers: [("X-Forwarded-For", address)]).status
        }
        // Three addresses of one /64: one budget of 2.
        #expect(try challenge(from: "2001:db8:1:2::1", user: "a1") == 200)
        #expect(try challenge(from: "2001:db8:1:2::2", user: "a2") == 200)
        #expect(try challenge(from: "2001:db8:1:2:ffff:ffff:ffff:3", user: "a3") == 429)
        // The next /64 has its own.
        #expect(try challenge(from: "2001:db8:1:3::1", user: "a4") == 200)
        // IPv4-mapped IPv6 is the IPv4 address.
        #expect(try challenge(from: "::ffff:198.51.100.7", user: "b1") == 200)
        #expect(try challenge(from: "198.51.100.7", user: "b2") == 200)
        #expect(try challenge(from: "::ffff:198.51.100.7", user: "b3") == 429)
        _ = await service.stop()

        // --rate-limit-ipv6-prefix 128: every address its own budget.
        let exact = try await Service(
            [
                "--store", "memory", "--insecure-no-caller-auth", "--trusted-proxy-hops", "1", "--rate-limit-per-address", "1",
                "--rate-limit-ipv6-prefix", "128",
            ],
            files: TemporaryFiles()
        )
        for suffix in 1...3 {
            let status = try Self.exchange(
                exact.port, "/api/appattest/challenge?username=c\(suffix)", headers: [("X-Forwarded-For", "2001:db8::\(suffix)")]
            ).status
            #expect(status == 200)
        }
        _ = await exact.stop()
    }

    // MARK: - 6 and 1. Budgets no caller escapes and none spends for another

    @Test("6: an authenticated user's challenges count against that user, never against everyone behind the address")
    func userBudgetIsNotTheAddress() async throws {
        let provider = try TestIdentityProvider()
        let files = try TemporaryFiles()
        let jwks = try files.write(Data(try provider.jwks()), named: "jwks.json")
        let service = try await Service(
            [
                "--store", "memory", "--caller-jwks", jwks, "--caller-issuer", TestIdentityProvider.issuer, "--caller-audience",
                TestIdentityProvider.audience,
                "--rate-limit-per-user", "3", "--rate-limit-per-address", "3",
            ],
            files: files
        )
        let alice = try provider.token(TestIdentityProvider.claims(user: "alice"))
        let bob = try provider.token(TestIdentityProvider.claims(user: "bob"))
        var statuses: [Int] = []
        for _ in 0..<5 {
            statuses.append(try Self.exchange(service.port, "/api/appattest/challenge", headers: [("Authorization", "Bearer \(alice)")]).status)
        }
        #expect(statuses == [200, 200, 200, 429, 429], "\(statuses)")
        // bob, at the same address, has his whole budget.
        for _ in 0..<3 {
            #expect(try Self.exchange(service.port, "/api/appattest/challenge", headers: [("Authorization", "Bearer \(bob)")]).status == 200)
        }
        _ = await service.stop()
    }

    @Test("1: a trusted backend's requests that name no user count against the backend, and all of its requests against its own total")
    func backendBudgets() async throws {
        let files = try TemporaryFiles()
        let secretFile = try files.writeSecret(Self.secret, named: "caller-secret")
        let service = try await Service(
            [
                "--store", "memory", "--caller-secret-file", secretFile, "--rate-limit-backend-unnamed", "3", "--rate-limit-per-backend", "6",
                "--rate-limit-per-user", "100",
            ],
            files: files
        )
        let bearer = [("Authorization", "Bearer \(Self.secret)")]
        var pool: [Int] = []
        for _ in 0..<4 {
            pool.append(try Self.exchange(service.port, "/api/appattest/challenge?purpose=pool", headers: bearer).status)
        }
        #expect(pool == [200, 200, 200, 429], "pool challenges naming no user: \(pool)")
        // Named users: each has a budget, but the backend's total (6, 3 spent: the request the
        // unnamed budget refused spent nothing of it, r8 F1) bounds them all.
        var named: [Int] = []
        for index in 0..<4 {
            named.append(try Self.exchange(service.port, "/api/appattest/challenge?username=user\(index)", headers: bearer).status)
        }
        #expect(named == [200, 200, 200, 429], "named users under the backend's total: \(named)")
        _ = await service.stop()
    }

    @Test("r3 F4: a backend's pool challenges spend its pool budget whether or not they name a user; form challenges do not")
    func poolBudgetPerBackend() async throws {
        let files = try TemporaryFiles()
        let secretFile = try files.writeSecret(Self.secret, named: "backend-secret")
        let service = try await Service(
            [
                "--store", "memory", "--caller-secret-file", secretFile, "--rate-limit-pool", "3", "--rate-limit-backend-unnamed", "100",
                "--rate-limit-per-backend", "100", "--rate-limit-per-user", "100",
            ],
            files: files
        )
        let bearer = [("Authorization", "Bearer \(Self.secret)")]
        // A fresh user on every pool challenge (the red team's flood): the pool budget still holds.
        var named: [Int] = []
        for _ in 0..<3 {
            named.append(
                try Self.exchange(service.port, "/api/appattest/challenge?purpose=pool&username=u\(UUID().uuidString.prefix(8))", headers: bearer)
                    .status)
        }
        let unnamed = try Self.exchange(service.port, "/api/appattest/challenge?purpose=pool", headers: bearer)
        #expect(named == [200, 200, 200] && unnamed.status == 429 && Self.code(unnamed.body) == "rate_limited", "\(named) \(unnamed)")
        let another = try Self.exchange(service.port, "/api/appattest/challenge?purpose=pool&username=fresh", headers: bearer)
        #expect(another.status == 429, "\(another)")
        // The same backend's form challenges are not pool requests: still served.
        let form = try Self.exchange(service.port, "/api/appattest/challenge?username=fresh", headers: bearer)
        #expect(form.status == 200, "\(form)")
        _ = await service.stop()
    }

    @Test("F4, F5: a backend's /assert and inspector requests spend its total; its inspections its budget for unnamed requests too")
    func backendPaysForAssertAndInspect() async throws {
        let bearer = [("Authorization", "Bearer \(Self.secret)"), ("Content-Type", "application/json")]
        let stamp = ISO8601DateFormatter().string(from: Date())
        func assertBody(_ index: Int) -> [UInt8] {
            let form =
                #"{"action":"transfer","amount":"1.00","to":"bob","username":"user\#(index)","timestamp":"\#(stamp)","nonce":"n\#(index)-\#(UUID().uuidString)"}"#
            return Array(#"{"username":"user\#(index)","keyId":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","assertion":"oA","form":\#(form)}"#.utf8)
        }
        let inspect = Array(#"{"mode":"tree","attestationObject":"oA"}"#.utf8)
        // The backend's total: 3 requests per endpoint, whatever user they name.
        let files = try TemporaryFiles()
        let secretFile = try files.writeSecret(Self.secret, named: "caller-secret")
        let total = try await Service(
            [
                "--store", "memory", "--caller-secret-file", secretFile, "--rate-limit-per-backend", "3", "--rate-limit-per-user", "100",
                "--rate-limit-inspect", "100", "--rate-limit-backend-unnamed", "100",
            ],
            files: files
        )
        var asserts: [Int] = []
        var inspections: [Int] = []
        for index in 0..<5 {
            asserts.append(try Self.exchange(total.port, "/api/appattest/assert", method: "POST", headers: bearer, body: assertBody(index)).status)
            inspections.append(try Self.exchange(total.port, "/api/appattest/inspect", method: "POST", headers: bearer, body: inspect).status)
        }
        #expect(asserts.prefix(3).allSatisfy { $0 != 429 } && Array(asserts.suffix(2)) == [429, 429], "assert under the backend's total: \(asserts)")
        #expect(inspections == [200, 200, 200, 429, 429], "inspect under the backend's total: \(inspections)")
        _ = await total.stop()

        // The backend's budget for requests that name no user: the inspector names none.
        let unnamedFiles = try TemporaryFiles()
        let unnamedSecret = try unnamedFiles.writeSecret(Self.secret, named: "caller-secret")
        let unnamed = try await Service(
            ["--store", "memory", "--caller-secret-file", unnamedSecret, "--rate-limit-backend-unnamed", "2", "--rate-limit-inspect", "100"],
            files: unnamedFiles
        )
        var unnamedInspections: [Int] = []
        for _ in 0..<3 {
            unnamedInspections.append(
                try Self.exchange(unnamed.port, "/api/appattest/inspect", method: "POST", headers: bearer, body: inspect).status)
        }
        #expect(unnamedInspections == [200, 200, 429], "inspect under the backend's unnamed budget: \(unnamedInspections)")
        _ = await unnamed.stop()
    }

    // MARK: - 10. The inspector

    @Test("10: the inspector has a budget per caller and a bound on its answer")
    func inspectorBudget() async throws {
        let files = try TemporaryFiles()
        let service = try await Service(["--store", "memory", "--insecure-no-caller-auth", "--rate-limit-inspect", "3"], files: files)
        // 3 + 4,090 bytes of CBOR: an array of 4,090 zeros (the decoder's limit is 4,096 items),
        // one node (and a line of text) each: about 110 bytes out for each byte in. Real
        // attestation objects answer under 100 KB in every mode.
        let amplifier = [UInt8(0x99), 0x0F, 0xFA] + [UInt8](repeating: 0, count: 4090)
        let field = Data(amplifier).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        let body = Array(#"{"mode":"tree","attestationObject":"\#(field)"}"#.utf8)
        let large = try Self.exchange(
            service.port, "/api/appattest/inspect", method: "POST", headers: [("Content-Type", "application/json")], body: body)
        #expect(large.status == 422 && Self.code(large.body) == "inspection_too_large", "\(large.status) \(large.body.prefix(200))")
        #expect(large.body.utf8.count < 1024)
        print("hostile inspector: \(amplifier.count) bytes in: \(large.status) \(large.body)")
        let small = Array(#"{"mode":"tree","attestationObject":"oA"}"#.utf8)
        var statuses: [Int] = []
        for _ in 0..<3 {
            statuses.append(
                try Self.exchange(
                    service.port, "/api/appattest/inspect", method: "POST", headers: [("Content-Type", "application/json")], body: small
                ).status)
        }
        #expect(statuses == [200, 200, 429], "\(statuses)")
        _ = await service.stop()
    }

    /// The red team's costly inspection (`inspect_monopoly_seq.py`): an attestation object whose
    /// x5c holds 2,000 one-byte certificates, about 237 KB of tree out, under the answer cap.
    static let costlyInspection: [UInt8] = {
        func text(_ string: String) -> [UInt8] { [UInt8(0x60 + string.utf8.count)] + Array(string.utf8) }
        var object: [UInt8] = [0xA3] + text("fmt") + [0x6F] + Array("apple-appattest".utf8) + text("attStmt") + [0xA1] + text("x5c")
        object += [0x99, 0x07, 0xD0] + Array([[UInt8]](repeating: [0x41, 0x30], count: 2000).joined())
        object += text("authData") + [0x58, 37] + [UInt8](repeating: 0, count: 37)
        let field = Data(object).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        return Array(#"{"mode":"tree","attestationObject":"\#(field)"}"#.utf8)
    }()

    /// Statuses collected by threads (blocking sockets run on threads of their own, not on the
    /// test's cooperative pool).
    final class Statuses: @unchecked Sendable {
        private let lock = NSLock()
        private var values: [Int: Int] = [:]
        private var bodies: [String] = []

        func add(_ status: Int, _ body: String) {
            self.lock.withLock {
                self.values[status, default: 0] += 1
                if status == 429 { self.bodies.append(body) }
            }
        }

        private var finishedThreads = 0

        func finish() { self.lock.withLock { self.finishedThreads += 1 } }

        var counts: [Int: Int] { self.lock.withLock { self.values } }
        var refusals: [String] { self.lock.withLock { self.bodies } }
        var finished: Int { self.lock.withLock { self.finishedThreads } }

        /// Waits (up to a minute) until `threads` threads have finished.
        func wait(for threads: Int) async throws {
            for _ in 0..<600 where self.finished < threads { try await Task.sleep(for: .milliseconds(100)) }
        }
    }

    @Test(
        "r3 F6: the inspector's slot takes turns by caller: callers looping on costly inspections cannot starve another; a caller's second concurrent inspection is refused at once"
    )
    func inspectorFairness() async throws {
        let files = try TemporaryFiles()
        let service = try await Service(["--store", "memory", "--insecure-no-caller-auth", "--rate-limit-inspect", "10000"], files: files)
        let port = service.port
        let json = [("Content-Type", "application/json")]
        let costly = Self.costlyInspection
        let timed = Date()
        let probe = try Self.exchange(port, "/api/appattest/inspect", method: "POST", headers: json, body: costly, from: "127.0.0.9")
        #expect(probe.status == 200, "\(probe.status) \(probe.body.prefix(200))")
        print("one costly inspection: \(String(format: "%.3f", Date().timeIntervalSince(timed))) s, \(probe.body.utf8.count) bytes")
        // Three addresses loop on the costly object, each within its budget, for 6 s.
        let stop = Date().addingTimeInterval(6)
        let attackers = Statuses()
        for source in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
            Thread.detachNewThread {
                while Date() < stop {
                    if let answer = try? Self.exchange(port, "/api/appattest/inspect", method: "POST", headers: json, body: costly, from: source) {
                        attackers.add(answer.status, answer.body)
                    }
                }
                attackers.finish()
            }
        }
        try await Task.sleep(for: .milliseconds(500))
        // One caller's two concurrent inspections: one runs, the other is refused at once.
        let pair = Statuses()
        for _ in 0..<2 {
            Thread.detachNewThread {
                if let answer = try? Self.exchange(port, "/api/appattest/inspect", method: "POST", headers: json, body: costly, from: "127.0.0.5") {
                    pair.add(answer.status, answer.body)
                }
                pair.finish()
            }
        }
        // Another caller inspects a small object every 0.4 s: each gets its turn.
        let small = Array(#"{"mode":"tree","assertion":"oA"}"#.utf8)
        var legitimate: [Int] = []
        while Date() < stop.addingTimeInterval(-0.5) {
            legitimate.append(try Self.exchange(port, "/api/appattest/inspect", method: "POST", headers: json, body: small, from: "127.0.0.6").status)
            try await Task.sleep(for: .milliseconds(400))
        }
        try await pair.wait(for: 2)
        try await attackers.wait(for: 3)
        _ = await service.stop()
        print("inspector under 3 looping callers: attackers \(attackers.counts), legitimate \(legitimate), one caller's pair \(pair.counts)")
        #expect(legitimate.count >= 5 && legitimate.allSatisfy { $0 == 200 }, "\(legitimate)")
        #expect(pair.counts == [200: 1, 429: 1], "\(pair.counts) \(pair.refusals)")
        #expect(pair.refusals.allSatisfy { $0.contains("already waiting or running") }, "\(pair.refusals)")
        #expect((attackers.counts[200] ?? 0) >= 3, "\(attackers.counts)")
    }

    // MARK: - 8. Unsafe modes at start-up

    /// A short-lived `serve` with the files of `files`: the refusal comes before the listener; a
    /// start that passes is stopped (its status then 15, SIGTERM's exit, or 0, never 2).
    static func serve(_ files: TemporaryFiles, _ arguments: [String], store: [String] = ["--store", "memory"]) async throws -> Formattest.Result {
        let data = files.directory.appendingPathComponent("data").path
        let port = Formattest.freePort()
        let running = try Formattest.start(["serve", "--port", String(port), "--data-dir", data] + store + arguments)
        let listening = await Formattest.waitForListener(port: port, seconds: 60, process: running.process)
        if listening && running.process.isRunning { _ = await running.terminate(within: 10) }
        return await running.finish()
    }

    /// A temporary directory with a 0700 data directory and two distinct 0600 secret files.
    static func prepared() throws -> (TemporaryFiles, caller: String, admin: String) {
        let files = try TemporaryFiles()
        try FileManager.default.createDirectory(
            at: files.directory.appendingPathComponent("data"), withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        let caller = try files.writeSecret(Self.secret, named: "caller-secret")
        let admin = try files.writeSecret("operator-secret-0123456789abcdef0123456789", named: "admin-secret")
        return (files, caller, admin)
    }

    static func chmod(_ path: String, _ mode: Int) throws {
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
    }

    @Test("8: serve refuses a data directory others may write, key and secret files others may read, and a secret shared by callers and operators")
    func strictModes() async throws {
        func serve(_ files: TemporaryFiles, _ arguments: [String]) async throws -> Formattest.Result { try await Self.serve(files, arguments) }
        func prepared() throws -> (TemporaryFiles, caller: String, admin: String) { try Self.prepared() }
        func chmod(_ path: String, _ mode: Int) throws { try Self.chmod(path, mode) }
        // The control: every mode safe, distinct secrets: it starts (and then is stopped: 15, SIGTERM's exit, or 0).
        let (safe, safeCaller, safeAdmin) = try prepared()
        let started = try await serve(safe, ["--caller-secret-file", safeCaller, "--admin-secret-file", safeAdmin])
        #expect(started.status != 2, "\(started.stderr)")

        let (worldDirectory, caller1, _) = try prepared()
        try chmod(worldDirectory.directory.appendingPathComponent("data").path, 0o777)
        let directory = try await serve(worldDirectory, ["--caller-secret-file", caller1])
        #expect(directory.status == 2 && directory.stderr.contains("writable by other users"), "\(directory.stderr)")

        let (readableSecret, caller2, admin2) = try prepared()
        try chmod(caller2, 0o644)
        let secret = try await serve(readableSecret, ["--caller-secret-file", caller2, "--admin-secret-file", admin2])
        #expect(secret.status == 2 && secret.stderr.contains("--caller-secret-file") && secret.stderr.contains("0644"), "\(secret.stderr)")

        let (readableAdmin, caller3, admin3) = try prepared()
        try chmod(admin3, 0o640)
        let adminFile = try await serve(readableAdmin, ["--caller-secret-file", caller3, "--admin-secret-file", admin3])
        #expect(adminFile.status == 2 && adminFile.stderr.contains("--admin-secret-file") && adminFile.stderr.contains("0640"), "\(adminFile.stderr)")

        let (readableKey, caller4, _) = try prepared()
        let key = readableKey.directory.appendingPathComponent("key.pem").path
        let generated = try await Formattest.run(["keys", "generate", "--signing-key", key])
        #expect(generated.status == 0, "\(generated.stderr)")
        try chmod(key, 0o644)
        let keyFile = try await serve(readableKey, ["--caller-secret-file", caller4, "--signing-key", key])
        #expect(keyFile.status == 2 && keyFile.stderr.contains("--signing-key") && keyFile.stderr.contains("0644"), "\(keyFile.stderr)")

        let (shared, caller5, _) = try prepared()
        let sameSecret = try shared.writeSecret("# operators\n" + Self.secret + "\n", named: "admin-same")
        let both = try await serve(shared, ["--caller-secret-file", caller5, "--admin-secret-file", sameSecret])
        #expect(both.status == 2 && both.stderr.contains("hold the same secret"), "\(both.stderr)")
    }

    @Test(
        "F2: every directory on the path of the data directory, the store, the key, the secret files and the configuration file, up to /, is checked (sticky /tmp accepted)"
    )
    func strictPaths() async throws {
        // The control: everything under a 0700 directory in sticky /tmp: it starts.
        let (safe, safeCaller, _) = try Self.prepared()
        let started = try await Self.serve(safe, ["--caller-secret-file", safeCaller])
        #expect(started.status != 2, "\(started.stderr)")

        // A secret file safe itself, in a directory others may write (not sticky).
        let (open, _, _) = try Self.prepared()
        let openDirectory = open.directory.appendingPathComponent("open")
        try FileManager.default.createDirectory(at: openDirectory, withIntermediateDirectories: false)
        try Self.chmod(openDirectory.path, 0o777)
        let inOpen = try open.writeSecret(Self.secret, named: "open/caller-secret")
        let secret = try await Self.serve(open, ["--caller-secret-file", inOpen])
        #expect(
            secret.status == 2 && secret.stderr.contains("the directory \(openDirectory.path)") && secret.stderr.contains("0777"), "\(secret.stderr)")

        // The same directory sticky (as /tmp): accepted, the file below being the service's own.
        try Self.chmod(openDirectory.path, 0o1777)
        let sticky = try await Self.serve(open, ["--caller-secret-file", inOpen])
        #expect(sticky.status != 2, "\(sticky.stderr)")

        // The signing key in a group-writable directory.
        let (keyed, keyedCaller, _) = try Self.prepared()
        let keys = keyed.directory.appendingPathComponent("keys")
        try FileManager.default.createDirectory(at: keys, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        let key = keys.appendingPathComponent("key.pem").path
        #expect(try await Formattest.run(["keys", "generate", "--signing-key", key]).status == 0)
        try Self.chmod(keys.path, 0o770)
        let keyResult = try await Self.serve(keyed, ["--caller-secret-file", keyedCaller, "--signing-key", key])
        #expect(keyResult.status == 2 && keyResult.stderr.contains("--signing-key") && keyResult.stderr.contains("0770"), "\(keyResult.stderr)")

        // The data directory below a directory owned by another user (nobody).
        let (foreign, foreignCaller, _) = try Self.prepared()
        let owned = foreign.directory.appendingPathComponent("owned")
        try FileManager.default.createDirectory(at: owned, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o755])
        if geteuid() == 0 {
            try #require(chown(owned.path, 65534, 65534) == 0)
            let data = owned.appendingPathComponent("data").path
            let result = try await Self.serve(foreign, ["--caller-secret-file", foreignCaller, "--data-dir", data])
            #expect(result.status == 2 && result.stderr.contains("owned by uid 65534"), "\(result.stderr)")
        }

        // The configuration file's directory, world-writable.
        let (configured, configuredCaller, _) = try Self.prepared()
        let settings = configured.directory.appendingPathComponent("etc")
        try FileManager.default.createDirectory(at: settings, withIntermediateDirectories: false)
        let config = try configured.write(#"{"log-level": "info"}"#, named: "etc/formattest.json")
        try Self.chmod(settings.path, 0o757)
        let configResult = try await Self.serve(configured, ["--caller-secret-file", configuredCaller, "--config", config])
        #expect(
            configResult.status == 2 && configResult.stderr.contains("--config") && configResult.stderr.contains("0757"), "\(configResult.stderr)")
    }

    @Test(
        "F3: an existing SQLite file (or -wal/-shm) open to others is refused with chmod 600; a configuration file writable by others, or readable while it holds a secret, is refused"
    )
    func strictStoreAndConfiguration() async throws {
        func sqlite(_ files: TemporaryFiles) -> [String] { ["--store", "sqlite:" + files.directory.appendingPathComponent("store.sqlite").path] }
        // The control: a 0600 file made by an earlier start; the service starts on it.
        let (made, madeCaller, _) = try Self.prepared()
        let first = try await Self.serve(made, ["--caller-secret-file", madeCaller], store: sqlite(made))
        #expect(first.status != 2, "\(first.stderr)")
        let again = try await Self.serve(made, ["--caller-secret-file", madeCaller], store: sqlite(made))
        #expect(again.status != 2, "\(again.stderr)")
        // The same file 0644 (as an earlier release or a copy with umask 022 leaves it).
        let file = made.directory.appendingPathComponent("store.sqlite").path
        try Self.chmod(file, 0o644)
        let readable = try await Self.serve(made, ["--caller-secret-file", madeCaller], store: sqlite(made))
        #expect(readable.status == 2 && readable.stderr.contains("chmod 600 \(file)") && readable.stderr.contains("0644"), "\(readable.stderr)")
        try Self.chmod(file, 0o600)
        _ = try made.write("", named: "store.sqlite-wal")
        try Self.chmod(file + "-wal", 0o640)
        let wal = try await Self.serve(made, ["--caller-secret-file", madeCaller], store: sqlite(made))
        #expect(wal.status == 2 && wal.stderr.contains("chmod 600 \(file)-wal"), "\(wal.stderr)")

        // Configuration files: 0644 without a secret starts; 0664 is refused; 0644 with a
        // MongoDB URI holding a password is refused (before any connection), 0600 is not refused for its mode.
        let (configured, caller, _) = try Self.prepared()
        let plain = try configured.write(#"{"log-level": "info"}"#, named: "plain.json")
        try Self.chmod(plain, 0o644)
        let plainResult = try await Self.serve(configured, ["--caller-secret-file", caller, "--config", plain])
        #expect(plainResult.status != 2, "\(plainResult.stderr)")
        try Self.chmod(plain, 0o664)
        let writable = try await Self.serve(configured, ["--caller-secret-file", caller, "--config", plain])
        #expect(writable.status == 2 && writable.stderr.contains("writable by other users") && writable.stderr.contains("0664"), "\(writable.stderr)")
        let secretConfig = try configured.write(#"{"store": "mongodb://formattest:hunter2@127.0.0.1:1/formattest"}"#, named: "secret.json")
        try Self.chmod(secretConfig, 0o644)
        let leaked = try await Self.serve(configured, ["--caller-secret-file", caller, "--config", secretConfig], store: [])
        #expect(leaked.status == 2 && leaked.stderr.contains("holds a secret") && leaked.stderr.contains("chmod 600"), "\(leaked.stderr)")
        #expect(!leaked.stderr.contains("hunter2"))
        try Self.chmod(secretConfig, 0o600)
        let closed = try await Self.serve(configured, ["--caller-secret-file", caller, "--config", secretConfig], store: [])
        #expect(!closed.stderr.contains("holds a secret"), "\(closed.stderr)")
    }

    @Test(
        "F6: a secret file reached through symbolic links is judged by its target; a UTF-8 BOM in a secret file is refused; the log shows the header timeout as clamped"
    )
    func strictLinksAndBOM() async throws {
        // Kubernetes' layout: caller-secret -> ..data/caller-secret, ..data -> ..2026_11_27/.
        let (linked, _, _) = try Self.prepared()
        let mount = linked.directory.appendingPathComponent("secrets")
        let version = mount.appendingPathComponent("..2026_11_27")
        try FileManager.default.createDirectory(at: version, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        try Self.chmod(mount.path, 0o755)
        let target = try linked.writeSecret(Self.secret, named: "secrets/..2026_11_27/caller-secret")
        try FileManager.default.createSymbolicLink(atPath: mount.appendingPathComponent("..data").path, withDestinationPath: "..2026_11_27")
        let link = mount.appendingPathComponent("caller-secret").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: "..data/caller-secret")
        let started = try await Self.serve(linked, ["--caller-secret-file", link])
        #expect(started.status != 2, "\(started.stderr)")
        // The target readable by others: refused, naming the target.
        try Self.chmod(target, 0o644)
        let readable = try await Self.serve(linked, ["--caller-secret-file", link])
        #expect(
            readable.status == 2 && readable.stderr.contains("0644") && readable.stderr.contains("..2026_11_27/caller-secret"), "\(readable.stderr)")

        // A BOM before the secret.
        let (bom, _, _) = try Self.prepared()
        let marked = try bom.write(Data([0xEF, 0xBB, 0xBF]) + Data(Self.secret.utf8), named: "bom-secret")
        try Self.chmod(marked, 0o600)
        let refused = try await Self.serve(bom, ["--caller-secret-file", marked])
        #expect(refused.status == 2 && refused.stderr.contains("byte order mark"), "\(refused.stderr)")

        // The header timeout in force: clamped to the idle timeout (5 s, not 30).
        let (clamped, clampedCaller, _) = try Self.prepared()
        let service = try await Service(
            ["--store", "memory", "--caller-secret-file", clampedCaller, "--header-timeout", "30", "--idle-timeout", "5"], files: clamped)
        let log = await service.stop()
        let line = log.split(separator: "\n").first { $0.contains("connections") && $0.contains("headerTimeout") } ?? ""
        #expect(line.contains("headerTimeout=5.0 seconds"), "\(line)")
    }

    @Test(
        "r3 F1: the files and directories that decide trust (key set, roots, previous keys, CDHashes, evidence, demo pages) are refused writable by others; the previous keys are created 0600"
    )
    func strictTrustFiles() async throws {
        // One deployment with every such file, each safe (public files 0644, directories 0700/0755).
        let (files, caller, _) = try Self.prepared()
        let data = files.directory.appendingPathComponent("data").path
        #expect(try await Formattest.run(["keys", "generate", "--data-dir", data]).status == 0)
        #expect(try await Formattest.run(["keys", "generate", "--data-dir", data]).status == 0)
        let previous = files.directory.appendingPathComponent("data/signing-key.previous.pem").path
        // Written by the rotation as the key is: readable by the service's user alone.
        #expect(StrictModesProbe.mode(previous) == 0o600)
        let appleRoot = try Data(contentsOf: RealSample.fixturesDirectory.appendingPathComponent("appattest/apple-app-attestation-root-ca.pem"))
        let root = try files.write(appleRoot, named: "root.pem")
        let cdhashes = try files.write(#"{"1": ["\#(String(repeating: "a", count: 64))"]}"#, named: "cdhashes.json")
        let evidence = files.directory.appendingPathComponent("evidence").path
        let demo = files.directory.appendingPathComponent("demo").path
        try FileManager.default.createDirectory(atPath: evidence, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        try FileManager.default.createDirectory(atPath: demo, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o755])
        _ = try files.write("<html></html>", named: "demo/appattest-demo.html")
        for path in [root, cdhashes] { try Self.chmod(path, 0o644) }
        try Self.chmod(previous, 0o644)  // an earlier release's file: public, not writable by others: accepted
        let arguments = [
            "--caller-secret-file", caller, "--root", root, "--allowed-cdhashes-file", cdhashes, "--evidence-dir", evidence, "--demo-dir", demo,
        ]
        let started = try await Self.serve(files, arguments)
        #expect(started.status != 2, "\(started.stderr)")

        // Each one made writable by others, alone: refused, naming it, its mode and the fix.
        for (path, mode, option) in [
            (previous, 0o666, "previous signing keys"), (root, 0o664, "--root"), (cdhashes, 0o646, "--allowed-cdhashes-file"),
            (evidence, 0o777, "--evidence-dir"), (demo, 0o775, "--demo-dir"),
        ] {
            let safe = try #require(StrictModesProbe.mode(path))
            try Self.chmod(path, mode)
            let refused = try await Self.serve(files, arguments)
            #expect(
                refused.status == 2 && refused.stderr.contains(option) && refused.stderr.contains(String(mode, radix: 8)),
                "\(option): \(refused.stderr)")
            #expect(refused.stderr.contains("chmod go-w"), "\(refused.stderr)")
            try Self.chmod(path, safe)
        }

        // The identity provider's key set as a file (the red team's attacker could add a key).
        let (keyed, _, _) = try Self.prepared()
        let jwks = try keyed.write(
            #"{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","use":"sig","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}"#,
            named: "jwks.json")
        try Self.chmod(jwks, 0o666)
        let provider = ["--caller-jwks", jwks, "--caller-issuer", "https://idp.example", "--caller-audience", "formattest"]
        let refused = try await Self.serve(keyed, provider)
        #expect(refused.status == 2 && refused.stderr.contains("--caller-jwks") && refused.stderr.contains("0666"), "\(refused.stderr)")
        try Self.chmod(jwks, 0o644)
        let accepted = try await Self.serve(keyed, provider)
        #expect(accepted.status != 2, "\(accepted.stderr)")
    }

    @Test("r3 F2: a file reached through a symbolic link is refused when a directory holding a link on its path (as given) is writable by others")
    func strictLinkDirectories() async throws {
        // The secret itself safe, in a 0700 directory; the link to it in a 0777 (not sticky) one.
        let (files, _, _) = try Self.prepared()
        let safe = files.directory.appendingPathComponent("safe")
        let open = files.directory.appendingPathComponent("open")
        try FileManager.default.createDirectory(at: safe, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        try FileManager.default.createDirectory(at: open, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        let secret = try files.writeSecret(Self.secret, named: "safe/caller-secret")
        let link = open.appendingPathComponent("caller-secret").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: secret)
        // The control: the link's directory 0700: it starts.
        let started = try await Self.serve(files, ["--caller-secret-file", link])
        #expect(started.status != 2, "\(started.stderr)")
        try Self.chmod(open.path, 0o777)
        let refused = try await Self.serve(files, ["--caller-secret-file", link])
        #expect(refused.status == 2 && refused.stderr.contains("the directory \(open.path)") && refused.stderr.contains("0777"), "\(refused.stderr)")

        // The data directory itself a link placed in that directory.
        let real = files.directory.appendingPathComponent("real")
        try FileManager.default.createDirectory(at: real, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        let dataLink = open.appendingPathComponent("data").path
        try FileManager.default.createSymbolicLink(atPath: dataLink, withDestinationPath: real.path)
        let data = try await Self.serve(files, ["--caller-secret-file", secret, "--data-dir", dataLink])
        #expect(data.status == 2 && data.stderr.contains("--data-dir") && data.stderr.contains("the directory \(open.path)"), "\(data.stderr)")
        try Self.chmod(open.path, 0o700)
        let dataSafe = try await Self.serve(files, ["--caller-secret-file", secret, "--data-dir", dataLink])
        #expect(dataSafe.status != 2, "\(dataSafe.stderr)")

        // A link in a sticky shared directory (as /tmp) owned by another user: that user may
        // point it elsewhere: refused even though its target is safe.
        if geteuid() == 0 {
            try Self.chmod(open.path, 0o1777)
            let foreign = open.appendingPathComponent("foreign-secret").path
            try FileManager.default.createSymbolicLink(atPath: foreign, withDestinationPath: secret)
            try #require(lchown(foreign, 65534, 65534) == 0)
            let sticky = try await Self.serve(files, ["--caller-secret-file", foreign])
            #expect(sticky.status == 2 && sticky.stderr.contains("uid 65534"), "\(sticky.stderr)")
        }
    }

    // MARK: - 7. Connections

    @Test(
        "7: at the descriptor limit accept(2) fails: each failure is counted and logged (a line a second at most), accepting backs off instead of spinning a core, and resumes once descriptors free up"
    )
    func acceptErrorsLoggedAndCounted() async throws {
        let files = try TemporaryFiles()
        let port = Formattest.freePort()
        let data = files.directory.appendingPathComponent("data").path
        // A limit of 256 descriptors that the caps fit (the ceiling of 100 connections, 106, + the
        // reserve of 128), of which the parent shell holds 181 open across exec: descriptors other
        // than connections.
        let script = #"ulimit -n 256 && for fd in $(seq 20 200); do eval "exec $fd</dev/null"; done; exec "$0" "$@""#
        let running = try Formattest.start(
            [
                "-c", script, Formattest.executable.path, "serve", "--port", String(port), "--store", "memory", "--insecure-no-caller-auth",
                "--data-dir", data, "--log-level", "info", "--max-connections", "100", "--max-connections-per-address", "1000",
            ],
            stdin: nil, keepStdinOpen: false, executable: URL(fileURLWithPath: "/bin/bash")
        )
        let listening = await Formattest.waitForListener(port: port, process: running.process)
        let startLog = listening ? "" : String(await running.finish().stderr.suffix(2000))
        try #require(listening, "\(startLog)")
        let pid = running.process.processIdentifier
        let started = Date()
        var held: [Int32] = []
        for _ in 0..<80 { held.append(try Self.dial(port)) }
        // At the limit for 3 s: the service's CPU over that time (before the change, accept(2)
        // retried in a tight loop: about a core, and ~30,000 failures).
        try await Task.sleep(for: .milliseconds(500))
        let cpuBefore = try #require(Self.cpuSeconds(pid))
        let window = Date()
        try await Task.sleep(for: .seconds(3))
        let cpu = try #require(Self.cpuSeconds(pid)) - cpuBefore
        let windowSeconds = Date().timeIntervalSince(window)
        for handle in held { close(handle) }
        // Accepting resumes within the back-off (at most 1 s, with NIO's own second after it).
        let freed = Date()
        var metrics = ""
        for _ in 0..<40 where !metrics.contains("formattest_accept_errors_total") {
            try await Task.sleep(for: .milliseconds(250))
            metrics = (try? Self.exchange(port, "/metrics").body) ?? ""
        }
        let recovered = Date().timeIntervalSince(freed)
        let elapsed = Date().timeIntervalSince(started)
        if running.process.isRunning { _ = await running.terminate(within: 10) }
        let log = await running.finish().stderr
        let count = Self.metric(metrics, "formattest_accept_errors_total")
        #expect(count >= 1, "metrics: \(metrics.suffix(300))")
        #expect(count < 50, "\(count) accept errors in \(String(format: "%.1f", elapsed)) s: accepting did not back off")
        #expect(cpu < 0.25 * windowSeconds, "the service used \(cpu) s of CPU in \(windowSeconds) s at the descriptor limit")
        #expect(recovered < 5, "accepting resumed \(recovered) s after the descriptors were freed")
        let lines = log.split(separator: "\n").filter { $0.contains("accept failed") }
        #expect(!lines.isEmpty && lines.allSatisfy { $0.contains("errors=") }, "\(log.suffix(2000))")
        #expect(Double(lines.count) <= elapsed + 1, "\(lines.count) lines in \(elapsed) s: not rate-limited")
        print(
            "accept errors: \(count) counted, \(lines.count) log line(s) in \(String(format: "%.1f", elapsed)) s; CPU \(String(format: "%.3f", cpu)) s in \(String(format: "%.1f", windowSeconds)) s at the limit; accepting again after \(String(format: "%.2f", recovered)) s; first: \(lines.first ?? "")"
        )
    }

    @Test(
        "7: connections are capped per address and in total, and one that sends no request head is closed at the header deadline, long before the idle timeout"
    )
    func connectionLimits() async throws {
        let files = try TemporaryFiles()
        let service = try await Service(
            [
                "--store", "memory", "--insecure-no-caller-auth", "--max-connections-per-address", "2", "--header-timeout", "2", "--idle-timeout",
                "60",
            ],
            files: files
        )
        // The header deadline: a silent connection is closed after ~2 s, not 60.
        let silent = try Self.dial(service.port)
        let closed = Self.closedAfter(silent, seconds: 15)
        close(silent)
        #expect(closed.map { $0 >= 1.5 && $0 < 6 } == true, "closed after \(closed.map { String($0) } ?? "never (15 s)")")

        // Per address: two open connections; a third is closed at once (whichever the service
        // set up last: the three are set up on several event loops).
        let three = [try Self.dial(service.port), try Self.dial(service.port), try Self.dial(service.port)]
        let closedNow = three.filter { Self.closedAfter($0, seconds: 0.5) != nil }
        #expect(closedNow.count == 1, "\(closedNow.count) of 3 connections from one address closed at once (limit 2)")
        for handle in three { close(handle) }
        try await Task.sleep(for: .milliseconds(300))
        #expect(try Self.exchange(service.port, "/healthz").status == 200)
        let log = await service.stop()
        #expect(log.contains("per-address connection limit"), "\(log.suffix(2000))")

        // In total: over the cap a new connection sheds an idle one (next tests); at the hard
        // ceiling (2 + 4 = 6), with every connection's body in progress, a new connection waits
        // in the backlog until bodies in progress for 1 s are answered 408 (r5 F2: before, until
        // one closed by itself). (No minimum body rate here: the requests' bodies never come,
        // and the body timeout, 30 s, would hold them in flight.)
        let capped = try await Service(
            [
                "--store", "memory", "--insecure-no-caller-auth", "--max-connections", "2", "--header-timeout", "30", "--body-timeout", "30",
                "--min-body-rate", "0",
            ],
            files: TemporaryFiles()
        )
        var held: [Int32] = []
        for _ in 0..<6 {
            let handle = try Self.dial(capped.port)
            Self.startSlowPost(handle)
            held.append(handle)
            try await Task.sleep(for: .milliseconds(100))
        }
        try await Task.sleep(for: .milliseconds(300))
        let waitStarted = Date()
        let waiting = try Self.dial(capped.port)
        let request = Array("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8)
        _ = request.withUnsafeBytes { send(waiting, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        let late = String(decoding: Self.readAll(waiting, seconds: 5), as: UTF8.self)
        let waited = Date().timeIntervalSince(waitStarted)
        #expect(late.hasPrefix("HTTP/1.1 200") && waited < 4, "\(late.prefix(60)) after \(waited) s")
        // The held requests shed were answered 408 first; the rest are still in flight.
        let answers = held.map { String(decoding: Self.received($0), as: UTF8.self) }
        let shed = answers.filter { !$0.isEmpty }
        #expect(!shed.isEmpty && shed.allSatisfy { $0.hasPrefix("HTTP/1.1 408") }, "\(answers.map { $0.prefix(12) })")
        for handle in held { close(handle) }
        close(waiting)
        await #expect(capped.stop().contains("connection limit reached"))
    }

    @Test("r3 F3: at the total cap a new client gets in at once: the connection idle longest (for 1 s at least) is closed, never another")
    func idleConnectionsShed() async throws {
        let files = try TemporaryFiles()
        let service = try await Service(
            [
                "--store", "memory", "--insecure-no-caller-auth", "--max-connections", "16", "--max-connections-per-address", "8",
                "--header-timeout", "30", "--idle-timeout", "60",
            ],
            files: files
        )
        // conn_hold's shape at small scale: one host with two addresses holds 14 of the 16 slots
        // (8 and 6), an honest client 2; each connection has sent a keep-alive request and is idle.
        var holders: [(source: String, handle: Int32)] = []
        for (source, count) in [("127.0.0.2", 8), ("127.0.0.3", 6), ("127.0.0.4", 2)] {
            for _ in 0..<count {
                let handle = try Self.dial(service.port, from: source)
                #expect(Self.healthz(on: handle) == 200)
                holders.append((source, handle))
            }
        }
        // Newcomers from two more addresses, once every holder has been idle for 1 s (r4: no
        // connection idle for less is shed): each answered at once (before r3: no answer, the
        // connection waits in the backlog); each sheds the connection idle longest: 127.0.0.2's
        // first two.
        try await Task.sleep(for: .milliseconds(1200))
        var newcomers: [Int32] = []
        for source in ["127.0.0.5", "127.0.0.6"] {
            let started = Date()
            let handle = try Self.dial(service.port, from: source)
            let status = Self.healthz(on: handle, seconds: 5)
            let took = Date().timeIntervalSince(started)
            #expect(status == 200 && took < 2, "a new client from \(source): \(status) after \(String(format: "%.2f", took)) s")
            newcomers.append(handle)
            try await Task.sleep(for: .milliseconds(200))
        }
        let closed = holders.filter { Self.closedAfter($0.handle, seconds: 0.1) != nil }
        #expect(closed.count == 2 && closed.allSatisfy { $0.source == "127.0.0.2" }, "closed: \(closed.map(\.source))")
        // The rest still serve their own keep-alive requests.
        let open = holders.filter { held in !closed.contains { $0.handle == held.handle } }
        #expect(open.allSatisfy { Self.healthz(on: $0.handle) == 200 })
        let metrics = try Self.exchange(service.port, "/metrics").body
        let shed = Self.metric(metrics, #"formattest_connections_refused_total{reason="shed_idle"}"#)
        for holder in holders { close(holder.handle) }
        for handle in newcomers { close(handle) }
        let log = await service.stop()
        #expect(shed >= 2, "shed_idle: \(shed)")
        #expect(log.contains("idle connection closed"), "\(log.suffix(2000))")
        print("shedding: newcomers answered; closed \(closed.map(\.source)); shed_idle \(shed)")
    }

    @Test(
        "r4: a client that pipelines requests and never reads the answers is closed at the write deadline (the body timeout), so it cannot stay busy and unsheddable"
    )
    func unreadAnswersClosed() async throws {
        let files = try TemporaryFiles()
        let service = try await Service(
            // Warnings only: the harness reads the log at the end, and 2,000 request lines would
            // fill its pipe and stop the service.
            [
                "--store", "memory", "--insecure-no-caller-auth", "--body-timeout", "2", "--header-timeout", "30", "--idle-timeout", "60",
                "--log-level", "warning",
            ], files: files)
        // A small receive buffer and 16 pipelined requests for the inspector's 237 KB answer (the
        // 2,000 pipelined requests for /metrics of before now meet the pipelining bound, r5 F1,
        // and the 16 it serves fit in the socket's buffers): the answers fill the socket's
        // buffers (up to 4 MB on Linux) and stay unwritten.
        let handle = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var size: Int32 = 4096
        setsockopt(handle, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(service.port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(handle, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        try #require(connected == 0)
        defer { close(handle) }
        let costly = Self.costlyInspection
        let post =
            Array("POST /api/appattest/inspect HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: \(costly.count)\r\n\r\n".utf8)
            + costly
        let requests = Array([[UInt8]](repeating: post, count: 16).joined())
        var flags = fcntl(handle, F_GETFL)
        flags |= O_NONBLOCK
        _ = fcntl(handle, F_SETFL, flags)
        var sent = 0
        let sending = Date()
        while sent < requests.count && Date().timeIntervalSince(sending) < 3 {
            let count = requests[sent...].withUnsafeBytes { send(handle, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if count > 0 { sent += count } else { try await Task.sleep(for: .milliseconds(50)) }
        }
        // Not read for 14 s: closed by the write deadline (2 s) after the buffers filled.
        try await Task.sleep(for: .seconds(14))
        let metrics = try Self.exchange(service.port, "/metrics").body
        let closedByDeadline = Self.metric(metrics, #"formattest_connections_refused_total{reason="write_timeout"}"#)
        let log = await service.stop()
        #expect(closedByDeadline >= 1, "write_timeout \(closedByDeadline); sent \(sent) of \(requests.count) bytes")
        #expect(log.contains("took no answer bytes"), "\(log.suffix(1500))")
        print("unread answers: \(sent) request bytes sent; write_timeout \(closedByDeadline)")
    }

    @Test(
        "r3 F3, r5 F2: a connection with a request in flight is never cut: over the total the oldest body in progress (1 s at least) is answered 408, every other request is answered; the per-address cap still closes a peer's one too many at once"
    )
    func busyConnectionsKept() async throws {
        let files = try TemporaryFiles()
        let service = try await Service(
            [
                "--store", "memory", "--insecure-no-caller-auth", "--max-connections", "4", "--max-connections-per-address", "4",
                "--header-timeout", "30", "--body-timeout", "30", "--idle-timeout", "60", "--min-body-rate", "0",
            ],
            files: files
        )
        // 127.0.0.2 holds 4 connections (the total), 3 with a request in flight, 1 idle.
        var busy: [Int32] = []
        for _ in 0..<3 {
            let handle = try Self.dial(service.port, from: "127.0.0.2")
            Self.startSlowPost(handle)
            busy.append(handle)
        }
        let idle = try Self.dial(service.port, from: "127.0.0.2")
        #expect(Self.healthz(on: idle) == 200)
        // Idle for 1 s at least: sheddable (r4).
        try await Task.sleep(for: .milliseconds(1200))
        // Its fifth is over the per-address cap: closed at once.
        let fifth = try Self.dial(service.port, from: "127.0.0.2")
        #expect(Self.closedAfter(fifth, seconds: 1) != nil, "the per-address cap did not close the fifth")
        close(fifth)
        // Two newcomers: the first sheds the idle one (then starts a request of its own); the
        // second finds nothing idle and is admitted under the hard ceiling (4 + 4); over the
        // total, the oldest body in progress (one of 127.0.0.2's three, whose heads arrived
        // within a few milliseconds on several event loops) is answered 408 (r5 F2: before, it
        // held its slot for the body timeout); no connection is closed without an answer.
        let first = try Self.dial(service.port, from: "127.0.0.3")
        #expect(Self.healthz(on: first, seconds: 5) == 200)
        Self.startSlowPost(first)
        busy.append(first)
        try await Task.sleep(for: .milliseconds(200))
        let second = try Self.dial(service.port, from: "127.0.0.4")
        #expect(Self.healthz(on: second, seconds: 5) == 200)
        #expect(Self.closedAfter(idle, seconds: 1) != nil, "the idle connection was not shed")
        try await Task.sleep(for: .milliseconds(600))
        let early = busy.map { String(decoding: Self.received($0), as: UTF8.self) }
        let shed = early.indices.filter { !early[$0].isEmpty }
        #expect(shed.count == 1 && shed.allSatisfy { $0 < 3 && early[$0].hasPrefix("HTTP/1.1 408") }, "\(early.map { $0.prefix(12) })")
        // The other requests in flight complete: each answered (its body is not JSON the
        // inspector takes).
        let rest = Array("{\"mode\":\"semantic\"} ".utf8)
        for (handle, answered) in zip(busy, early) where answered.isEmpty {
            _ = rest.withUnsafeBytes { send(handle, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
        for (handle, answered) in zip(busy, early) where answered.isEmpty {
            let answer = String(decoding: Self.readAll(handle, seconds: 2), as: UTF8.self)
            #expect(answer.hasPrefix("HTTP/1.1 4"), "\(answer.prefix(80))")
        }
        for handle in busy { close(handle) }
        for handle in [idle, second] { close(handle) }
        let log = await service.stop()
        #expect(log.contains("per-address connection limit"), "\(log.suffix(2000))")
    }

    // MARK: - r4: slow bodies, churn, the ceiling's log

    /// A connection to 127.0.0.1:`port` from `source`, or -1 (for threads, which cannot `#require`).
    static func rawDial(_ port: Int, from source: String) -> Int32 {
        let handle = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard handle >= 0 else { return -1 }
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        local.sin_addr.s_addr = inet_addr(source)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(handle, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(handle, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, connected == 0 else {
            close(handle)
            return -1
        }
        return handle
    }

    /// Sends bytes on connections from a thread of its own until stopped, and holds connections
    /// the thread opens; `stop()` returns once the thread has ended (so that no descriptor it
    /// writes to is closed and reused under it).
    final class Background: @unchecked Sendable {
        private let lock = NSLock()
        private var stopped = false
        private var handles: [Int32] = []
        private let ended = DispatchSemaphore(value: 0)

        var isStopped: Bool { self.lock.withLock { self.stopped } }
        func hold(_ handle: Int32) { self.lock.withLock { self.handles.append(handle) } }
        var held: [Int32] { self.lock.withLock { self.handles } }
        private var steps = 0
        /// Counts a step; returns its number (from 1).
        func nextStep() -> Int {
            self.lock.withLock {
                self.steps += 1
                return self.steps
            }
        }
        var stepCount: Int { self.lock.withLock { self.steps } }

        /// Runs `step` every `interval` seconds on a thread until stopped.
        func start(every interval: Double, _ step: @escaping @Sendable (Background) -> Void) {
            Thread.detachNewThread {
                while !self.isStopped {
                    step(self)
                    Thread.sleep(forTimeInterval: interval)
                }
                self.ended.signal()
            }
        }

        /// Stops the thread, waits for it, and closes what it holds.
        func stop() {
            self.lock.withLock { self.stopped = true }
            self.ended.wait()
            for handle in self.held { close(handle) }
        }
    }

    /// A POST head announcing `length` body bytes, for the inspector.
    static func postHead(_ handle: Int32, length: Int) {
        let text = "POST /api/appattest/inspect HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: \(length)\r\n\r\n"
        let head = Array(text.utf8)
        _ = head.withUnsafeBytes { send(handle, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// What has arrived on `handle` so far, without waiting.
    static func received(_ handle: Int32) -> [UInt8] {
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = recv(handle, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            guard count > 0 else { break }
            answer += buffer[0..<count]
        }
        return answer
    }

    @Test(
        "r4 F1: a body trickled below the minimum body rate is answered 408 after the 1 s grace, long before the body timeout, so trickling clients from many addresses cannot keep every slot busy; a body above the rate is read whole"
    )
    func slowBodiesRefused() async throws {
        let files = try TemporaryFiles()
        let service = try await Service(
            [
                "--store", "memory", "--insecure-no-caller-auth", "--max-connections", "4", "--header-timeout", "30", "--body-timeout", "30",
                "--idle-timeout", "60",
            ],
            files: files
        )
        // slowbody.py's shape at small scale: 8 addresses fill the hard ceiling (4 + 4), each with
        // a POST head announcing 4,000 bytes, then one body byte a second.
        var slow: [Int32] = []
        for index in 10..<18 {
            let handle = try Self.dial(service.port, from: "127.0.0.\(index)")
            Self.postHead(handle, length: 4000)
            slow.append(handle)
        }
        let started = Date()
        // An honest client meanwhile: answered once the trickling bodies are refused (before the
        // change: it waits in the backlog for the body timeout, 30 s).
        let honest = try Self.dial(service.port, from: "127.0.0.30")
        let request = Array("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8)
        _ = request.withUnsafeBytes { send(honest, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var answers: [Int32: (status: String, after: Double)] = [:]
        var honestAnswer: [UInt8] = []
        var honestAfter: Double?
        while Date().timeIntervalSince(started) < 6 && (answers.count < slow.count || honestAfter == nil) {
            for handle in slow where answers[handle] == nil {
                _ = [UInt8(ascii: " ")].withUnsafeBytes { send(handle, $0.baseAddress, 1, Int32(MSG_NOSIGNAL)) }
            }
            for _ in 0..<10 {
                for handle in slow where answers[handle] == nil {
                    let text = String(decoding: Self.received(handle), as: UTF8.self)
                    if !text.isEmpty { answers[handle] = (String(text.prefix(12)), Date().timeIntervalSince(started)) }
                }
                honestAnswer += Self.received(honest)
                if honestAfter == nil && !honestAnswer.isEmpty { honestAfter = Date().timeIntervalSince(started) }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        for handle in slow { close(handle) }
        close(honest)
        let times = answers.values.map { String(format: "%.1f", $0.after) }.sorted()
        let honestTook = honestAfter.map { String(format: "%.1f s", $0) } ?? "nothing in 6 s"
        print("slow bodies: answered \(answers.count) of \(slow.count) at \(times) s; the honest client after \(honestTook)")
        #expect(answers.count == slow.count && answers.values.allSatisfy { $0.status == "HTTP/1.1 408" && $0.after < 4 }, "\(answers.values)")
        #expect(String(decoding: honestAnswer, as: UTF8.self).hasPrefix("HTTP/1.1 200") && (honestAfter ?? 99) < 5)

        // The one change: the body arrives at 2,000 B/s (500 bytes every 250 ms) instead of 1 B/s;
        // it is read whole and answered by the inspector (400: not an object it takes), not 408.
        let steady = try Self.dial(service.port, from: "127.0.0.20")
        Self.postHead(steady, length: 4000)
        let prefix = #"{"mode":"semantic","pad":""#
        let body = Array((prefix + String(repeating: "a", count: 4000 - prefix.utf8.count - 2) + #""}"#).utf8)
        #expect(body.count == 4000)
        for offset in stride(from: 0, to: body.count, by: 500) {
            _ = body[offset..<min(offset + 500, body.count)].withUnsafeBytes { send(steady, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            try await Task.sleep(for: .milliseconds(250))
        }
        let steadyAnswer = String(decoding: Self.readAll(steady, seconds: 3), as: UTF8.self)
        close(steady)
        #expect(steadyAnswer.hasPrefix("HTTP/1.1 400"), "\(steadyAnswer.prefix(200))")
        // A client that sent `Expect: 100-continue` gets `100 Continue` at once (r5 F2) and, as
        // curl does, then sends its whole body: read whole (400), not 408.
        let expecting = try Self.dial(service.port, from: "127.0.0.21")
        let expectHead = "POST /api/appattest/inspect HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"
        let expectRequest = Array((expectHead + "Content-Length: 4000\r\n\r\n").utf8)
        _ = expectRequest.withUnsafeBytes { send(expecting, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var interim = ""
        let expectStarted = Date()
        while !interim.contains("\r\n\r\n") && Date().timeIntervalSince(expectStarted) < 1 {
            interim += String(decoding: Self.received(expecting), as: UTF8.self)
            try await Task.sleep(for: .milliseconds(20))
        }
        _ = body.withUnsafeBytes { send(expecting, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        let expectAnswer = interim + String(decoding: Self.readAll(expecting, seconds: 3), as: UTF8.self)
        close(expecting)
        #expect(interim.hasPrefix("HTTP/1.1 100 Continue\r\n\r\n"), "\(interim.prefix(80))")
        #expect(expectAnswer.dropFirst("HTTP/1.1 100 Continue\r\n\r\n".count).hasPrefix("HTTP/1.1 400"), "\(expectAnswer.prefix(200))")

        let metrics = try Self.exchange(service.port, "/metrics").body
        let refused = Self.metric(metrics, #"formattest_connections_refused_total{reason="slow_body"}"#)
        // Over the total, a body in progress for 1 s may be shed (408) a moment before its rate
        // check refuses it (r5 F2): each trickling body is one or the other.
        let shed = Self.metric(metrics, #"formattest_connections_refused_total{reason="shed_body"}"#)
        let log = await service.stop()
        #expect(refused >= 1 && refused + shed == Double(slow.count), "slow_body \(refused), shed_body \(shed)")
        #expect(log.contains("request body too slow"), "\(log.suffix(2000))")
    }

    @Test("r4 F5: the listener reaching its hard ceiling again and again logs a line a second at most, and counts each time")
    func ceilingLogRateLimited() async throws {
        let files = try TemporaryFiles()
        let service = try await Service(
            [
                "--store", "memory", "--insecure-no-caller-auth", "--max-connections", "2", "--header-timeout", "30", "--body-timeout", "30",
                "--idle-timeout", "60", "--log-level", "warning",
            ],
            files: files
        )
        // Five connections that send nothing, each replaced by a fresh one (from a fresh address)
        // after 0.8 s: never 1 s old, so never shed (and, silent, they hold back the shedding of
        // busy connections, r5). (Before r5, five bodies trickling above the minimum rate held
        // the listener there; they are now shed over the total.)
        final class Holder: @unchecked Sendable {
            var handle: Int32 = -1
            var opened = Date.distantPast
        }
        let holders = (0..<5).map { _ in Holder() }
        let port = service.port
        let churn = Background()
        churn.start(every: 0.05) { background in
            for holder in holders where Date().timeIntervalSince(holder.opened) > 0.8 {
                if holder.handle >= 0 { close(holder.handle) }
                let index = background.nextStep()
                holder.handle = Self.rawDial(port, from: "127.3.\(index / 250).\(index % 250 + 1)")
                holder.opened = Date()
            }
        }
        try await Task.sleep(for: .milliseconds(300))
        // A sixth connection, opened, answered and closed 30 times: the ceiling (6) reached each
        // time the five are open.
        let started = Date()
        var statuses: [Int] = []
        for _ in 0..<30 {
            let handle = try Self.dial(service.port, from: "127.0.0.40")
            statuses.append(Self.healthz(on: handle, seconds: 3))
            close(handle)
        }
        let elapsed = Date().timeIntervalSince(started)
        let metrics = try Self.exchange(service.port, "/metrics").body
        let saturated = Self.metric(metrics, "formattest_connections_saturated_total")
        churn.stop()
        for holder in holders where holder.handle >= 0 { close(holder.handle) }
        let log = await service.stop()
        let lines = log.split(separator: "\n").filter { $0.contains("connection limit reached") }.count
        print("the ceiling reached \(saturated) times in \(String(format: "%.1f", elapsed)) s: \(lines) log lines")
        #expect(statuses.allSatisfy { $0 == 200 }, "\(statuses)")
        #expect(elapsed < 10, "30 connections took \(elapsed) s: too slow to tell")
        #expect(saturated >= 20, "saturated \(saturated)")
        #expect(lines >= 1 && lines <= Int(elapsed) + 2 && Double(lines) < saturated, "\(lines) lines in \(elapsed) s, saturated \(saturated)")
    }

    @Test(
        "r4 F2, F3: churn of fresh connections from many addresses over the total never sheds a pooling client's keep-alive connections between their requests"
    )
    func churnSparesKeepAlive() async throws {
        let files = try TemporaryFiles()
        let service = try await Service(
            [
                "--store", "memory", "--insecure-no-caller-auth", "--max-connections", "8", "--header-timeout", "30", "--idle-timeout", "60",
                "--log-level", "warning",
            ],
            files: files
        )
        let port = service.port
        // pool.py's shape at small scale: a backend with 4 keep-alive connections from one
        // address (the peer holding the most), a request on each in turn, 20 ms apart.
        var pool: [Int32] = []
        for _ in 0..<4 { pool.append(try Self.dial(port, from: "127.0.0.2")) }
        // churn.py's: a fresh address every 40 ms, its connection held silent (at most 80).
        let churn = Background()
        churn.start(every: 0.04) { background in
            let index = background.nextStep()
            guard index <= 80 else { return }
            let handle = Self.rawDial(port, from: "127.0.1.\(index)")
            if handle >= 0 { background.hold(handle) }
        }
        var served = 0
        var lost = 0
        let stop = Date().addingTimeInterval(4)
        while Date() < stop {
            for index in pool.indices {
                if Self.healthz(on: pool[index], seconds: 3) == 200 {
                    served += 1
                } else {
                    lost += 1
                    close(pool[index])
                    pool[index] = try Self.dial(port, from: "127.0.0.2")
                }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        let fresh = churn.stepCount
        churn.stop()
        for handle in pool { close(handle) }
        _ = await service.stop()
        print("churn: \(min(fresh, 80)) fresh connections; the pool's requests: \(served) answered, \(lost) lost")
        #expect(served >= 40, "served \(served)")
        #expect(lost == 0, "\(lost) of the pool's requests met a closed connection (served \(served))")
    }

    @Test(
        "r4 F4: refusals at the inspector's gate (a full queue, a wait past its bound) spend none of the caller's budget; its served inspections still do"
    )
    func inspectorRefusalsFree() async throws {
        let files = try TemporaryFiles()
        let service = try await Service(
            ["--store", "memory", "--insecure-no-caller-auth", "--rate-limit-inspect", "3", "--log-level", "warning"], files: files)
        let port = service.port
        let json = [("Content-Type", "application/json")]
        let costly = Self.costlyInspection
        let path = "/api/appattest/inspect"
        // inspect_budget.py's shape: 40 addresses loop on the costly object for 10 s and keep the
        // queue's 16 places full.
        let stop = Date().addingTimeInterval(10)
        let attackers = Statuses()
        for index in 0..<40 {
            Thread.detachNewThread {
                while Date() < stop {
                    if let answer = try? Self.exchange(port, path, method: "POST", headers: json, body: costly, from: "127.0.2.\(index + 1)") {
                        attackers.add(answer.status, answer.body)
                    }
                }
                attackers.finish()
            }
        }
        try await Task.sleep(for: .milliseconds(500))
        // The legitimate caller meanwhile: refused for the busy inspector (3 times at least).
        let small = Array(#"{"mode":"tree","assertion":"oA"}"#.utf8)
        var during: [Int] = []
        var busy = 0
        while busy < 3 && Date() < stop {
            let answer = try Self.exchange(port, "/api/appattest/inspect", method: "POST", headers: json, body: small, from: "127.0.0.6")
            during.append(answer.status)
            if answer.status == 429 && answer.body.contains("busy with other callers") { busy += 1 }
            try await Task.sleep(for: .milliseconds(50))
        }
        try await attackers.wait(for: 40)
        try #require(busy >= 3, "the attack did not fill the queue: \(during) \(attackers.counts)")
        // After the attack: what is left of its budget of 3 is whole (before the change, each
        // refusal spent it: 429 here), and the budget still binds once spent.
        let served = during.filter { $0 == 200 }.count
        var after: [Int] = []
        for _ in 0..<(3 - served + 1) {
            after.append(try Self.exchange(port, "/api/appattest/inspect", method: "POST", headers: json, body: small, from: "127.0.0.6").status)
        }
        _ = await service.stop()
        print("inspector budget: during the attack \(during) (busy \(busy)); after \(after); attackers \(attackers.counts)")
        #expect(Array(after.dropLast()).allSatisfy { $0 == 200 } && after.last == 429, "after: \(after); during: \(during)")
    }

    @Test(
        "r4 F4: entry to the inspector's queue is fair: with 40 addresses keeping it full, each caller not served recently gets a place, and the next turn"
    )
    func inspectorFairEntry() async throws {
        let files = try TemporaryFiles()
        let service = try await Service(
            ["--store", "memory", "--insecure-no-caller-auth", "--rate-limit-inspect", "100000", "--log-level", "warning"], files: files)
        let port = service.port
        let json = [("Content-Type", "application/json")]
        let costly = Self.costlyInspection
        let path = "/api/appattest/inspect"
        // inspect_polite.py's shape without the pause: 40 addresses, each within its budget,
        // loop on the costly object and keep the queue's 16 places full.
        let stop = Date().addingTimeInterval(120)
        let finished = Flag()
        let attackers = Statuses()
        for index in 0..<40 {
            Thread.detachNewThread {
                while Date() < stop && !finished.isSet {
                    if let answer = try? Self.exchange(port, path, method: "POST", headers: json, body: costly, from: "127.0.3.\(index + 1)") {
                        attackers.add(answer.status, answer.body)
                    }
                }
                attackers.finish()
            }
        }
        // Until the attackers have had 60 turns (each address one at least, when turns are fair).
        for _ in 0..<1200 where (attackers.counts[200] ?? 0) < 60 { try await Task.sleep(for: .milliseconds(100)) }
        // Eight callers never served, one request each, half a second apart.
        let small = Array(#"{"mode":"tree","assertion":"oA"}"#.utf8)
        var newcomers: [Int] = []
        for index in 0..<8 {
            newcomers.append(try Self.exchange(port, path, method: "POST", headers: json, body: small, from: "127.0.4.\(index + 1)").status)
            try await Task.sleep(for: .milliseconds(500))
        }
        finished.set()
        try await attackers.wait(for: 40)
        _ = await service.stop()
        let displaced = attackers.refusals.filter { $0.contains("served less recently") }.count
        print("inspector entry under 40 looping addresses: newcomers \(newcomers); attackers \(attackers.counts), \(displaced) displaced")
        try #require((attackers.counts[429] ?? 0) > 0, "the attack did not fill the queue: \(attackers.counts)")
        // Before the change, places went to whoever asked first: the newcomers got 429 for the
        // busy inspector on most attempts (red team: 16 of 18).
        #expect(newcomers == [Int](repeating: 200, count: 8), "\(newcomers)")
    }

    @Test(
        "r8 F4: the time from a request's head read to its answer is measured per listener, pipelined waits included (formattest_time_to_answer_seconds)"
    )
    func timeToAnswerMeasured() async throws {
        let files = try TemporaryFiles()
        let adminPort = Formattest.freePort()
        let service = try await Service(["--store", "memory", "--insecure-no-caller-auth", "--admin-port", String(adminPort)], files: files)
        let count = #"formattest_time_to_answer_seconds_count{listener="api"}"#
        let sum = #"formattest_time_to_answer_seconds_sum{listener="api"}"#
        let before = try Self.exchange(adminPort, "/metrics").body
        // Eight requests pipelined on one connection: eight answers, each timed from its own
        // head, the later ones waiting for the earlier.
        let handle = try Self.dial(service.port, from: "127.0.0.2")
        let eight = Array(String(repeating: "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", count: 8).utf8)
        _ = eight.withUnsafeBytes { send(handle, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        let answers = String(decoding: Self.readAll(handle, seconds: 2), as: UTF8.self).components(separatedBy: "HTTP/1.1 200").count - 1
        close(handle)
        let after = try Self.exchange(adminPort, "/metrics").body
        _ = await service.stop()
        #expect(answers == 8)
        #expect(Self.metric(after, count) - Self.metric(before, count) == 8, "\(Self.metric(before, count)) -> \(Self.metric(after, count))")
        #expect(Self.metric(after, sum) > Self.metric(before, sum))
        // The operators' listener is timed apart: its scrapes are not the API's answers.
        #expect(Self.metric(after, #"formattest_time_to_answer_seconds_count{listener="admin"}"#) >= 1)
    }

    @Test(
        "r5 F1: a connection gets at most 16 pipelined requests served unanswered; 40 connections pipelining 3,000 requests each and reading nothing cannot keep other clients out, during or after"
    )
    func pipelinedRequestsBounded() async throws {
        let files = try TemporaryFiles()
        let service = try await Service(
            ["--store", "memory", "--insecure-no-caller-auth", "--max-connections", "32", "--log-level", "warning"], files: files)
        let port = service.port
        let before = try Self.exchange(port, "/metrics").body
        // slowread.py's shape: 40 addresses, each one connection with a 2 KB receive buffer,
        // writing 3,000 pipelined `GET /nope` (93 KB) at once and reading nothing.
        let pipelined = Array(String(repeating: "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", count: 3000).utf8)
        var attackers: [Int32] = []
        for index in 0..<40 {
            let handle = try Self.dial(port, from: "127.0.5.\(index + 1)", receiveBuffer: 2048)
            attackers.append(handle)
            var sent = 0
            let started = Date()
            while sent < pipelined.count && Date().timeIntervalSince(started) < 2 {
                let count = pipelined[sent...].withUnsafeBytes { send(handle, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
                if count > 0 { sent += count } else { usleep(10_000) }
            }
        }
        // An honest client meanwhile, on a fresh connection: answered (before: nothing in 30 s).
        var during: [(status: Int, seconds: Double)] = []
        for _ in 0..<3 {
            let started = Date()
            let answer = try Self.exchange(port, "/healthz", from: "127.0.0.1")
            during.append((answer.status, Date().timeIntervalSince(started)))
            try await Task.sleep(for: .milliseconds(500))
        }
        // The attackers leave: what they pipelined is not served on (before: minutes of it).
        for handle in attackers { close(handle) }
        try await Task.sleep(for: .milliseconds(500))
        let leftStarted = Date()
        let left = try Self.exchange(port, "/healthz", from: "127.0.0.1")
        let leftSeconds = Date().timeIntervalSince(leftStarted)
        // A client pipelining a few requests gets every answer on a connection that stays open.
        let few = try Self.dial(port, from: "127.0.0.2")
        defer { close(few) }
        let eight = Array(String(repeating: "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", count: 8).utf8)
        _ = eight.withUnsafeBytes { send(few, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        let fewAnswers = String(decoding: Self.readAll(few, seconds: 2), as: UTF8.self).components(separatedBy: "HTTP/1.1 200").count - 1
        let stillOpen = Self.healthz(on: few)
        let metrics = try Self.exchange(port, "/metrics").body
        let log = await service.stop()
        let series = #"formattest_connections_refused_total{reason="pipelined"}"#
        let bounded = Self.metric(metrics, series) - Self.metric(before, series)
        let lines = log.split(separator: "\n").filter { $0.contains("pipelined more requests") }.count
        print(
            "pipelining: honest during \(during), after the attackers left \(left.status) in \(String(format: "%.2f", leftSeconds)) s; 8 pipelined: \(fewAnswers) answers, then \(stillOpen); bounded \(bounded), \(lines) log lines"
        )
        #expect(during.allSatisfy { $0.status == 200 && $0.seconds < 10 }, "\(during)")
        #expect(left.status == 200 && leftSeconds < 3, "\(left.status) \(leftSeconds)")
        #expect(fewAnswers == 8 && stillOpen == 200, "\(fewAnswers) \(stillOpen)")
        #expect(bounded >= 40, "\(bounded)")
        // Logged, a line a second at most: fewer lines than connections bounded.
        #expect(lines >= 1 && Double(lines) < bounded, "\(lines) \(bounded)")
    }

    @Test(
        "r5 F6: over the total, connections that never sent a request go first and without the shedding cap: a churn of silent connections neither delays newcomers nor sheds an honest keep-alive connection"
    )
    func silentChurnShedFirst() async throws {
        let files = try TemporaryFiles()
        let service = try await Service(
            ["--store", "memory", "--insecure-no-caller-auth", "--max-connections", "32", "--log-level", "warning"], files: files)
        let port = service.port
        // An honest keep-alive connection, a request every 3 s (the first as it opens).
        var keepAlive = try Self.dial(port, from: "127.0.0.3")
        var keepAliveAnswered = Self.healthz(on: keepAlive) == 200 ? 1 : 0
        // ka09.py's churn (HOLD=11): 20 new connections a second from fresh addresses, each
        // sending nothing and left open 11 s (past the 10 s header deadline).
        let churn = Background()
        let opened = Locked<[(handle: Int32, at: Date)]>([])
        churn.start(every: 0.05) { background in
            let index = background.nextStep()
            let handle = Self.rawDial(port, from: "127.0.\(8 + index / 250).\(index % 250 + 1)")
            let now = Date()
            let old = opened.update { list -> [Int32] in
                if handle >= 0 { list.append((handle, now)) }
                let expired = list.filter { now.timeIntervalSince($0.at) > 11 }.map(\.handle)
                list.removeAll { now.timeIntervalSince($0.at) > 11 }
                return expired
            }
            for handle in old { close(handle) }
        }
        try await Task.sleep(for: .seconds(3))
        var fresh: [(status: Int, seconds: Double)] = []
        var keepAliveLost = 0
        var nextKeepAlive = Date()
        let stop = Date().addingTimeInterval(12)
        while Date() < stop {
            if Date() >= nextKeepAlive {
                if Self.healthz(on: keepAlive, seconds: 10) == 200 {
                    keepAliveAnswered += 1
                } else {
                    keepAliveLost += 1
                    close(keepAlive)
                    keepAlive = try Self.dial(port, from: "127.0.0.3")
                    if Self.healthz(on: keepAlive, seconds: 10) == 200 { keepAliveAnswered += 1 }
                }
                nextKeepAlive = Date().addingTimeInterval(3)
            }
            let started = Date()
            let answer = try Self.exchange(port, "/healthz", from: "127.0.0.4")
            fresh.append((answer.status, Date().timeIntervalSince(started)))
            try await Task.sleep(for: .milliseconds(500))
        }
        let silent = churn.stepCount
        churn.stop()
        for (handle, _) in opened.update({ list in list }) { close(handle) }
        close(keepAlive)
        _ = await service.stop()
        let slowest = fresh.map(\.seconds).max() ?? 0
        print(
            "silent churn (\(silent) connections): fresh clients \(fresh.count), slowest \(String(format: "%.2f", slowest)) s, statuses \(Set(fresh.map(\.status))); keep-alive \(keepAliveAnswered) answered, \(keepAliveLost) lost"
        )
        // Before: newcomers waited 8.5-9.6 s in the backlog and the keep-alive connection lost
        // requests as it was shed.
        #expect(fresh.count >= 8 && fresh.allSatisfy { $0.status == 200 } && slowest < 3, "\(fresh)")
        #expect(keepAliveAnswered >= 3 && keepAliveLost == 0, "answered \(keepAliveAnswered), lost \(keepAliveLost)")
    }

    // MARK: - r5 F3, F2: newcomers served when every slot is busy

    /// One request on an open keep-alive connection: the status and the answer's head (lowercased),
    /// or (0, "") when no complete answer came within `seconds`.
    static func request(on handle: Int32, _ text: String = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", seconds: Double = 5) -> (
        status: Int, head: String
    ) {
        let request = Array(text.utf8)
        _ = request.withUnsafeBytes { send(handle, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(handle, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let count = recv(handle, &buffer, buffer.count, 0)
            if count == 0 { break }
            if count > 0 { answer += buffer[0..<count] }
            let text = String(decoding: answer, as: UTF8.self)
            guard let end = text.range(of: "\r\n\r\n") else { continue }
            let head = String(text[..<end.lowerBound]).lowercased()
            let length =
                head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
            if text.utf8.count - text[..<end.upperBound].utf8.count >= length {
                let parts = head.split(separator: " ")
                return (parts.count >= 2 ? Int(parts[1]) ?? 0 : 0, head)
            }
        }
        return (0, "")
    }

    /// A fresh connection's `GET /healthz` (`Connection: close`) from `source`: its status (0:
    /// no answer within `seconds`) and how long it took, the connection's setup included.
    static func freshHealthz(_ port: Int, from source: String, seconds: Double) -> (status: Int, seconds: Double) {
        let started = Date()
        let handle = Self.rawDial(port, from: source)
        guard handle >= 0 else { return (0, Date().timeIntervalSince(started)) }
        defer { close(handle) }
        let request = Array("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8)
        _ = request.withUnsafeBytes { send(handle, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(handle, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var buffer = [UInt8](repeating: 0, count: 256)
        while Date().timeIntervalSince(started) < seconds {
            let count = recv(handle, &buffer, buffer.count, 0)
            if count > 0 {
                let parts = String(decoding: buffer[0..<count], as: UTF8.self).prefix { $0 != "\r" }.split(separator: " ")
                return (parts.count >= 2 ? Int(parts[1]) ?? 0 : 0, Date().timeIntervalSince(started))
            }
            if count == 0 { break }
        }
        return (0, Date().timeIntervalSince(started))
    }

    /// Fresh-connection `/healthz` from 127.0.0.1 every 0.5 s for `duration` (ka09.py's honest
    /// client A, each given `seconds`): the statuses and times.
    static func honestNewcomers(_ port: Int, for duration: Double, seconds: Double) async throws -> [(status: Int, seconds: Double)] {
        var results: [(status: Int, seconds: Double)] = []
        let stop = Date().addingTimeInterval(duration)
        while Date() < stop {
            results.append(Self.freshHealthz(port, from: "127.0.0.1", seconds: seconds))
            try await Task.sleep(for: .milliseconds(500))
        }
        return results
    }

    static func summary(_ results: [(status: Int, seconds: Double)]) -> String {
        let times = results.map(\.seconds).sorted()
        guard !times.isEmpty else { return "n=0" }
        return String(
            format: "n=%d answered=%d median=%.2f s max=%.2f s", times.count, results.filter { $0.status == 200 }.count, times[times.count / 2],
            times.last ?? 0)
    }

    @Test(
        "r5 F3: a connection is served --max-requests-per-connection requests and for --max-connection-age; the answer that reaches a cap carries Connection: close, and the connection closes once it is written"
    )
    func connectionCaps() async throws {
        let files = try TemporaryFiles()
        let service = try await Service(
            [
                "--store", "memory", "--insecure-no-caller-auth", "--max-requests-per-connection", "5", "--max-connection-age", "3", "--log-level",
                "warning",
            ],
            files: files)
        // The request cap: the first four answers keep the connection, the fifth closes it.
        let counted = try Self.dial(service.port, from: "127.0.0.2")
        defer { close(counted) }
        var answers: [(status: Int, head: String)] = []
        for _ in 0..<5 { answers.append(Self.request(on: counted)) }
        let closedAfterFifth = Self.closedAfter(counted, seconds: 2)
        // The age cap: a request at once keeps the connection; one after 3 s closes it.
        let aged = try Self.dial(service.port, from: "127.0.0.3")
        defer { close(aged) }
        let young = Self.request(on: aged)
        try await Task.sleep(for: .milliseconds(1500))
        let middle = Self.request(on: aged)
        try await Task.sleep(for: .milliseconds(1800))
        let old = Self.request(on: aged)
        let closedAfterOld = Self.closedAfter(aged, seconds: 2)
        let metrics = try Self.exchange(service.port, "/metrics").body
        _ = await service.stop()
        let closing = answers.map { $0.head.contains("connection: close") }
        print(
            "caps: request cap 5: \(answers.map(\.status)) close \(closing), closed after \(closedAfterFifth.map { String(format: "%.2f s", $0) } ?? "never"); age cap 3 s: close at 0 s \(young.head.contains("connection: close")), 1.5 s \(middle.head.contains("connection: close")), 3.3 s \(old.head.contains("connection: close"))"
        )
        #expect(answers.allSatisfy { $0.status == 200 }, "\(answers.map(\.status))")
        #expect(closing == [false, false, false, false, true], "\(closing)")
        #expect(closedAfterFifth != nil, "the connection stayed open after its fifth answer")
        #expect(young.status == 200 && !young.head.contains("connection: close"), "\(young)")
        #expect(middle.status == 200 && !middle.head.contains("connection: close"), "\(middle)")
        #expect(old.status == 200 && old.head.contains("connection: close"), "\(old)")
        #expect(closedAfterOld != nil, "the connection stayed open after its answer past the age cap")
        #expect(Self.metric(metrics, #"formattest_connections_refused_total{reason="max_requests"}"#) == 1)
        #expect(Self.metric(metrics, #"formattest_connections_refused_total{reason="max_age"}"#) == 1)
    }

    @Test(
        "r5 F3: 40 keep-alive connections from their own addresses, each active every 0.9 s, cannot keep newcomers out: at the ceiling the connection served most is retired (its answer carries Connection: close), and a fresh client is answered in bounded time"
    )
    func busyKeepAliveRetired() async throws {
        let files = try TemporaryFiles()
        let service = try await Service(
            ["--store", "memory", "--insecure-no-caller-auth", "--max-connections", "32", "--log-level", "warning"], files: files)
        let port = service.port
        // ka09.py's attacker: 40 connections, each from its own address, a GET /healthz every
        // 0.9 s (never idle 1 s), reconnecting from a fresh address once closed; it ignores
        // Connection: close (it meets the close when it sends its next request).
        final class Attacker: @unchecked Sendable {
            var handle: Int32 = -1
            var awaiting = false
            var next = Date()
        }
        let attackers = (0..<40).map { _ in Attacker() }
        let counts = Locked((requests: 0, answered: 0, reconnections: 0))
        let request = Array("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        let attack = Background()
        attack.start(every: 0.02) { background in
            var buffer = [UInt8](repeating: 0, count: 4096)
            for attacker in attackers {
                if attacker.handle >= 0 && attacker.awaiting {
                    let count = recv(attacker.handle, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                    if count > 0 {
                        attacker.awaiting = false
                        attacker.next = Date().addingTimeInterval(0.9)
                        counts.update { $0.answered += 1 }
                        continue
                    }
                    if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { continue }
                    close(attacker.handle)
                    attacker.handle = -1
                }
                if attacker.handle < 0 {
                    let index = background.nextStep()
                    attacker.handle = Self.rawDial(port, from: "127.1.\(index / 250).\(index % 250 + 1)")
                    attacker.next = Date()
                    attacker.awaiting = false
                    counts.update { $0.reconnections += 1 }
                    if attacker.handle < 0 { continue }
                }
                if !attacker.awaiting && Date() >= attacker.next {
                    let sent = request.withUnsafeBytes { send(attacker.handle, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    if sent < 0 {
                        close(attacker.handle)
                        attacker.handle = -1
                        continue
                    }
                    attacker.awaiting = true
                    counts.update { $0.requests += 1 }
                }
            }
        }
        try await Task.sleep(for: .seconds(3))
        // ka09.py's honest client A: before, nothing in 30 s (two 30 s timeouts in 40 s).
        let honest = try await Self.honestNewcomers(port, for: 12, seconds: 10)
        attack.stop()
        for attacker in attackers where attacker.handle >= 0 { close(attacker.handle) }
        let attack_ = counts.update { $0 }
        let metrics = try Self.exchange(port, "/metrics").body
        _ = await service.stop()
        let retired = Self.metric(metrics, #"formattest_connections_refused_total{reason="shed_busy"}"#)
        print(
            "r5 F3 (40 keep-alive connections every 0.9 s, 32 slots): honest newcomers \(Self.summary(honest)); attacker \(attack_.requests) requests, \(attack_.answered) answered, \(attack_.reconnections - 40) reconnections; shed_busy \(retired)"
        )
        #expect(honest.count >= 10 && honest.allSatisfy { $0.status == 200 && $0.seconds < 5 }, "\(Self.summary(honest)): \(honest)")
        #expect(retired >= 1, "shed_busy \(retired)")
    }

    @Test(
        "r5 F2: bodies that meet the minimum rate cannot hold every slot: over the total the oldest body in progress (1 s at least) is refused 408, so a newcomer is answered in bounded time"
    )
    func steadyBodiesShed() async throws {
        let files = try TemporaryFiles()
        let service = try await Service(
            ["--store", "memory", "--insecure-no-caller-auth", "--max-connections", "32", "--log-level", "warning"], files: files)
        let port = service.port
        // slowbody5.py's `rate` attacker: 40 connections, each from its own address, a POST
        // announcing 60,000 bytes, then 1,100 B a second (above the 1,000 B/s minimum),
        // reconnecting from a fresh address once answered or closed.
        final class Attacker: @unchecked Sendable {
            var handle: Int32 = -1
            var next = Date()
        }
        let attackers = (0..<40).map { _ in Attacker() }
        let counts = Locked((connections: 0, answered: 0, refused408: 0))
        let chunk = [UInt8](repeating: UInt8(ascii: " "), count: 1100)
        let head = Array(
            "POST /api/appattest/attest HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n".utf8)
        let attack = Background()
        attack.start(every: 0.05) { background in
            var buffer = [UInt8](repeating: 0, count: 4096)
            for attacker in attackers {
                if attacker.handle >= 0 {
                    let count = recv(attacker.handle, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                    if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                        if Date() >= attacker.next {
                            _ = chunk.withUnsafeBytes { send(attacker.handle, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                            attacker.next = Date().addingTimeInterval(1)
                        }
                        continue
                    }
                    if count > 0 {
                        let is408 = String(decoding: buffer[0..<count], as: UTF8.self).hasPrefix("HTTP/1.1 408")
                        counts.update {
                            $0.answered += 1
                            if is408 { $0.refused408 += 1 }
                        }
                    }
                    close(attacker.handle)
                    attacker.handle = -1
                }
                let index = background.nextStep()
                attacker.handle = Self.rawDial(port, from: "127.2.\(index / 250).\(index % 250 + 1)")
                guard attacker.handle >= 0 else { continue }
                counts.update { $0.connections += 1 }
                _ = (head + chunk).withUnsafeBytes { send(attacker.handle, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                attacker.next = Date().addingTimeInterval(1)
            }
        }
        try await Task.sleep(for: .seconds(3))
        // slowbody5.py's honest client: before, 9.5-9.7 s each (the body timeout, 10 s).
        let honest = try await Self.honestNewcomers(port, for: 12, seconds: 15)
        attack.stop()
        for attacker in attackers where attacker.handle >= 0 { close(attacker.handle) }
        let attack_ = counts.update { $0 }
        let metrics = try Self.exchange(port, "/metrics").body
        _ = await service.stop()
        let shed = Self.metric(metrics, #"formattest_connections_refused_total{reason="shed_body"}"#)
        print(
            "r5 F2 (40 bodies at 1,100 B/s, 32 slots): honest newcomers \(Self.summary(honest)); attacker \(attack_.connections) connections, \(attack_.answered) answered (\(attack_.refused408) 408); shed_body \(shed)"
        )
        #expect(honest.count >= 10 && honest.allSatisfy { $0.status == 200 && $0.seconds < 3 }, "\(Self.summary(honest)): \(honest)")
        #expect(shed >= 1 && attack_.refused408 >= 1, "shed_body \(shed), 408 \(attack_.refused408)")
    }

    @Test(
        "r5 F2: the body rate counts over a sliding window: bytes sent with the head buy no time (refused within 3 s, not at the 10 s body timeout); the same bytes followed by 1,600 B/s are not refused; Expect: 100-continue is answered 100 at once and gets the normal grace"
    )
    func slidingBodyRate() async throws {
        let files = try TemporaryFiles()
        let service = try await Service(["--store", "memory", "--insecure-no-caller-auth", "--log-level", "warning"], files: files)
        let port = service.port
        let head = "POST /api/appattest/attest HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n"
        // slowbody5.py's `front`: 10.5 KB with the head, then nothing (before: the average since
        // the head stayed above the rate for 10.5 s, past the body timeout: 408 at 10 s).
        let front = try Self.dial(port, from: "127.0.0.2")
        defer { close(front) }
        let started = Date()
        _ = (Array((head + "\r\n").utf8) + [UInt8](repeating: UInt8(ascii: " "), count: 10_500)).withUnsafeBytes {
            send(front, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
        }
        var frontAnswer: [UInt8] = []
        while frontAnswer.isEmpty && Date().timeIntervalSince(started) < 12 {
            frontAnswer = Self.received(front)
            try await Task.sleep(for: .milliseconds(50))
        }
        let frontAfter = Date().timeIntervalSince(started)
        // The one change: after the same 10.5 KB, 800 B every 0.5 s (1,600 B/s, above the rate
        // in any 2 s window): still being read after 4.5 s.
        let steady = try Self.dial(port, from: "127.0.0.3")
        defer { close(steady) }
        _ = (Array((head + "\r\n").utf8) + [UInt8](repeating: UInt8(ascii: " "), count: 10_500)).withUnsafeBytes {
            send(steady, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
        }
        var steadyAnswer: [UInt8] = []
        for _ in 0..<9 {
            try await Task.sleep(for: .milliseconds(500))
            _ = [UInt8](repeating: UInt8(ascii: " "), count: 800).withUnsafeBytes { send(steady, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            steadyAnswer += Self.received(steady)
        }
        // Expect: 100-continue and no body: `100 Continue` at once, then 408 after the 1 s grace
        // (before: no 100, and 2 s of grace).
        let expecting = try Self.dial(port, from: "127.0.0.4")
        defer { close(expecting) }
        let expectStarted = Date()
        _ = Array((head + "Expect: 100-continue\r\n\r\n").utf8).withUnsafeBytes { send(expecting, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var expectAnswer = ""
        var continueAfter: Double?
        while !expectAnswer.contains("408") && Date().timeIntervalSince(expectStarted) < 5 {
            expectAnswer += String(decoding: Self.received(expecting), as: UTF8.self)
            if continueAfter == nil && expectAnswer.hasPrefix("HTTP/1.1 100") { continueAfter = Date().timeIntervalSince(expectStarted) }
            try await Task.sleep(for: .milliseconds(20))
        }
        let expectAfter = Date().timeIntervalSince(expectStarted)
        _ = await service.stop()
        let frontText = String(decoding: frontAnswer, as: UTF8.self)
        print(
            "sliding rate: front-loaded 10.5 KB answered \(frontText.prefix(12)) after \(String(format: "%.2f", frontAfter)) s; steady: \(steadyAnswer.isEmpty ? "still read after 4.5 s" : String(decoding: steadyAnswer.prefix(12), as: UTF8.self)); Expect: 100 after \(continueAfter.map { String(format: "%.2f s", $0) } ?? "never"), 408 after \(String(format: "%.2f", expectAfter)) s"
        )
        #expect(frontText.hasPrefix("HTTP/1.1 408") && frontAfter > 1.5 && frontAfter < 4.5, "\(frontText.prefix(40)) after \(frontAfter) s")
        #expect(steadyAnswer.isEmpty, "\(String(decoding: steadyAnswer, as: UTF8.self).prefix(40))")
        #expect((continueAfter ?? 9) < 0.5, "100 Continue after \(String(describing: continueAfter))")
        #expect(expectAnswer.contains("HTTP/1.1 408") && expectAfter > 0.8 && expectAfter < 1.8, "\(expectAnswer.prefix(80)) after \(expectAfter) s")
    }

    /// A value behind a lock, for threads.
    final class Locked<Value>: @unchecked Sendable {
        private let lock = NSLock()
        private var value: Value
        init(_ value: Value) { self.value = value }
        func update<T>(_ body: (inout Value) -> T) -> T { self.lock.withLock { body(&self.value) } }
    }

    /// A flag set once, read by threads.
    final class Flag: @unchecked Sendable {
        private let lock = NSLock()
        private var value = false
        func set() { self.lock.withLock { self.value = true } }
        var isSet: Bool { self.lock.withLock { self.value } }
    }
}

/// The mode bits of a file, as the tests read it.
enum StrictModesProbe {
    static func mode(_ path: String) -> Int? {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.posixPermissions] as? NSNumber).map { $0.intValue & 0o7777 }
    }
}
