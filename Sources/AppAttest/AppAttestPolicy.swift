//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import X509

/// What a deployment accepts: its app ids, Apple environments, trust anchors and, for iOS 27
/// devices, distribution categories.
public struct AppAttestPolicy: Sendable {
    /// Which iOS 27 validation categories (`apple_validation_category_01`) are accepted.
    public enum ValidationCategories: Sendable, Hashable {
        /// Any category, or none.
        case any
        /// Only these exact category values. Attestations without the iOS 27 extension map
        /// (every device before iOS 27) are accepted only when `allowAbsent` is true.
        ///
        /// Assertions are checked only when they carry a category: live iOS 27 assertions have
        /// been seen both with and without the map.
        case only(Set<[UInt8]>, allowAbsent: Bool)
    }

    /// App ids (`TEAMID.bundleID`) whose SHA-256 may appear as rpIdHash. The verified result names
    /// the one that matched.
    public var appIDs: [String]
    /// Accepted environments. An empty set accepts nothing.
    public var environments: Set<AppAttestEnvironment>
    /// Trust anchors for the certificate chain. Default: Apple App Attestation Root CA alone.
    ///
    /// - Warning: Add another anchor (such as the simulator's test root) only in tests and demos:
    ///   whoever holds its key can mint attestations this verifier accepts.
    public var trustAnchors: [Certificate]
    /// iOS 27 validation categories accepted. Default: ``ValidationCategories/any``.
    public var validationCategories: ValidationCategories
    /// Trust anchors for receipts. Default: Apple Root CA - G3 alone (``AppleRootCAG3``).
    public var receiptTrustAnchors: [Certificate]
    /// Whether an attestation whose receipt does not verify is rejected. Apple's steps do not
    /// include the receipt, so the default is `false`; the result is reported either way
    /// (``VerifiedAttestation/receiptCheck``).
    public var requireValidReceipt: Bool

    /// Creates a policy.
    ///
    /// - Parameters:
    ///   - appIDs: accepted app ids; at least one.
    ///   - environments: accepted environments; choose deliberately (a production server usually
    ///     accepts ``AppAttestEnvironment/production`` alone).
    ///   - trustAnchors: roots the x5c chain must reach; Apple's by default.
    ///   - validationCategories: iOS 27 distribution categories accepted.
    ///   - receiptTrustAnchors: roots a receipt's signer must reach; Apple Root CA - G3 by default.
    ///   - requireValidReceipt: reject attestations whose receipt does not verify.
    public init(
        appIDs: [String],
        environments: Set<AppAttestEnvironment>,
        trustAnchors: [Certificate] = [AppleAppAttestationRoot.certificate],
        validationCategories: ValidationCategories = .any,
        receiptTrustAnchors: [Certificate] = [AppleRootCAG3.certificate],
        requireValidReceipt: Bool = false
    ) {
        self.appIDs = appIDs
        self.environments = environments
        self.trustAnchors = trustAnchors
        self.validationCategories = validationCategories
        self.receiptTrustAnchors = receiptTrustAnchors
        self.requireValidReceipt = requireValidReceipt
    }
}
