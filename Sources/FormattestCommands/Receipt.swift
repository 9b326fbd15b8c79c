//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppleReceiptExchange
import ArgumentParser
import AsyncHTTPClient
import Crypto
import FormAttestFlows
import FormAttestResponses
import Foundation

struct Receipt: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Work with the receipts stored with attested keys.",
        subcommands: [Refresh.self]
    )

    struct Refresh: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Trade a key's stored receipt for a new one with a risk metric (Apple's receipt exchange).",
            discussion: """
                Sends the stored receipt to Apple with a JWT signed by your DeviceCheck key, verifies the
                answer (signature, chain to Apple Root CA - G3, app id, key, at most 5 minutes old) and
                stores it in place of the old one. Exit 0 refreshed or not modified, 1 refused (nothing
                stored), 2 usage or I/O error. See docs/inspector.md.
                """
        )

        @OptionGroup var storeOptions: StoreOptions

        @Option(name: .customLong("key-id"), help: "The key whose receipt to refresh, base64 or base64url.")
        var keyID: String

        @Option(name: .customLong("app-id"), help: "An accepted TEAMID.bundleID (repeatable).")
        var appIDs: [String] = []

        @Option(name: .customLong("team-id"), help: "Your team id (the JWT's iss).")
        var teamID: String

        @Option(name: .customLong("apple-key-id"), help: "The DeviceCheck key's id (the JWT's kid).")
        var appleKeyID: String

        @Option(name: .customLong("apple-key"), help: "The DeviceCheck private key (.p8, PEM).")
        var appleKey: String

        @Option(help: "Send to this URL instead of Apple's endpoint for the key's environment.")
        var endpoint: String?

        @Option(name: .customLong("receipt-root"), help: "A PEM receipt trust anchor instead of Apple Root CA - G3 (repeatable).")
        var receiptRoots: [String] = []

        @Option(help: "Seconds the exchange may take.")
        var timeout: Double = 10

        @Flag(help: "Print JSON.")
        var json = false

        func validate() throws {
            guard !self.appIDs.isEmpty else { throw ValidationError("Give at least one --app-id.") }
            guard (0.001...3600).contains(self.timeout) else { throw ValidationError("--timeout must be between 0.001 and 3600 seconds.") }
        }

        struct Report: Encodable {
            var refreshed: Bool
            var type: String?
            var riskMetric: Int?
            var creationTime: Date?
            var notBefore: Date?
            var expirationTime: Date?
            var error: Rejection.Detail?
        }

        func run() async throws {
            let keyID = try InputFile.decodeBase64(self.keyID, what: "--key-id")
            let privateKey: P256.Signing.PrivateKey
            do {
                privateKey = try P256.Signing.PrivateKey(pemRepresentation: try InputFile.readText(self.appleKey))
            } catch let error as UsageError {
                throw error
            } catch {
                throw UsageError("\(self.appleKey) is not a P-256 private key in PEM")
            }
            let anchors = try InputFile.readCertificates(self.receiptRoots, orDefault: AppAttestPolicy.appleReceiptTrustAnchors)
            let verifier = try AppAttestVerifier(
                policy: AppAttestPolicy(appIDs: self.appIDs, environments: Set(AppAttestEnvironment.allCases), receiptTrustAnchors: anchors)
            )
            let flows = FormFlows(verifier: verifier, store: try await self.storeOptions.open())
            var endpoints: [AppAttestEnvironment: String] = [
                .production: AppleReceiptExchangeClient.productionURL, .development: AppleReceiptExchangeClient.developmentURL,
            ]
            if let endpoint { endpoints = [.production: endpoint, .development: endpoint] }
            let client = AppleReceiptExchangeClient(
                httpClient: .shared,
                credentials: .init(teamID: self.teamID, keyID: self.appleKeyID, privateKey: privateKey),
                endpoints: endpoints,
                timeout: .milliseconds(Int64(self.timeout * 1000))
            )
            let report: Report
            do {
                let outcome = try await flows.refreshRiskMetric(keyID: keyID, using: client, now: Date())
                let payload = outcome.receipt.payload
                report = Report(
                    refreshed: outcome.refreshed, type: payload.type.rawValue, riskMetric: payload.riskMetric,
                    creationTime: payload.creationTime, notBefore: payload.notBefore, expirationTime: payload.expirationTime
                )
            } catch {
                report = Report(refreshed: false, error: .init(code: error.code.identifier, message: error.reason))
            }
            if self.json {
                print(try JSONOutput.string(report))
            } else if let error = report.error {
                print("refreshed: false\nerror: \(error.code): \(error.message)")
            } else {
                print("refreshed: \(report.refreshed)\ntype: \(report.type ?? "-")\nriskMetric: \(report.riskMetric.map(String.init) ?? "-")")
            }
            if report.error != nil { throw ExitCode(1) }
        }
    }
}
