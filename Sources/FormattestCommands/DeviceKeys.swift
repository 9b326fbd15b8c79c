//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import ArgumentParser
import CanonicalJSON
import FormAttestFlows
import FormAttestForm
import FormAttestResponses
import FormAttestServer
import Foundation
import RFC3339

/// `formattest device-keys`: the App Attest keys users registered, for operators.
struct DeviceKeys: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "device-keys",
        abstract: "List a user's App Attest keys, or revoke one (its next assertion gets 401 key_revoked).",
        subcommands: [List.self, Revoke.self]
    )

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "A user's keys, active and revoked, oldest first.")
        @OptionGroup var storeOptions: StoreOptions
        @Option(help: "The user.") var user: String
        @Flag(help: "Print JSON (the admin API's shape).") var json = false

        func validate() throws {
            if let problem = Username.problem(self.user) { throw ValidationError("--user: \(problem)") }
        }

        func run() async throws {
            let keys: [StoredKey]
            do {
                keys = try await self.storeOptions.open().keys(username: self.user)
            } catch let error as StoreError {
                throw UsageError("the store is unavailable: \(error.reason)")
            }
            if self.json {
                print(String(decoding: try KeyListingResponse(username: self.user, keys: keys, now: Date()).canonicalBytes(), as: UTF8.self))
                return
            }
            print("\(keys.count) key(s) of \(self.user.debugDescription)")
            for key in keys {
                let state =
                    key.revokedAt.map { "revoked \(RFC3339UTC.format($0, fractionDigits: 0))" }
                    ?? (key.reattestationRequired ? "requires re-attestation" : "active")
                print(
                    "  \(Base64URL.encode(key.keyID))  \(key.environment)  counter \(key.counter)  created \(RFC3339UTC.format(key.createdAt, fractionDigits: 0))  \(state)"
                )
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a key (idempotent).")
        @OptionGroup var storeOptions: StoreOptions
        @Option(name: .customLong("key-id"), help: "The keyId (base64url or base64).") var keyID: String

        func run() async throws {
            guard let keyID = Base64URL.decode(self.keyID), keyID.count == 32 else {
                throw UsageError("--key-id must be 32 bytes, base64url or base64")
            }
            do {
                try await self.storeOptions.open().revokeKey(keyID: keyID, at: Date())
            } catch let error as StoreError where error.code == .unknownKey {
                throw UsageError("no key has this keyId")
            } catch let error as StoreError {
                throw UsageError("the store is unavailable: \(error.reason)")
            }
            print("revoked \(Base64URL.encode(keyID))")
        }
    }
}
