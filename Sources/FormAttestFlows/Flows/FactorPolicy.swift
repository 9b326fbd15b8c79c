//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
public import FormAttestForm

/// What signatures a form needs before it is accepted: an App Attest assertion (the genuine app on
/// a genuine device signed these bytes), a passkey assertion (the user's authenticator signed
/// them), a passkey assertion with user verification (the person unlocked it: PIN or biometrics).
///
/// A request may carry more than its form needs: every signature it carries is verified, and any
/// that fails refuses the form.
public struct FactorRequirement: Sendable, Hashable, CustomStringConvertible {
    public var appAttest: Bool
    public var passkey: Bool
    /// A passkey assertion with the UV flag set (implies ``passkey``).
    public var userVerification: Bool

    public init(appAttest: Bool, passkey: Bool, userVerification: Bool = false) {
        self.appAttest = appAttest
        self.passkey = passkey || userVerification
        self.userVerification = userVerification
    }

    /// An App Attest assertion, nothing else: what every form needed before passkeys.
    public static let appAttest = FactorRequirement(appAttest: true, passkey: false)

    /// The setting's spelling: `app-attest`, `passkey`, `passkey-uv`, joined by `+`.
    public var description: String {
        var parts: [String] = []
        if self.appAttest { parts.append("app-attest") }
        if self.userVerification {
            parts.append("passkey-uv")
        } else if self.passkey {
            parts.append("passkey")
        }
        return parts.joined(separator: "+")
    }
}

/// The service's factor policy: a requirement for every form, and requirements by the form's
/// `action` member (a string).
///
/// The default, ``appAttestOnly``, is the behaviour before passkeys: an App Attest assertion for
/// every form, and a passkey never needed.
///
/// Written as a setting: rules separated by `,`, each `ACTION=FACTORS` or `*=FACTORS` (every form
/// without a rule of its own), FACTORS being `app-attest`, `passkey` or `passkey-uv` joined by `+`:
/// `*=app-attest,transfer=app-attest+passkey-uv`. A rule left out of the setting keeps the default
/// (`*=app-attest`).
public struct FactorPolicy: Sendable, Hashable, CustomStringConvertible {
    /// What a form without a rule of its own needs.
    public var defaultRequirement: FactorRequirement
    /// What a form whose `action` is the key needs.
    public var actions: [String: FactorRequirement]

    public init(defaultRequirement: FactorRequirement = .appAttest, actions: [String: FactorRequirement] = [:]) {
        self.defaultRequirement = defaultRequirement
        self.actions = actions
    }

    /// App Attest for every form (the default).
    public static let appAttestOnly = FactorPolicy()

    /// What `form` needs: its action's rule, else the default.
    ///
    /// With rules by action, a form whose `action` is missing or not a string gets the strictest
    /// requirement of the policy (every factor any rule names), never the default: the code that
    /// makes the App Attest key sign also writes the form, and must not shed a rule by leaving the
    /// member out or writing `["transfer"]`. An action that is a string is matched exactly (code
    /// units); a spelling no rule names (`Transfer`, `transfer `) gets the default, so a policy
    /// whose default is the weak one is only as strong as the backend's use of the same exact
    /// string (docs/passkeys.md: prefer a strict default and named exceptions).
    public func requirement(for form: SignedForm) -> FactorRequirement {
        guard let action = form.value["action"]?.stringValue else {
            return self.actions.isEmpty ? self.defaultRequirement : self.strictest
        }
        return self.actions[action] ?? self.defaultRequirement
    }

    /// Every factor the default or any rule names.
    public var strictest: FactorRequirement {
        self.actions.values.reduce(self.defaultRequirement) { strictest, rule in
            FactorRequirement(
                appAttest: strictest.appAttest || rule.appAttest, passkey: strictest.passkey || rule.passkey,
                userVerification: strictest.userVerification || rule.userVerification)
        }
    }

    /// Whether any form may need a passkey.
    public var mayRequirePasskey: Bool {
        self.defaultRequirement.passkey || self.actions.values.contains { $0.passkey }
    }

    /// Parses the setting (see the type's documentation).
    /// - Throws: ``FlowError/Code/invalidRequest`` naming the first problem (the command line
    ///   prints it and exits with a usage error).
    public init(setting: String) throws(FlowError) {
        self.init()
        var seen: Set<String> = []
        for rule in setting.split(separator: ",", omittingEmptySubsequences: false) {
            let parts = rule.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].isEmpty else {
                throw Self.invalid("rule \"\(rule)\" is not ACTION=FACTORS")
            }
            let action = String(parts[0])
            guard seen.insert(action).inserted else { throw Self.invalid("action \"\(action)\" has two rules") }
            var appAttest = false
            var passkey = false
            var userVerification = false
            for factor in parts[1].split(separator: "+", omittingEmptySubsequences: false) {
                switch factor {
                case "app-attest": appAttest = true
                case "passkey": passkey = true
                case "passkey-uv": userVerification = true
                default: throw Self.invalid("factor \"\(factor)\" in rule \"\(rule)\" is not app-attest, passkey or passkey-uv")
                }
            }
            let requirement = FactorRequirement(appAttest: appAttest, passkey: passkey, userVerification: userVerification)
            if action == "*" {
                self.defaultRequirement = requirement
            } else {
                self.actions[action] = requirement
            }
        }
    }

    private static func invalid(_ reason: String) -> FlowError {
        FlowError(code: .invalidRequest, category: .malformedInput, reason: "factor policy: " + reason)
    }

    /// The setting's spelling, rules sorted by action after the default.
    public var description: String {
        (["*=\(self.defaultRequirement)"] + self.actions.keys.sorted().map { "\($0)=\(self.actions[$0] ?? self.defaultRequirement)" })
            .joined(separator: ",")
    }
}
