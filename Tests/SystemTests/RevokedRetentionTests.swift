//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestForm
import FormAttestTestSupport
import Foundation
import Testing

/// Issue 31 class 4, R5-F7: revoked keys no longer stay for ever. Through the built binary
/// (`formattest-dev serve --dev-simulator`, a SQLite store, the default retention of 30 days):
/// keys revoked by the per-user limit stay while the retention runs, and go, with their
/// registrations, once it has passed; a purged key is then refused exactly as a key never
/// registered.
struct RevokedRetentionTests {
    typealias Service = HostileStateTests.Service

    /// Runs `sql` on the store's file with the sqlite3 shell (beside the running service: SQLite
    /// serializes the writers, and the shell waits up to 60 s for the lock); its output.
    static func sqlite(_ path: String, _ sql: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
        process.arguments = ["-cmd", ".timeout 60000", path, sql]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        try #require(process.terminationStatus == 0, "sqlite3: \(text)")
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The bytes of the store's pages in use (the file less its free pages; SQLite reuses freed
    /// pages and does not shrink the file).
    static func usedBytes(_ path: String) throws -> Int {
        let numbers = try Self.sqlite(
            path, "SELECT (page_count - freelist_count) * page_size FROM pragma_page_count, pragma_freelist_count, pragma_page_size;")
        return try #require(Int(numbers), "\(numbers)")
    }

    @Test("R5-F7: revoked keys stay for the retention, then go with their registrations; a purged key is refused as an unknown one")
    func revokedKeysExpire() async throws {
        let secretFiles = try TemporaryFiles()
        let secret = String(repeating: "b", count: 48)
        let secretFile = try secretFiles.write(secret + "\n", named: "admin-secrets")
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: secretFile)
        let service = try Service([
            "--admin-secret-file", secretFile, "--max-keys-per-user", "2", "--purge-interval", "0.2",
            // The per-user and per-address budgets are not what this test is about.
            "--rate-limit-per-user", "1000", "--rate-limit-per-address", "1000",
        ])
        defer { service.stop() }
        try #require(await Formattest.waitForListener(port: service.port, process: service.server.process))
        let store = service.files.directory.appendingPathComponent("store.sqlite").path

        // 12 registrations with at most 2 active keys: 10 revoked by the limit, each with its registration.
        // The first registration by hand, to send its request again once its key is purged.
        let firstForm = Service.form("1.00", action: "device-registration")
        let (_, simulated) = try await service.send("POST", "/api/dev/simulate", ["action": "attest", "form": firstForm])
        let firstKey = try #require(simulated["keyId"] as? String)
        let firstRegistration: [String: Any] = [
            "username": "alice", "keyId": firstKey, "attestationObject": simulated["attestationObject"] ?? "", "form": firstForm,
        ]
        let (firstStatus, firstAnswer) = try await service.send("POST", "/api/appattest/attest", firstRegistration)
        try #require(firstStatus == 200, "\(firstAnswer)")
        var keyIDs = [firstKey]
        for _ in 1..<12 { keyIDs.append(try await service.register()) }
        func listing() async throws -> [String: Any] {
            let (status, page) = try await service.send("GET", "/admin/users/alice/keys?limit=1", bearer: secret)
            try #require(status == 200, "\(page)")
            return page
        }
        var page = try await listing()
        #expect(page["totalKeys"] as? Int == 12 && page["activeKeys"] as? Int == 2, "\(page)")

        // A revoked key is refused as revoked (401 key_revoked); a keyId never registered, as unknown.
        let revoked = keyIDs[0]
        let (revokedStatus, revokedAnswer) = try await service.send(
            "POST", "/api/appattest/assert", try await service.signed(revoked, amount: "1.00"))
        #expect(revokedStatus == 401 && service.code(revokedAnswer) == "key_revoked", "\(revokedStatus) \(revokedAnswer)")
        var unknownForm = try await service.signed(keyIDs[11], amount: "1.50")
        unknownForm["keyId"] = String(repeating: "A", count: 43)
        let (unknownStatus, unknownAnswer) = try await service.send("POST", "/api/appattest/assert", unknownForm)
        let unknownCode = try #require(service.code(unknownAnswer), "\(unknownAnswer)")
        #expect(unknownStatus == 401 && unknownCode == "key_mismatch", "as docs/threat-model.md says: \(unknownStatus) \(unknownAnswer)")

        // Within the retention (revoked just now; the purge has run about 10 times): all kept.
        try await Task.sleep(for: .seconds(2))
        page = try await listing()
        #expect(page["totalKeys"] as? Int == 12, "revoked less than 30 days ago: kept; \(page)")
        let before = try Self.usedBytes(store)

        // 31 days pass for the keys: their registration, use and revocation times move back 31
        // days in the store (the service's clock is the real one; nothing else is changed).
        let month = 31 * 86_400
        _ = try Self.sqlite(
            store,
            "UPDATE keys SET created_at = created_at - \(month), last_used = last_used - \(month), revoked_at = revoked_at - \(month);"
        )
        let deadline = Date().addingTimeInterval(30)
        repeat {
            page = try await listing()
            if page["totalKeys"] as? Int == 2 { break }
            try await Task.sleep(for: .milliseconds(200))
        } while Date() < deadline
        #expect(page["totalKeys"] as? Int == 2 && page["activeKeys"] as? Int == 2, "\(page)")
        #expect(try Self.sqlite(store, "SELECT count(*) FROM key_registrations;") == "2", "the registrations went with their keys")
        let after = try Self.usedBytes(store)
        #expect(after < before, "\(before) -> \(after)")
        print("R5-F7 figures: 12 keys (10 revoked) \(before) B in use; after the purge, 2 keys: \(after) B")

        // A purged key: refused exactly as a keyId never registered (status and code).
        let (purgedStatus, purgedAnswer) = try await service.send("POST", "/api/appattest/assert", try await service.signed(revoked, amount: "2.00"))
        #expect(
            purgedStatus == unknownStatus && service.code(purgedAnswer) == unknownCode,
            "\(purgedStatus) \(purgedAnswer) vs \(unknownStatus) \(unknownAnswer)")
        // Its own registration, sent again, does not bring it back: the form was accepted once
        // (409 replay while its record lives; later, the form is past --form-max-age).
        let (againStatus, againAnswer) = try await service.send("POST", "/api/appattest/attest", firstRegistration)
        #expect(againStatus == 409 && service.code(againAnswer) == "replay", "\(againStatus) \(againAnswer)")
        #expect(try await listing()["totalKeys"] as? Int == 2)
        // The active keys still sign.
        let (activeStatus, activeAnswer) = try await service.send(
            "POST", "/api/appattest/assert", try await service.signed(keyIDs[11], amount: "3.00"))
        #expect(activeStatus == 200, "\(activeAnswer)")
    }

    @Test("R5-F7: revoked passkeys go too, with their registrations, once the retention has passed; a purged passkey is refused as an unknown one")
    func revokedPasskeysExpire() async throws {
        let service = try Service([
            "--passkey-rp-id", PasskeyDevice.rpID, "--passkey-origin", PasskeyDevice.origin, "--factor-policy", "*=passkey",
            "--max-passkeys-per-user", "1", "--purge-interval", "0.2", "--challenge-lifetime", "900",
            "--rate-limit-per-user", "1000", "--rate-limit-per-address", "1000",
        ])
        defer { service.stop() }
        try #require(await Formattest.waitForListener(port: service.port, process: service.server.process))
        let store = service.files.directory.appendingPathComponent("store.sqlite").path

        // Three passkeys, at most one active: the first two are revoked by the limit (each new one
        // approved by the one before, the active one).
        var devices = (UInt8(1)...3).map { PasskeyDevice(id: $0) }
        for index in devices.indices {
            let (optionsStatus, options) = try await service.send("GET", "/api/passkeys/options?username=alice")
            try #require(optionsStatus == 200, "\(options)")
            let challengeText = try #require((options["challenge"] as? [String: Any])?["challenge"] as? String)
            let challenge = try #require(Base64URL.decode(challengeText))
            let credential = try JSONSerialization.jsonObject(with: Data(devices[index].register(challenge: challenge)))
            var body: [String: Any] = [
                "username": "alice", "challenge": challengeText, "userHandle": options["userHandle"] ?? "", "credential": credential,
            ]
            if index > 0 { body["approval"] = try JSONSerialization.jsonObject(with: Data(devices[index - 1].sign(challenge: challenge))) }
            let (status, answer) = try await service.send("POST", "/api/passkeys/register", body)
            try #require(status == 200, "\(answer)")
        }
        #expect(try Self.sqlite(store, "SELECT count(*) FROM passkeys WHERE revoked_at IS NOT NULL;") == "2")
        func confirm(_ device: inout PasskeyDevice, _ amount: String) async throws -> (Int, [String: Any]) {
            let form = Service.form(amount)
            let hash = try SignedForm(jsonBytes: Array(try JSONSerialization.data(withJSONObject: form))).clientDataHash
            let passkey = try JSONSerialization.jsonObject(with: Data(device.sign(challenge: hash)))
            return try await service.send("POST", "/api/appattest/assert", ["username": "alice", "passkey": passkey, "form": form])
        }
        let (revokedStatus, revokedAnswer) = try await confirm(&devices[0], "1.00")
        #expect(revokedStatus == 401 && service.code(revokedAnswer) == "passkey_revoked", "\(revokedStatus) \(revokedAnswer)")
        var stranger = PasskeyDevice(id: 9)
        let (unknownStatus, unknownAnswer) = try await confirm(&stranger, "1.50")
        let unknownCode = try #require(service.code(unknownAnswer), "\(unknownAnswer)")
        #expect(unknownStatus == 401 && unknownCode == "passkey_mismatch", "as docs/threat-model.md says: \(unknownStatus) \(unknownAnswer)")

        // 31 days pass for the passkeys (their times move back in the store).
        let month = 31 * 86_400
        _ = try Self.sqlite(
            store, "UPDATE passkeys SET created_at = created_at - \(month), last_used = last_used - \(month), revoked_at = revoked_at - \(month);")
        let deadline = Date().addingTimeInterval(30)
        var left = ""
        repeat {
            left = try Self.sqlite(store, "SELECT count(*) FROM passkeys;")
            if left == "1" { break }
            try await Task.sleep(for: .milliseconds(200))
        } while Date() < deadline
        #expect(left == "1")
        #expect(try Self.sqlite(store, "SELECT count(*) FROM passkey_registrations;") == "1", "the registrations went with their passkeys")

        let (purgedStatus, purgedAnswer) = try await confirm(&devices[0], "2.00")
        #expect(
            purgedStatus == unknownStatus && service.code(purgedAnswer) == unknownCode,
            "\(purgedStatus) \(purgedAnswer) vs \(unknownStatus) \(unknownAnswer)")
        let (activeStatus, activeAnswer) = try await confirm(&devices[2], "3.00")
        #expect(activeStatus == 200, "\(activeAnswer)")
    }
}
