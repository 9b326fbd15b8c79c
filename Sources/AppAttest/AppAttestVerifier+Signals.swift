//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

extension AppAttestVerifier {
    /// The policy's checks of the iOS 27 / macOS 27 signals, the same for attestations and
    /// assertions. Each check applies when the signal is present; an absent one is refused only by
    /// ``AppAttestPolicy/requireExtensions`` or ``AppAttestPolicy/requireCDHash``. (A map that
    /// cannot be read never gets here: parsing refused it.)
    ///
    /// - Throws: ``AppAttestError/Code/extensionsRequired``,
    ///   ``AppAttestError/Code/validationCategoryNotAllowed``,
    ///   ``AppAttestError/Code/bundleVersionTooOld`` or ``AppAttestError/Code/cdHashNotAllowed``.
    func checkSignals(_ extensions: AuthenticatorExtensions?) throws(AppAttestError) {
        let policy = self.policy

        // Fleets all on iOS 27 or later: the category and the bundle version must be there.
        if policy.requireExtensions {
            var missing: [String] = []
            if extensions?.validationCategory == nil { missing.append("validation category") }
            if extensions?.bundleVersion == nil { missing.append("bundle version") }
            guard missing.isEmpty else {
                throw AppAttestError(
                    code: .extensionsRequired,
                    reason:
                        "no \(missing.joined(separator: " and ")) (\(extensions == nil ? "no extension map" : "not in the extension map")), and the policy requires the iOS 27 signals"
                )
            }
        }

        // The distribution category.
        if let category = extensions?.validationCategory, !policy.validationCategories.accepts(category) {
            throw AppAttestError(
                code: .validationCategoryNotAllowed,
                reason: "validation category \(category) is not accepted"
            )
        }

        // A minimum bundle version (forced upgrades).
        if let minimum = policy.minimumBundleVersion, let text = extensions?.bundleVersion {
            guard let version = BundleVersion(text) else {
                throw AppAttestError(
                    code: .bundleVersionTooOld,
                    reason: "bundle version \(text.debugDescription) is not dot-separated digits and cannot be compared with the minimum \(minimum)"
                )
            }
            guard version >= minimum else {
                throw AppAttestError(code: .bundleVersionTooOld, reason: "bundle version \(version) is below the minimum \(minimum)")
            }
        }

        // The CodeDirectory hash of the running binary.
        guard let cdHash = extensions?.cdHash else {
            if policy.requireCDHash {
                throw AppAttestError(code: .cdHashNotAllowed, reason: "no CDHash, and the policy requires one")
            }
            return
        }
        if !policy.allowedCDHashes.isEmpty {
            let type = extensions?.cdHashType
            guard type == AuthenticatorExtensions.cdHashTypeSHA256 else {
                throw AppAttestError(
                    code: .cdHashNotAllowed,
                    reason: "the CDHash is of type \(type.map(String.init) ?? "?"), and the allow list holds SHA-256 CDHashes (type 2)"
                )
            }
            guard policy.allowedCDHashes.allows(cdHash, bundleVersion: extensions?.parsedBundleVersion) else {
                let version = extensions?.bundleVersion.map { " with bundle version \($0.debugDescription)" } ?? ""
                throw AppAttestError(code: .cdHashNotAllowed, reason: "CDHash \(hex(cdHash))\(version) is not allowed")
            }
        }
    }

    /// macOS 27: the key's access control, when the policy requires an exact value.
    ///
    /// - Throws: ``AppAttestError/Code/accessControlMismatch``.
    func checkAccessControl(_ accessControl: [UInt8]?) throws(AppAttestError) {
        guard let required = self.policy.requiredAccessControl else { return }
        guard let accessControl else {
            throw AppAttestError(
                code: .accessControlMismatch,
                reason: "the credential certificate has no access-control extension (1.2.840.113635.100.8.6), and the policy requires one"
            )
        }
        guard constantTimeEquals(accessControl, required) else {
            throw AppAttestError(
                code: .accessControlMismatch,
                reason: "the credential certificate's access control (1.2.840.113635.100.8.6) differs from the required value"
            )
        }
    }
}
