//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import CanonicalJSON
import FormAttestFlows
import FormAttestForm
import Foundation
import RFC3339
import Testing
import WebAuthn

/// A simulated device, its user, a store and the flows, at a pinned time.
struct FlowHarness {
    static let appID = "ABCDE12345.com.formattest.bank"
    static let now = Date(timeIntervalSince1970: 1_795_341_600)

    let authority: SimulatedAttestationAuthority
    let device: SimulatedDevice
    let store: any AttestationStore
    let flows: FormFlows

    init(
        store: any AttestationStore = MemoryAttestationStore(),
        configuration: FlowConfiguration = FlowConfiguration(),
        requireValidReceipt: Bool = false,
        appIDs: [String] = [Self.appID],
        environments: Set<AppAttestEnvironment> = [.production],
        deviceEnvironment: AppAttestEnvironment = .production,
        profile: SimulatedDevice.Profile = .beforeIOS27,
        webAuthn: WebAuthnVerifier? = nil,
        policy configure: (inout AppAttestPolicy) -> Void = { _ in }
    ) throws {
        self.authority = try SimulatedAttestationAuthority(seed: 5)
        self.device = SimulatedDevice(authority: self.authority, appID: Self.appID, environment: deviceEnvironment, seed: 11, profile: profile)
        self.store = store
        var policy = AppAttestPolicy(
            appIDs: appIDs,
            environments: environments,
            trustAnchors: [self.authority.rootCertificate],
            receiptTrustAnchors: [self.authority.receiptAuthority.rootCertificate],
            requireValidReceipt: requireValidReceipt
        )
        configure(&policy)
        let verifier = try AppAttestVerifier(policy: policy)
        self.flows = FormFlows(verifier: verifier, store: store, configuration: configuration, webAuthn: webAuthn)
    }

    /// A transfer form as the app would send it (not canonical: spaces and member order vary).
    static func form(
        user: String = "alice", amount: String = "10.00", at time: Date = now, nonce: String = "n-1", challenge: String? = nil, action: String? = nil
    ) -> [UInt8] {
        let challengeField = challenge.map { #", "challenge": "\#($0)""# } ?? ""
        let actionField = action.map { #", "action": "\#($0)""# } ?? ""
        return Array(
            #"{ "to": "bob", "amount": \#(amount), "username": "\#(user)", "timestamp": "\#(RFC3339UTC.format(time))", "nonce": "\#(nonce)"\#(challengeField)\#(actionField) }"#
                .utf8
        )
    }

    static func hash(_ form: [UInt8]) throws -> [UInt8] { try SignedForm(jsonBytes: form).clientDataHash }

    func attestRequest(key: SimulatedKey, form: [UInt8], user: String = "alice", options: SimulatedDevice.AttestationOptions = .init()) throws
        -> FormFlows.AttestRequest
    {
        FormFlows.AttestRequest(
            username: user,
            keyID: key.keyID,
            attestationObject: try self.device.attest(key, clientDataHash: Self.hash(form), at: Self.now, options: options),
            form: form
        )
    }

    /// An assertion by the harness's device, or by the same device playing `profile`.
    func assertRequest(
        key: SimulatedKey,
        form: [UInt8],
        counter: UInt32,
        user: String = "alice",
        profile: SimulatedDevice.Profile? = nil
    ) throws -> FormFlows.AssertRequest {
        var device = self.device
        if let profile { device.profile = profile }
        return FormFlows.AssertRequest(
            username: user,
            keyID: key.keyID,
            assertion: try device.assert(key, clientDataHash: Self.hash(form), counter: counter),
            form: form
        )
    }

    /// Registers `key` for `user` with a fresh form (its action `register-device`: a factor policy
    /// with rules by action gives a form without one every factor it names).
    @discardableResult
    func register(_ key: SimulatedKey, user: String = "alice", nonce: String = "register") async throws -> FormFlows.AttestOutcome {
        try await self.flows.attest(
            self.attestRequest(key: key, form: Self.form(user: user, nonce: nonce, action: "register-device"), user: user), now: Self.now)
    }
}

/// Expects a flow to fail with `code`.
func expectFlowError<T>(
    _ code: String, _ category: FlowError.Category? = nil, sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> T
) async {
    do {
        _ = try await body()
        Issue.record("expected \(code), the flow succeeded", sourceLocation: sourceLocation)
    } catch let error as FlowError {
        #expect(error.code.identifier == code, "\(error)", sourceLocation: sourceLocation)
        if let category { #expect(error.category == category, sourceLocation: sourceLocation) }
    } catch {
        Issue.record("expected \(code), got \(error)", sourceLocation: sourceLocation)
    }
}
