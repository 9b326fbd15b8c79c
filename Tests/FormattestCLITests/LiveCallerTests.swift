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

/// Caller authentication and rate limits through `formattest serve`'s own flags, against
/// running servers: the identity provider by a JWKS file, and one rate limit shared by two
/// instances on one MongoDB (and on one SQLite file).
struct LiveCallerTests {
    /// GET `path` on 127.0.0.1:`port`: (status, body).
    static func get(_ port: Int, _ path: String, bearer: String? = nil) async throws -> (Int, String) {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        request.timeoutInterval = 30
        if let bearer { request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization") }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }

    static func serve(_ arguments: [String], files: TemporaryFiles) async throws -> (Formattest.Running, Int) {
        let port = Formattest.freePort()
        let server = try Formattest.start(
            ["serve", "--port", String(port), "--data-dir", files.directory.path, "--log-level", "warning"] + arguments)
        try #require(await Formattest.waitForListener(port: port, process: server.process), "the service did not start listening")
        return (server, port)
    }

    @Test("serve --caller-jwks FILE --caller-issuer --caller-audience: no token 401, a good one 200, a foreign one 401; public routes stay public")
    func identityProviderFlags() async throws {
        let provider = try TestIdentityProvider()
        let files = try TemporaryFiles()
        let jwks = try files.write(Data(try provider.jwks()), named: "jwks.json")
        let (server, port) = try await Self.serve(
            [
                "--store", "memory", "--caller-jwks", jwks, "--caller-issuer", TestIdentityProvider.issuer, "--caller-audience",
                TestIdentityProvider.audience,
            ],
            files: files
        )
        defer { _ = server.terminate(within: 10) }
        let (anonymous, body) = try await Self.get(port, "/api/appattest/challenge")
        #expect(anonymous == 401 && body.contains("unauthenticated"), "\(body)")
        #expect(try await Self.get(port, "/api/appattest/challenge", bearer: try provider.token(TestIdentityProvider.claims())).0 == 200)
        let foreign = try TestIdentityProvider()
        #expect(try await Self.get(port, "/api/appattest/challenge", bearer: try foreign.token(TestIdentityProvider.claims())).0 == 401)
        #expect(try await Self.get(port, "/healthz").0 == 200)
        #expect(try await Self.get(port, "/.well-known/jwks.json").0 == 200)
    }

    @Test(
        "a path spelled another way (//api/appattest/…, /api//appattest/…) reaches no route unauthenticated",
        arguments: [
            "//api/appattest/challenge", "/api//appattest/challenge", "//api//appattest//challenge", "/api/appattest//challenge",
        ])
    func doubledSlashes(path: String) async throws {
        let files = try TemporaryFiles()
        let secret = String(repeating: "s", count: 40)
        let secretFile = try files.writeSecret(secret, named: "secrets")
        let (server, port) = try await Self.serve(["--store", "memory", "--caller-secret-file", secretFile], files: files)
        defer { _ = server.terminate(within: 10) }
        let (status, body) = try await Self.get(port, path + "?username=alice")
        #expect(status == 401 || status == 404, "\(path): \(status) \(body)")
        #expect(try await Self.get(port, path + "?username=alice", bearer: secret).0 != 401)
    }

    /// A TCP socket connected to the service on 127.0.0.1:`port`.
    static func connected(port: Int) throws -> Int32 {
        let handle = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(handle, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        try #require(connected == 0)
        return handle
    }

    /// Sends a request whose declared body is over the limit (or trickles it), and measures how
    /// long the server keeps the connection: it must answer and close, not drain the body.
    static func heldConnection(port: Int, head: String, firstBytes: Int) throws -> (answer: String, closedAfter: Double) {
        let started = Date()
        let handle = try Self.connected(port: port)
        defer { close(handle) }
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(handle, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let bytes = Array(head.utf8) + [UInt8](repeating: UInt8(ascii: "a"), count: firstBytes)
        _ = bytes.withUnsafeBytes { send(handle, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var answer = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        // Trickle a byte a second for up to 20 s; stop when the server closed the connection.
        for _ in 0..<20 {
            let count = recv(handle, &buffer, buffer.count, 0)
            if count == 0 { return (String(decoding: answer, as: UTF8.self), Date().timeIntervalSince(started)) }
            if count > 0 { answer += buffer[0..<count] }
            var one: UInt8 = UInt8(ascii: "a")
            if send(handle, &one, 1, Int32(MSG_NOSIGNAL)) < 0 { break }
        }
        return (String(decoding: answer, as: UTF8.self), Date().timeIntervalSince(started))
    }

    /// How many HTTP/1.1 status lines `answer` holds.
    static func responses(in answer: String) -> Int {
        answer.components(separatedBy: "HTTP/1.1 ").count - 1
    }

    @Test(
        "a refused body (declared too large, over the limit while trickling, or too slow) is answered 413 or 408, once, and the connection closed, not drained"
    )
    func refusedBodiesClose() async throws {
        let files = try TemporaryFiles()
        let (server, port) = try await Self.serve(
            ["--store", "memory", "--insecure-no-caller-auth", "--body-timeout", "3", "--idle-timeout", "5"], files: files)
        defer { _ = server.terminate(within: 10) }
        let declared = try Self.heldConnection(
            port: port,
            head: "POST /api/appattest/attest HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n",
            firstBytes: 10)
        #expect(declared.answer.hasPrefix("HTTP/1.1 413"), "\(declared.answer.prefix(80))")
        #expect(Self.responses(in: declared.answer) == 1, "one request, one answer: \(declared.answer)")
        #expect(declared.closedAfter < 10, "held for \(declared.closedAfter) s")
        let chunked = try Self.heldConnection(
            port: port, head: "POST /api/appattest/attest HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n20000\r\n", firstBytes: 70_000)
        #expect(chunked.answer.hasPrefix("HTTP/1.1 413"), "\(chunked.answer.prefix(80))")
        #expect(Self.responses(in: chunked.answer) == 1, "one request, one answer: \(chunked.answer)")
        #expect(chunked.closedAfter < 10, "held for \(chunked.closedAfter) s")
        // Within the limit but trickled past the body timeout (3 s): 408, once.
        let trickled = try Self.heldConnection(
            port: port, head: "POST /api/appattest/attest HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n",
            firstBytes: 10)
        #expect(trickled.answer.hasPrefix("HTTP/1.1 408"), "\(trickled.answer.prefix(80))")
        #expect(Self.responses(in: trickled.answer) == 1, "one request, one answer: \(trickled.answer)")
        #expect(trickled.closedAfter < 10, "held for \(trickled.closedAfter) s")
        #expect(try await Self.get(port, "/healthz").0 == 200)
    }

    /// Sends `bytes` in one write (or each of `later` 200 ms after the one before), half-closes
    /// when asked, and reads until the server closes (or 8 s pass): everything the server answered.
    static func exchange(port: Int, _ bytes: [UInt8], later: [[UInt8]] = [], halfClose: Bool) throws -> String {
        let handle = try Self.connected(port: port)
        defer { close(handle) }
        var timeout = timeval(tv_sec: 8, tv_usec: 0)
        setsockopt(handle, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        for (index, part) in ([bytes] + later).enumerated() {
            if index > 0 { usleep(200_000) }
            _ = part.withUnsafeBytes { send(handle, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
        if halfClose { shutdown(handle, Int32(SHUT_WR)) }
        var answer = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = recv(handle, &buffer, buffer.count, 0)
            guard count > 0 else { break }
            answer += buffer[0..<count]
        }
        return String(decoding: answer, as: UTF8.self)
    }

    @Test(
        "a refused or cut-off body ends its connection with one answer: nothing pipelined behind it is served, and a cut-off body is never read as complete"
    )
    func refusedBodiesEndTheConnection() async throws {
        let files = try TemporaryFiles()
        let (server, port) = try await Self.serve(
            ["--store", "memory", "--insecure-no-caller-auth", "--body-timeout", "3", "--idle-timeout", "5"], files: files)
        defer { _ = server.terminate(within: 10) }
        let oversized =
            Array("POST /api/appattest/attest HTTP/1.1\r\nHost: x\r\nContent-Length: 70000\r\n\r\n".utf8)
            + [UInt8](repeating: UInt8(ascii: "a"), count: 70_000)
        let challenge = Array("GET /api/appattest/challenge?username=bob HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        let cutOff = Array(
            "POST /api/appattest/attest HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"username\":\"alice\"}"
                .utf8)
        let chunked =
            Array("POST /api/appattest/attest HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10001\r\n".utf8)
            + [UInt8](repeating: UInt8(ascii: "a"), count: 65_537) + Array("\r\n0\r\n\r\n".utf8)
        let garbage = Array("GARBAGE GARBAGE\r\n\r\n".utf8)
        // Behind a refused body (declared, or grown over the limit), a pipelined request is not
        // served (it would issue a challenge), a pipelined cut-off body is neither served nor
        // answered, and pipelined garbage gets no second answer.
        for refused in [oversized, chunked] {
            for pipelined in [challenge, cutOff, garbage] {
                let answer = try Self.exchange(port: port, refused + pipelined, halfClose: false)
                #expect(answer.hasPrefix("HTTP/1.1 413"), "\(answer.prefix(80))")
                #expect(Self.responses(in: answer) == 1, "\(answer)")
            }
        }
        // The client half-closes right after declaring an over-limit body: 413, and no second 400.
        let halfClosed = try Self.exchange(port: port, Array(oversized[0..<(oversized.count - 70_000)]), halfClose: true)
        #expect(halfClosed.hasPrefix("HTTP/1.1 413"), "\(halfClosed.prefix(80))")
        #expect(Self.responses(in: halfClosed) == 1, "\(halfClosed)")
        // A declared length beyond Int (2^63) is over the limit like any other: 413 at once, not 408.
        let huge = try Self.exchange(
            port: port, Array("POST /api/appattest/attest HTTP/1.1\r\nHost: x\r\nContent-Length: 9223372036854775808\r\n\r\n".utf8), halfClose: false)
        #expect(huge.hasPrefix("HTTP/1.1 413"), "\(huge.prefix(80))")
        // A body within the limit that the client cuts short: one 400 for a malformed request, not
        // the route's verdict on a fragment.
        let short = try Self.exchange(port: port, cutOff, halfClose: true)
        #expect(short.hasPrefix("HTTP/1.1 400"), "\(short.prefix(80))")
        #expect(short.contains("malformed_request"), "\(short)")
        #expect(Self.responses(in: short) == 1, "\(short)")
        // The limit is per request: two 50,000-byte JSON bodies on one connection, the second in
        // two writes, are each read whole (the route judges the document: no keyId), neither
        // counted as part of one 100,000-byte body (413) nor cut short (invalid_json).
        let prefix = Array(#"{"username":"alice","pad":""#.utf8)
        let document = prefix + [UInt8](repeating: UInt8(ascii: "a"), count: 50_000 - prefix.count - 2) + Array(#""}"#.utf8)
        let within =
            Array("POST /api/appattest/attest HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 50000\r\n\r\n".utf8) + document
        let two = try Self.exchange(port: port, within, later: [Array(within[0..<30_000]), Array(within[30_000...])], halfClose: true)
        #expect(Self.responses(in: two) == 2, "\(two)")
        #expect(two.components(separatedBy: "invalid_request").count - 1 == 2, "\(two)")
        #expect(try await Self.get(port, "/healthz").0 == 200)
    }

    /// Sends a request head and part of its body, then resets the connection (SO_LINGER 0).
    static func resetMidBody(port: Int) throws {
        let handle = try Self.connected(port: port)
        let bytes = Array("POST /api/appattest/assert HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 30\r\n\r\n{\"a\"".utf8)
        _ = bytes.withUnsafeBytes { send(handle, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        usleep(200_000)
        var linger = linger(l_onoff: 1, l_linger: 0)
        setsockopt(handle, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<linger>.size))
        close(handle)
    }

    @Test("a client that resets its connection mid-body is the client's doing: logged as a 400, never as an unexpected error or a 500")
    func resetMidBodyIsNotAServerError() async throws {
        let files = try TemporaryFiles()
        let port = Formattest.freePort()
        let server = try Formattest.start(
            [
                "serve", "--port", String(port), "--data-dir", files.directory.path, "--log-level", "info", "--store", "memory",
                "--insecure-no-caller-auth",
            ])
        try #require(await Formattest.waitForListener(port: port, process: server.process), "the service did not start listening")
        for _ in 0..<3 { try Self.resetMidBody(port: port) }
        try await Task.sleep(for: .milliseconds(500))
        #expect(try await Self.get(port, "/healthz").0 == 200)
        _ = await server.terminate(within: 10)
        let log = await server.finish().stderr.split(separator: "\n").filter { $0.contains("/api/appattest/assert") || $0.contains("unexpected") }
        #expect(log.count >= 3, "\(log)")
        #expect(log.allSatisfy { !$0.contains("status=500") && !$0.contains("unexpected error") }, "\(log)")
        #expect(log.contains { $0.contains("status=400") }, "\(log)")
    }

    @Test("serve refuses to start without a caller authentication (but for the demo or the explicit insecure flag)")
    func refusesWithoutCallerAuthentication() async throws {
        let result = try await Formattest.run(["serve", "--store", "memory", "--port", "18998"])
        #expect(result.status == 2 && result.stderr.contains("--caller-jwks") && result.stderr.contains("--caller-secret-file"), "\(result.stderr)")
        let both = try await Formattest.run([
            "serve", "--store", "memory", "--port", "18998", "--insecure-no-caller-auth", "--caller-secret-file", "/x",
        ])
        #expect(both.status == 2 && both.stderr.contains("Choose one"), "\(both.stderr)")
    }

    /// Two instances on `store`, a limit of 4 per user: alice's requests alternate between them,
    /// and the fifth is refused wherever it lands.
    static func sharedLimit(store: [String]) async throws {
        let files = try TemporaryFiles()
        let limits = ["--insecure-no-caller-auth", "--rate-limit-per-user", "4", "--rate-limit-per-address", "1000", "--rate-limit-window", "3600"]
        let (first, firstPort) = try await Self.serve(store + limits, files: files)
        defer { _ = first.terminate(within: 10) }
        let (second, secondPort) = try await Self.serve(store + limits, files: files)
        defer { _ = second.terminate(within: 10) }
        try await Formattest.awayFromWindowEdge(3600, margin: 120)
        var statuses: [Int] = []
        for index in 0..<6 {
            statuses.append(try await Self.get(index % 2 == 0 ? firstPort : secondPort, "/api/appattest/challenge?username=alice").0)
        }
        #expect(statuses == [200, 200, 200, 200, 429, 429], "\(statuses)")
        #expect(try await Self.get(secondPort, "/api/appattest/challenge?username=bob").0 == 200)
    }

    @Test("a rate limit holds across two instances on one MongoDB")
    func sharedLimitMongoDB() async throws {
        let uri = try MongoTestServer.uri.get()
        try await Self.sharedLimit(store: ["--store", uri, "--mongodb-database", "limits_\(UUID().uuidString.prefix(8))"])
    }

    @Test("a rate limit holds across two instances on one SQLite file")
    func sharedLimitSQLite() async throws {
        let files = try TemporaryFiles()
        try await Self.sharedLimit(store: ["--store", "sqlite:" + files.directory.appendingPathComponent("limits.sqlite").path])
    }
}
