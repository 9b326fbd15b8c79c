//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import Crypto
import FormAttestFlows
import FormAttestForm
import FormAttestServer
import FormAttestTestSupport
import Foundation
import HTTPTypes
import RFC3339
import Testing

/// Who vouches for `username`: identity-provider tokens, a trusted backend, key lifecycle and
/// rate limits, over HTTP (the in-process router; ``LiveCallerTests`` drives a running server).
struct CallerAuthenticationTests {
    static func text(_ value: String) -> JSONValue { .string(JSONString(value)) }

    static func harness(_ provider: TestIdentityProvider, bindSessions: Bool = true) throws -> ServiceHarness {
        var harness = try ServiceHarness()
        let jwks = try provider.jwks()
        let verifier = IdentityProviderVerifier(
            configuration: .init(issuer: TestIdentityProvider.issuer, audience: TestIdentityProvider.audience),
            source: { jwks }
        )
        harness.configuration.callerAuthentication = .identityProvider(verifier, bindSessions: bindSessions)
        return harness
    }

    /// A form for `user`, signed in `session` (nil: no session field).
    static func form(user: String = "alice", session: String? = "session-1", nonce: String = UUID().uuidString) -> JSONValue {
        var members: [(String, JSONValue)] = [
            ("amount", text("25.00")), ("to", text("bob")), ("username", text(user)), ("timestamp", text(RFC3339UTC.format(Date()))),
            ("nonce", text(nonce)),
        ]
        if let session { members.append(("session", text(session))) }
        return .object(JSONObject(constantMembers: members))
    }

    /// Registers a key with `client` (already carrying its credential), the body's username optional.
    static func register(_ client: ServiceHarness.Client, form: JSONValue, username: String? = nil) async throws -> (
        String, ServiceHarness.Client.Answer
    ) {
        let simulated = try await client.post("/api/dev/simulate", [("action", text("attest")), ("form", form)])
        let keyID = try #require(simulated.json?["keyId"]?.stringValue)
        var body: [(String, JSONValue)] = [
            ("keyId", text(keyID)), ("attestationObject", simulated.json?["attestationObject"] ?? .null), ("form", form),
        ]
        if let username { body.append(("username", text(username))) }
        return (keyID, try await client.post("/api/appattest/attest", body))
    }

    static func assert(_ client: ServiceHarness.Client, keyID: String, form: JSONValue, username: String? = nil) async throws
        -> ServiceHarness.Client.Answer
    {
        var body: [(String, JSONValue)] = [
            ("keyId", text(keyID)), ("assertion", text(try await ServiceHarness.assertion(client, keyID: keyID, form: form))), ("form", form),
        ]
        if let username { body.append(("username", text(username))) }
        return try await client.post("/api/appattest/assert", body)
    }

