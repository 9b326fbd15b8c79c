//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestTestSupport
import Foundation
import Testing

/// Two verifier instances in separate processes sharing one store.
struct SharedStoreTests {
    static func simulate(_ command: String, store: String, database: String, _ extra: [String]) -> [String] {
        ["simulate", command, "--store", store, "--mongodb-database", database, "--seed", "77"] + extra
    }

    static func outcome(_ result: Formattest.Result) throws -> (accepted: Bool, code: String?) {
        // A command that printed no JSON failed: say how (its exit and stderr), not only that.
        guard let json = try? result.jsonObject() else {
            Issue.record("no JSON answer (exit \(result.status)): stdout \(result.stdout.debugDescription), stderr \(result.stderr)")
            return (false, nil)
        }
        return (json["accepted"] as? Bool ?? false, json["code"] as? String)
    }

    @Test("MongoDB: a form replayed to the second instance is rejected; counters stay monotonic across both")
    func twoInstancesOnMongoDB() async throws {
        let uri = try MongoTestServer.uri.get()
        let database = "twoinstances_\(UUID().uuidString.prefix(8))"
        let register = try await Formattest.run(Self.simulate("register", store: uri, database: database, []))
        #expect(try Self.outcome(register).accepted, "\(register.stdout) \(register.stderr)")

        // The same signed form (same counter) sent to both instances at once: exactly one accepts
        // it, and the other calls it a replay, whichever wins the race.
        let timestamp = ISO8601DateFormatter().string(from: Date())
        let form = ["--nonce", "transfer-1", "--timestamp", timestamp, "--counter", "1"]
        let first = try Formattest.start(Self.simulate("assert", store: uri, database: database, form))
        let second = try Formattest.start(Self.simulate("assert", store: uri, database: database, form))
        let outcomes = await [try Self.outcome(first.finish()), try Self.outcome(second.finish())]
        #expect(outcomes.filter(\.accepted).count == 1, "\(outcomes)")
        #expect(outcomes.first(where: { !$0.accepted })?.code == "replay")

        // Instance A accepts counter 5; instance B then refuses counter 3, validly signed, as a late
        // counter (a reordered delivery, under the default tolerant counter rule): the key is kept,
        // and B accepts counter 6.
        let a5 = try await Formattest.run(Self.simulate("assert", store: uri, database: database, ["--nonce", "t5", "--counter", "5"]))
        #expect(try Self.outcome(a5).accepted)
        let b3 = try await Formattest.run(Self.simulate("assert", store: uri, database: database, ["--nonce", "t3", "--counter", "3"]))
        #expect(try Self.outcome(b3).accepted == false)
        #expect(try Self.outcome(b3).code == "counter_out_of_order")
        let b6 = try await Formattest.run(Self.simulate("assert", store: uri, database: database, ["--nonce", "t6", "--counter", "6"]))
        #expect(try Self.outcome(b6).accepted)
        // Counter 6 signed again over another form, on the other instance: one counter signed twice
        // (a clone). Neither instance trusts the key again, whatever counter it signs next.
        let a6 = try await Formattest.run(Self.simulate("assert", store: uri, database: database, ["--nonce", "t6-other", "--counter", "6"]))
        #expect(try Self.outcome(a6).code == "requires_reattestation")
        let b7 = try await Formattest.run(Self.simulate("assert", store: uri, database: database, ["--nonce", "t7", "--counter", "7"]))
        #expect(try Self.outcome(b7).code == "requires_reattestation")
    }

    @Test("SQLite: two processes sharing one file reject a replay across them")
    func twoInstancesOnSQLite() async throws {
        let files = try TemporaryFiles()
        let store = "sqlite:" + files.directory.appendingPathComponent("shared.sqlite").path
        let register = try await Formattest.run(["simulate", "register", "--store", store, "--seed", "78"])
        #expect(try Self.outcome(register).accepted, "\(register.stdout) \(register.stderr)")
        let timestamp = ISO8601DateFormatter().string(from: Date())
        let form = ["--nonce", "s-1", "--timestamp", timestamp]
        let first = try Formattest.start(["simulate", "assert", "--store", store, "--seed", "78", "--counter", "1"] + form)
        let second = try Formattest.start(["simulate", "assert", "--store", store, "--seed", "78", "--counter", "1"] + form)
        let outcomes = await [try Self.outcome(first.finish()), try Self.outcome(second.finish())]
        #expect(outcomes.filter(\.accepted).count == 1, "\(outcomes)")
        #expect(outcomes.first(where: { !$0.accepted })?.code == "replay")
    }

    @Test("an unreachable MongoDB fails closed: exit 2 with the reason, no hang")
    func unreachable() async throws {
        let started = Date()
        let result = try await Formattest.run([
            "simulate", "assert", "--store", "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=300", "--counter", "1",
        ])
        #expect(result.status == 2)
        #expect(result.stderr.contains("unavailable"))
        #expect(!result.stderr.contains("DEBUG"))
        // A guard against hanging, not a speed claim: it includes waiting for a dispatch thread
        // while the rest of the suite runs (66 s was seen on a machine loaded to 8 on 2 cores).
        #expect(Date().timeIntervalSince(started) < 180)
    }
}
