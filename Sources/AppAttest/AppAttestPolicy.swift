//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import X509

/// What a deployment accepts: its app ids, Apple environments, trust anchors and, for devices on
/// iOS 27 / macOS 27 or later, the signals they add (distribution category, bundle version, CDHash,
/// the key's access control).
///
/// The signal options apply to attestations and to every assertion that carries the signal. A
/// signal that is absent is accepted, since devices before iOS 27 send none and live iOS 27
/// assertions were seen with and without the extension map, unless ``requireExtensions`` (the
/// category and the bundle version) or ``requireCDHash`` says otherwise. A signal that cannot be
/// read (a malformed map) is always refused; a bundle version that a minimum cannot be compared
/// with, or a CDHash of a type the allow list cannot be compared with, is refused by the policy
/// that needs it (fail closed).
public struct AppAttestPolicy: Sendable {
    /// Which validation categories (`apple_validation_category_01`) are accepted.
    public enum ValidationCategories: Sendable, Hashable {
        /// Any category.
        case any
        /// Only these categories. An attestation or assertion without a category is accepted
        /// unless ``AppAttestPolicy/requireExtensions`` is set.
        case only(Set<ValidationCategory>)

        /// Whether `category` is accepted.
        public func accepts(_ category: ValidationCategory) -> Bool {
            switch self {
            case .any: true
            case .only(let accepted): accepted.contains(category)
            }
        }
    }

    /// The CDHashes (`apple_cd_hash_hash_01`) accepted: the signed builds of the deployment's app.
    public struct CDHashAllowList: Sendable, Hashable {
        /// CDHashes accepted whatever the bundle version.
        public var anyVersion: Set<[UInt8]>
        /// CDHashes accepted only together with this bundle version (the one the same extension map
        /// carries), such as each release's builds. Versions compare numerically (`1.2 == 1.2.0`).
        public var byBundleVersion: [BundleVersion: Set<[UInt8]>]

        /// An allow list; both parts empty restricts nothing.
        public init(_ anyVersion: Set<[UInt8]> = [], byBundleVersion: [BundleVersion: Set<[UInt8]>] = [:]) {
            self.anyVersion = anyVersion
            self.byBundleVersion = byBundleVersion
        }

        /// Whether the list restricts anything.
        public var isEmpty: Bool { self.anyVersion.isEmpty && self.byBundleVersion.isEmpty }

        /// Whether `cdHash` is allowed, with the bundle version its map carries. (A CDHash is no
        /// secret: it is in the shipped binary, so plain comparison is fine.)
        public func allows(_ cdHash: [UInt8], bundleVersion: BundleVersion?) -> Bool {
            if self.anyVersion.contains(cdHash) { return true }
            guard let bundleVersion, let hashes = self.byBundleVersion[bundleVersion] else { return false }
            return hashes.contains(cdHash)
        }
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
    /// Validation categories accepted. Default: ``ValidationCategories/any``.
    public var validationCategories: ValidationCategories
    /// The lowest bundle version accepted (a forced upgrade), or `nil`. A bundle version that is
    /// not dot-separated digits cannot be compared and is refused while this is set.
    public var minimumBundleVersion: BundleVersion?
    /// The CDHashes accepted. Default: empty (any). While it restricts, only a SHA-256 CDHash
    /// (type 2) can match.
    public var allowedCDHashes: CDHashAllowList
    /// Refuse an attestation or assertion that carries no CDHash (every one must come from an app
    /// with the `CDhash` App Attest opt-in).
    public var requireCDHash: Bool
    /// Refuse an attestation or assertion without the iOS 27 signals (the validation category and
    /// the bundle version): for fleets that are all on iOS 27 or later. Live iOS 27 assertions
    /// without the extension map exist; this refuses them too.
    public var requireExtensions: Bool
    /// The exact DER value the credential certificate's access-control extension
    /// (1.2.840.113635.100.8.6, the key's ACL blob on macOS 27) must have, or `nil` for any.
    /// Attestations only: assertions carry no certificate.
    public var requiredAccessControl: [UInt8]?
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
    ///   - validationCategories: distribution categories accepted.
    ///   - minimumBundleVersion: the lowest bundle version accepted.
    ///   - allowedCDHashes: the CDHashes accepted.
    ///   - requireCDHash: refuse what carries no CDHash.
    ///   - requireExtensions: refuse what lacks the category or the bundle version.
    ///   - requiredAccessControl: the exact access-control extension value required.
    ///   - receiptTrustAnchors: roots a receipt's signer must reach; Apple Root CA - G3 by default.
    ///   - requireValidReceipt: reject attestations whose receipt does not verify.
    public init(
        appIDs: [String],
        environments: Set<AppAttestEnvironment>,
        trustAnchors: [Certificate] = AppAttestPolicy.appleTrustAnchors,
        validationCategories: ValidationCategories = .any,
        minimumBundleVersion: BundleVersion? = nil,
        allowedCDHashes: CDHashAllowList = CDHashAllowList(),
        requireCDHash: Bool = false,
        requireExtensions: Bool = false,
        requiredAccessControl: [UInt8]? = nil,
        receiptTrustAnchors: [Certificate] = AppAttestPolicy.appleReceiptTrustAnchors,
        requireValidReceipt: Bool = false
    ) {
        self.appIDs = appIDs
        self.environments = environments
        self.trustAnchors = trustAnchors
        self.validationCategories = validationCategories
        self.minimumBundleVersion = minimumBundleVersion
        self.allowedCDHashes = allowedCDHashes
        self.requireCDHash = requireCDHash
        self.requireExtensions = requireExtensions
        self.requiredAccessControl = requiredAccessControl
        self.receiptTrustAnchors = receiptTrustAnchors
        self.requireValidReceipt = requireValidReceipt
    }
}

extension AppAttestPolicy {
    /// What is wrong with `appID` as an App ID, or `nil` when it is one: `TEAMID.bundleID`, a
    /// 10-character team id of `A-Z` and `0-9`, a dot, and a bundle id that is not empty and holds
    /// no space or control character. An App ID without its team prefix (`com.example.app`) can
    /// never match an attestation, so a service configured with one would refuse every device.
    public static func appIDProblem(_ appID: String) -> String? {
        let scalars = Array(appID.unicodeScalars)
        guard scalars.count > 11, scalars[10] == "." else {
            return "\(appID.debugDescription) is not TEAMID.bundleID (a 10-character team id, a dot, the bundle id)"
        }
        guard scalars[..<10].allSatisfy({ ("A"..."Z").contains($0) || ("0"..."9").contains($0) }) else {
            return "\(appID.debugDescription) does not start with a team id of 10 characters A-Z or 0-9"
        }
        guard !scalars[11...].contains(where: { $0.value <= 0x20 || (0x7F...0x9F).contains($0.value) }) else {
            return "the bundle id of \(appID.debugDescription) holds a space or a control character"
        }
        return nil
    }
}

extension AppAttestPolicy {
    /// The default trust anchors for attestations: Apple App Attestation Root CA alone. Every
    /// default in the package (the policy's, the evidence verifier's, the CLI's without `--root`)
    /// is this one.
    public static var appleTrustAnchors: [Certificate] { [AppleAppAttestationRoot.certificate] }

    /// The default trust anchors for receipts: Apple Root CA - G3 alone (``AppleRootCAG3``).
    public static var appleReceiptTrustAnchors: [Certificate] { [AppleRootCAG3.certificate] }
}