    @Test("identity-provider tokens: the token's user acts, its sid binds the form; every bad token is 401, every mismatch 403")
    func identityProvider() async throws {
        let provider = try TestIdentityProvider()
        let harness = try Self.harness(provider)
        try await harness.run { anonymous in
            let alice = anonymous.with(bearer: try provider.token(TestIdentityProvider.claims()))

            // No credential: 401 on every /api/appattest endpoint; the public ones answer.
            let challenge = try await anonymous.send(.get, "/api/appattest/challenge", template: "/api/appattest/challenge")
            #expect(challenge.status == 401 && challenge.errorCode == "unauthenticated")
            #expect(challenge.headers[.wwwAuthenticate] == "Bearer")
            let (_, unauthenticated) = try await Self.register(anonymous, form: Self.form(), username: "alice")
            #expect(unauthenticated.status == 401 && unauthenticated.errorCode == "unauthenticated")
            #expect(try await anonymous.send(.get, "/healthz", template: "/healthz").status == 200)
            #expect(try await anonymous.send(.get, "/.well-known/jwks.json", template: "/.well-known/jwks.json").status == 200)

            // A good token: registered for the token's user, with no username in the body.
            let (keyID, registered) = try await Self.register(alice, form: Self.form())
            #expect(registered.status == 200, "\(String(decoding: registered.body, as: UTF8.self))")
            #expect(registered.json?["recentRegistrations"] == .number(1))
            let accepted = try await Self.assert(alice, keyID: keyID, form: Self.form(), username: "alice")
            #expect(accepted.status == 200)
            let jws = try #require(accepted.json?["formats"]?["serverAttestation"]?.stringValue)
            let payload = try #require(Base64URL.decode(String(jws.split(separator: ".")[1])))
            #expect(try CanonicalJSON.parse(payload)["sub"]?.stringValue == "alice")

            // 403: another username than the token's; a form from another session, or none.
            let mismatch = try await Self.assert(alice, keyID: keyID, form: Self.form(user: "bob"), username: "bob")
            #expect(mismatch.status == 403 && mismatch.errorCode == "identity_mismatch")
            let otherChallenge = try await alice.send(.get, "/api/appattest/challenge?username=bob", template: "/api/appattest/challenge")
            #expect(otherChallenge.status == 403 && otherChallenge.errorCode == "identity_mismatch")
            for session in ["session-2", nil] as [String?] {
                let answer = try await Self.assert(alice, keyID: keyID, form: Self.form(session: session))
                #expect(answer.status == 403 && answer.errorCode == "session_mismatch", "\(session ?? "no session")")
            }
            #expect(try await alice.send(.get, "/api/appattest/challenge", template: "/api/appattest/challenge").status == 200)

            // Every bad token is 401, one change each.
            let now = Date()
            let other = P256.Signing.PrivateKey()
            let bad: [(String, String)] = [
                ("signed by a key not in the JWKS", try provider.token(TestIdentityProvider.claims(), with: other)),
                ("an unknown kid", try provider.token(TestIdentityProvider.claims(), kid: "ec9")),
                ("expired", try provider.token(TestIdentityProvider.claims(now: now.addingTimeInterval(-400)))),
                ("not yet valid", try provider.token(TestIdentityProvider.claims(now: now.addingTimeInterval(120)))),
                (
                    "another issuer",
                    try provider.token(
                        TestIdentityProvider.claims().replacingOccurrences(of: TestIdentityProvider.issuer, with: "https://evil.example"))
                ),
                (
                    "another audience",
                    try provider.token(TestIdentityProvider.claims().replacingOccurrences(of: #""aud":"formattest""#, with: #""aud":"other""#))
                ),
                ("alg none", try provider.token(TestIdentityProvider.claims(), signer: .none)),
                ("HS256 on the EC key's kid", try provider.token(TestIdentityProvider.claims(), kid: "ec1", alg: "HS256")),
                ("ES256 claimed on the RSA key", try provider.token(TestIdentityProvider.claims(), kid: "rsa1")),
                ("a duplicate sub", try provider.token(TestIdentityProvider.claims(extra: #","sub":"mallory""#))),
                ("no exp", try provider.token(TestIdentityProvider.claims().replacingOccurrences(of: #""exp":"#, with: #""xp":"#))),
                ("a user with a control character", try provider.token(TestIdentityProvider.claims(user: "alice\\u0000"))),
                ("not a JWT", "not-a-token"),
                (
                    "an aud array with a non-string",
                    try provider.token(
                        TestIdentityProvider.claims().replacingOccurrences(of: #""aud":"formattest""#, with: #""aud":["formattest",7]"#))
                ),
            ]
            // A critical header extension this verifier does not understand (RFC 7515 §4.1.11).
            let critical = try provider.token(TestIdentityProvider.claims())
            let criticalParts = critical.split(separator: ".")
            let criticalHeader = Base64URL.encode(Array(#"{"alg":"ES256","crit":["exp"],"kid":"ec1","typ":"JWT"}"#.utf8))
            let criticalInput = criticalHeader + "." + criticalParts[1]
            let criticalSignature = Base64URL.encode(Array(try provider.ec.signature(for: Array(criticalInput.utf8)).rawRepresentation))
            let criticalAnswer = try await alice.with(bearer: criticalInput + "." + criticalSignature)
                .send(.get, "/api/appattest/challenge", template: "/api/appattest/challenge")
            #expect(criticalAnswer.status == 401, "crit")
            for (name, token) in bad {
                let answer = try await alice.with(bearer: token).send(.get, "/api/appattest/challenge", template: "/api/appattest/challenge")
                #expect(answer.status == 401 && answer.errorCode == "unauthenticated", "\(name): \(answer.status)")
            }

            // RS256 and EdDSA tokens are accepted too; a token without sid binds no session.
            for signer in [TestIdentityProvider.Signer.rs256, .eddsa] {
                let client = anonymous.with(bearer: try provider.token(TestIdentityProvider.claims(user: "carol", sid: nil), signer: signer))
                let (carolKey, answer) = try await Self.register(client, form: Self.form(user: "carol", session: nil))
                #expect(answer.status == 200, "\(signer)")
                #expect(try await Self.assert(client, keyID: carolKey, form: Self.form(user: "carol", session: nil)).status == 200)
            }
        }
        try await OpenAPIConformance.check(harness.recorder)
    }

    @Test("a trusted backend: a missing or wrong secret is 401; either of two rotated secrets works and the body's username acts")
    func trustedBackend() async throws {
        let secrets = [String(repeating: "a", count: 40), String(repeating: "b", count: 64)]
        var harness = try ServiceHarness()
        harness.configuration.callerAuthentication = .trustedBackend(try BackendSecrets(fileText: "# rotated\n\(secrets[0])\n\n  \(secrets[1])  \n"))
        try await harness.run { anonymous in
            for bearer in [nil, "wrong", secrets[0] + "x", String(secrets[0].dropLast())] as [String?] {
                let answer = try await anonymous.with(bearer: bearer).send(
                    .get, "/api/appattest/challenge?username=alice", template: "/api/appattest/challenge")
                #expect(answer.status == 401 && answer.errorCode == "unauthenticated", "\(bearer ?? "none")")
            }
            for (index, secret) in secrets.enumerated() {
                let backend = anonymous.with(bearer: secret)
                let (_, registered) = try await Self.register(backend, form: Self.form(user: "user\(index)", session: nil), username: "user\(index)")
                #expect(registered.status == 200)
            }
        }
        #expect(throws: CallerAuthenticationError.self) { _ = try BackendSecrets(fileText: "short\n") }
        #expect(throws: CallerAuthenticationError.self) { _ = try BackendSecrets(fileText: "# nothing\n\n") }
    }

    @Test("keys over a user's life: beyond the limit the least recently used is revoked; operators list and revoke; a revoked key is 401 key_revoked")
    func keyLifecycle() async throws {
        let adminSecret = String(repeating: "z", count: 48)
        var harness = try ServiceHarness()
        harness.configuration.flows.maximumKeysPerUser = 2
        harness.configuration.adminSecrets = try BackendSecrets(fileText: adminSecret)
        try await harness.run { client in
            var keys: [String] = []
            for index in 1...3 {
                let (keyID, answer) = try await ServiceHarness.register(client, form: ServiceHarness.form())
                #expect(answer.status == 200 && answer.json?["recentRegistrations"] == .number(Double(index)))
                keys.append(keyID)
            }
            let first = try await Self.assert(client, keyID: keys[0], form: ServiceHarness.form(), username: "alice")
            #expect(first.status == 401 && first.errorCode == "key_revoked")
            #expect(try await Self.assert(client, keyID: keys[2], form: ServiceHarness.form(), username: "alice").status == 200)

            // The admin API: its own credential, never the callers'.
            for bearer in [nil, "wrong"] as [String?] {
                let answer = try await client.with(bearer: bearer).send(.get, "/admin/users/alice/keys", template: "/admin/users/alice/keys")
                #expect(answer.status == 401)
            }
            let admin = client.with(bearer: adminSecret)
            let listing = try await admin.send(.get, "/admin/users/alice/keys", template: "/admin/users/alice/keys")
            #expect(listing.status == 200)
            #expect(listing.json?["activeKeys"] == .number(2) && listing.json?["recentRegistrations"] == .number(3))
            if case .array(let entries)? = listing.json?["keys"] { #expect(entries.count == 3) } else { Issue.record("no keys array") }
            let revoked = try await admin.send(.post, "/admin/keys/\(keys[1])/revoke", template: "/admin/keys/revoke")
            #expect(revoked.status == 200)
            let second = try await Self.assert(client, keyID: keys[1], form: ServiceHarness.form(), username: "alice")
            #expect(second.status == 401 && second.errorCode == "key_revoked")
            let unknown = try await admin.send(
                .post, "/admin/keys/\(Base64URL.encode([UInt8](repeating: 7, count: 32)))/revoke", template: "/admin/keys/revoke")
            #expect(unknown.status == 404 && unknown.errorCode == "unknown_key")
            #expect(try await admin.send(.get, "/admin/users/bob%00x/keys", template: "/admin/users/x/keys").status == 400)
        }
    }

    @Test("rate limits per user and per address: 429 rate_limited with Retry-After; X-Forwarded-For only through trusted hops")
    func rateLimits() async throws {
        // Windows are fixed and aligned to the clock: a pinned clock (the real now) keeps every
        // request of a check in one window, however slowly a loaded machine runs them.
        let pinned = Date()
        var harness = try ServiceHarness()
        harness.configuration.now = { pinned }
        harness.configuration.rateLimits = RateLimits(perUser: 3, perAddress: 5, window: 60, trustedProxyHops: 0)
        try await harness.run { client in
            for _ in 0..<3 {
                #expect(try await client.send(.get, "/api/appattest/challenge?username=alice", template: "/api/appattest/challenge").status == 200)
            }
            let limited = try await client.send(.get, "/api/appattest/challenge?username=alice", template: "/api/appattest/challenge")
            #expect(limited.status == 429 && limited.errorCode == "rate_limited")
            let retryAfter = try #require(limited.headers[.retryAfter].flatMap { Int($0) })
            #expect((1...60).contains(retryAfter))
            // bob has his own budget, but the address's (5) runs out: a forged X-Forwarded-For is ignored.
            let forged = client.with(bearer: nil, headers: [HTTPField.Name("X-Forwarded-For")!: "203.0.113.9"])
            #expect(try await forged.send(.get, "/api/appattest/challenge?username=bob", template: "/api/appattest/challenge").status == 200)
            let byAddress = try await forged.send(.get, "/api/appattest/challenge?username=carol", template: "/api/appattest/challenge")
            #expect(byAddress.status == 429, "the address's budget of 5 is spent (4 counted, and the refused one)")
        }
        // With rotating challenges every /assert answer issues one: it spends the challenge budget.
        var rotating = try ServiceHarness(rotate: true)
        rotating.configuration.now = { pinned }
        rotating.configuration.rateLimits = RateLimits(perUser: 2, perAddress: 100, window: 60, trustedProxyHops: 0)
        try await rotating.run { (client: ServiceHarness.Client) async throws in
            let garbage: [(String, JSONValue)] = [
                ("username", Self.text("dave")), ("keyId", Self.text("AA")), ("assertion", Self.text("AA")),
                ("form", ServiceHarness.form(user: "dave")),
            ]
            #expect(try await client.post("/api/appattest/assert", garbage).status != 429)
            #expect(try await client.post("/api/appattest/assert", garbage).status != 429)
            #expect(try await client.post("/api/appattest/assert", garbage).status == 429)
        }
        // A trusted backend is every user's one address: only per-user limits apply to it.
        var backend = try ServiceHarness()
        let secret = String(repeating: "k", count: 40)
        backend.configuration.callerAuthentication = .trustedBackend(try BackendSecrets(fileText: secret))
        backend.configuration.now = { pinned }
        backend.configuration.rateLimits = RateLimits(perUser: 2, perAddress: 2, window: 60, trustedProxyHops: 0)
        try await backend.run { (client: ServiceHarness.Client) async throws in
            let authenticated = client.with(bearer: secret)
            for user in ["u1", "u2", "u3", "u4"] {
                #expect(
                    try await authenticated.send(.get, "/api/appattest/challenge?username=\(user)", template: "/api/appattest/challenge").status
                        == 200)
            }
        }
        var proxied = try ServiceHarness()
        proxied.configuration.now = { pinned }
        proxied.configuration.rateLimits = RateLimits(perUser: 100, perAddress: 2, window: 60, trustedProxyHops: 1)
        let forwardedFor = try #require(HTTPField.Name("X-Forwarded-For"))
        try await proxied.run { (client: ServiceHarness.Client) async throws in
            for address in ["198.51.100.1", "198.51.100.2"] {
                let behindProxy = client.with(bearer: nil, headers: [forwardedFor: "10.9.9.9, \(address)"])
                for _ in 0..<2 {
                    #expect(try await behindProxy.send(.get, "/api/appattest/challenge", template: "/api/appattest/challenge").status == 200)
                }
                #expect(try await behindProxy.send(.get, "/api/appattest/challenge", template: "/api/appattest/challenge").status == 429)
            }
        }
    }

    /// A JWKS of P-256 keys by kid, with `extra` entries (raw JSON objects) beside them.
    static func keySet(_ keys: [(kid: String, key: P256.Signing.PrivateKey)], extra: [String] = []) -> [UInt8] {
        var entries = keys.map { kid, key -> String in
            let point = Array(key.publicKey.x963Representation)
            return
                #"{"kty":"EC","crv":"P-256","use":"sig","alg":"ES256","kid":"\#(kid)","x":"\#(Base64URL.encode(point[1..<33]))","y":"\#(Base64URL.encode(point[33...]))"}"#
        }
        entries += extra
        return Array(#"{"keys":[\#(entries.joined(separator: ","))]}"#.utf8)
    }

    /// A mutable source for the verifier: what the provider publishes now.
    final class Published: @unchecked Sendable {
        private let lock = NSLock()
        private var bytes: [UInt8]
        init(_ bytes: [UInt8]) { self.bytes = bytes }
        func set(_ bytes: [UInt8]) { self.lock.withLock { self.bytes = bytes } }
        func get() -> [UInt8] { self.lock.withLock { self.bytes } }
    }

    /// A clock the test moves.
    final class Clock: @unchecked Sendable {
        private let lock = NSLock()
        private var date = Date()
        func now() -> Date { self.lock.withLock { self.date } }
        func advance(_ seconds: TimeInterval) { self.lock.withLock { self.date += seconds } }
    }

    @Test(
        "a key set with foreign keys beside the signing keys is read key by key, and a routine rotation's new key verifies after the refresh interval"
    )
    func foreignKeysAndRotation() async throws {
        let provider = try TestIdentityProvider()
        let next = P256.Signing.PrivateKey()
        let foreign = [
            #"{"kty":"RSA","kid":"enc","use":"enc","alg":"RSA-OAEP-256","n":"sXch","e":"AQAB"}"#,
            #"{"kty":"EC","kid":"ecdh","crv":"P-256","alg":"ECDH-ES+A256KW","x":"WKn-ZIGevcwGIyyrzFoZNBdaq9_TsqzGl96oc0CWuis","y":"y77t-RvAHRKTsSGdIYUfweuOvwrvDD-Q3Hv5J0fSKbE"}"#,
            #"{"kty":"OKP","kid":"x","crv":"X25519","x":"hSDwCYkwp1R0i33ctD73Wg2_Og0mOBr066SpjqqbTmo"}"#,
            #"{"kty":"EC","kid":"k1","crv":"secp256k1","x":"AA","y":"AA"}"#,
            #"{"kid":"certificate","x5c":["MIIB"]}"#,
            #"{"kty":"oct","kid":"hmac","k":"c2VjcmV0"}"#,
            #""not a key""#,
        ]
        let published = Published(Self.keySet([("ec1", provider.ec)], extra: foreign))
        let clock = Clock()
        let verifier = IdentityProviderVerifier(
            configuration: .init(issuer: TestIdentityProvider.issuer, audience: TestIdentityProvider.audience),
            source: { published.get() }, now: { clock.now() }
        )
        try await verifier.refresh()
        #expect(try await verifier.verify(try provider.token(TestIdentityProvider.claims(now: clock.now()))).user == "alice")
        // The rotation: the provider publishes the next key beside the old one.
        published.set(Self.keySet([("ec1", provider.ec), ("ec2", next)], extra: foreign))
        let rotated = try provider.token(TestIdentityProvider.claims(user: "bob", now: clock.now()), kid: "ec2", with: next)
        await #expect(throws: CallerAuthenticationError(code: .unauthenticated, reason: "")) {
            _ = try await verifier.verify(rotated)  // within the refresh interval: not fetched yet
        }
        clock.advance(61)
        let later = try provider.token(TestIdentityProvider.claims(user: "bob", now: clock.now()), kid: "ec2", with: next)
        #expect(try await verifier.verify(later).user == "bob")
        // A set with no usable key is a failed refresh: the keys held stay in use.
        published.set(Self.keySet([], extra: foreign))
        await #expect(throws: (any Error).self) { try await verifier.refresh() }
        #expect(try await verifier.verify(later).user == "bob")
        // The one change that makes a skipped key usable: use sig instead of enc.
        let encrypting = P256.Signing.PrivateKey()
        let point = Array(encrypting.publicKey.x963Representation)
        let asSignature =
            #"{"kty":"EC","crv":"P-256","kid":"ec3","x":"\#(Base64URL.encode(point[1..<33]))","y":"\#(Base64URL.encode(point[33...]))","use":"#
        published.set(Self.keySet([("ec1", provider.ec)], extra: [asSignature + #""enc"}"#]))
        clock.advance(61)
        try await verifier.refresh()
        let third = try provider.token(TestIdentityProvider.claims(now: clock.now()), kid: "ec3", with: encrypting)
        await #expect(throws: CallerAuthenticationError(code: .unauthenticated, reason: "")) { _ = try await verifier.verify(third) }
        published.set(Self.keySet([("ec1", provider.ec)], extra: [asSignature + #""sig"}"#]))
        try await verifier.refresh()
        #expect(try await verifier.verify(third).user == "alice")
    }
}
