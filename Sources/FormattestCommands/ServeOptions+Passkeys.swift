//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestFlows
import FormAttestServer
import WebAuthn

extension ServeOptions {
    /// `passkey-rp-id`, `passkey-origin`, `factor-policy` and `max-passkeys-per-user` into the
    /// service's configuration. A policy that needs a passkey on a service without passkey
    /// settings would refuse those forms forever: that is a usage error at start, as is one of the
    /// two passkey settings without the other.
    static func applyPasskeySettings(_ settings: ServeSettings.Resolved, to configuration: inout ServerConfiguration) throws {
        let relyingPartyID = settings.textIfSet("passkey-rp-id")
        let origins = settings.list("passkey-origin")
        switch (relyingPartyID, origins.isEmpty) {
        case (let relyingPartyID?, false):
            // Settings that could never match a client's are refused here, not per request.
            if let problem = WebAuthnPolicy.problem(relyingPartyID: relyingPartyID) {
                throw UsageError("--passkey-rp-id (\(settings.source("passkey-rp-id"))): \(problem).")
            }
            for origin in origins {
                if let problem = WebAuthnPolicy.problem(origin: origin, relyingPartyID: relyingPartyID) {
                    throw UsageError("--passkey-origin (\(settings.source("passkey-origin"))): \(problem).")
                }
            }
            configuration.passkeys = WebAuthnPolicy(relyingPartyID: relyingPartyID, allowedOrigins: Set(origins))
        case (nil, true):
            configuration.passkeys = nil
        case (_?, true):
            throw UsageError("--passkey-rp-id (\(settings.source("passkey-rp-id"))) needs at least one --passkey-origin.")
        case (nil, false):
            throw UsageError("--passkey-origin (\(settings.source("passkey-origin"))) needs --passkey-rp-id.")
        }
        // Checked when the settings were read (the setting's own check), the default too.
        let policy = try FactorPolicy(setting: settings.text("factor-policy"))
        if policy.mayRequirePasskey && configuration.passkeys == nil {
            throw UsageError(
                "--factor-policy (\(settings.source("factor-policy"))) requires passkeys, and no --passkey-rp-id and --passkey-origin are set: those forms could never be accepted."
            )
        }
        configuration.flows.factorPolicy = policy
        configuration.flows.maximumPasskeysPerUser = settings.integer("max-passkeys-per-user")
    }
}
