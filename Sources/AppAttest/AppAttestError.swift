//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// The one error type of the `AppAttest` module.
///
/// Every rejection carries a ``Code`` that names the failed step (stable, machine readable, the
/// `snake_case` identifier is what the command line and the HTTP API print) and a human-readable
/// ``reason``. Two errors compare equal when their codes are equal, so tests can write
/// `#expect(throws: AppAttestError.nonceMismatch)`-style checks on the code alone.
///
/// ``Code`` is a struct over a private enum so that adding a code is not a breaking change.
public struct AppAttestError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What failed. Compare with the static members, for example ``Code/nonceMismatch``.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Backing: String, Hashable, Sendable, CaseIterable {
            case malformedAttestation = "malformed_attestation"
            case attestationTooLarge = "attestation_too_large"
            case unsupportedFormat = "unsupported_format"
            case malformedAuthenticatorData = "malformed_authenticator_data"
            case malformedCertificate = "malformed_certificate"
            case certificateExpired = "certificate_expired"
            case certificateNotYetValid = "certificate_not_yet_valid"
            case certificateChainInvalid = "certificate_chain_invalid"
            case nonceExtensionInvalid = "nonce_extension_invalid"
            case nonceMismatch = "nonce_mismatch"
            case keyIDMismatch = "key_id_mismatch"
            case appIDMismatch = "app_id_mismatch"
            case counterNotZero = "counter_not_zero"
            case aaguidInvalid = "aaguid_invalid"
            case environmentNotAllowed = "environment_not_allowed"
            case credentialIDMismatch = "credential_id_mismatch"
            case publicKeyMismatch = "public_key_mismatch"
            case validationCategoryNotAllowed = "validation_category_not_allowed"
            case bundleVersionTooOld = "bundle_version_too_old"
            case cdHashNotAllowed = "cdhash_not_allowed"
            case extensionsRequired = "extensions_required"
            case accessControlMismatch = "access_control_mismatch"
            case invalidClientDataHash = "invalid_client_data_hash"
            case malformedAssertion = "malformed_assertion"
            case assertionTooLarge = "assertion_too_large"
            case invalidPublicKey = "invalid_public_key"
            case signatureInvalid = "signature_invalid"
            case counterNotIncreasing = "counter_not_increasing"
            case invalidPolicy = "invalid_policy"
            case receiptMalformed = "receipt_malformed"
            case receiptTooLarge = "receipt_too_large"
            case receiptSignatureInvalid = "receipt_signature_invalid"
            case receiptCertificateExpired = "receipt_certificate_expired"
            case receiptCertificateNotYetValid = "receipt_certificate_not_yet_valid"
            case receiptChainInvalid = "receipt_chain_invalid"
            case receiptAppIDMismatch = "receipt_app_id_mismatch"
            case receiptCertificateMismatch = "receipt_certificate_mismatch"
            case receiptClientHashMismatch = "receipt_client_hash_mismatch"
            case receiptTypeUnexpected = "receipt_type_unexpected"
        }

        fileprivate let backing: Backing

        fileprivate init(_ backing: Backing) {
            self.backing = backing
        }

        /// Every code of the verifier (the error table in docs/errors.md is generated from them).
        public static var allCases: [Code] { Backing.allCases.map(Code.init) }

        /// The stable `snake_case` identifier, such as `nonce_mismatch`.
        public var identifier: String { self.backing.rawValue }

        /// What the code means, in a line (docs/errors.md is generated from it).
        public var summary: String {
            switch self.backing {
            case .malformedAttestation: "the attestation object does not have the apple-appattest structure"
            case .attestationTooLarge: "the attestation object is over its size limit"
            case .unsupportedFormat: "the attestation's fmt is not apple-appattest"
            case .malformedAuthenticatorData: "the authenticator data is truncated or malformed"
            case .malformedCertificate: "a certificate of the x5c chain cannot be parsed"
            case .certificateExpired: "a certificate of the chain had expired at verification time"
            case .certificateNotYetValid: "a certificate of the chain was not yet valid at verification time"
            case .certificateChainInvalid: "the chain does not reach a trusted App Attest root"
            case .nonceExtensionInvalid: "the credential certificate's nonce extension is missing or malformed"
            case .nonceMismatch: "the nonce is not SHA-256(authenticatorData ‖ clientDataHash): the attestation is not for this form"
            case .keyIDMismatch: "the keyId is not SHA-256 of the attested public key"
            case .appIDMismatch: "the RP ID hash is not SHA-256 of an accepted App ID"
            case .counterNotZero: "an attestation's counter is not 0"
            case .aaguidInvalid: "the AAGUID is neither appattestdevelop nor appattest"
            case .environmentNotAllowed: "the key's environment (development or production) is not accepted"
            case .credentialIDMismatch: "the credential id is not the keyId"
            case .publicKeyMismatch: "the authenticator data's key is not the certificate's"
            case .validationCategoryNotAllowed: "the iOS 27 validation category is not accepted"
            case .bundleVersionTooOld: "the app's bundle version is below the minimum"
            case .cdHashNotAllowed: "the app's CDHash is not allowed (or missing when required)"
            case .extensionsRequired: "the iOS 27 validation category or bundle version is missing, and required"
            case .accessControlMismatch: "the macOS access-control extension is not the required one"
            case .invalidClientDataHash: "the clientDataHash is not 32 bytes"
            case .malformedAssertion: "the assertion is not a CBOR map of signature and authenticatorData"
            case .assertionTooLarge: "the assertion is over its size limit"
            case .invalidPublicKey: "the stored public key cannot be used"
            case .signatureInvalid: "the assertion's signature does not verify with the key"
            case .counterNotIncreasing: "the assertion's counter is not above the last accepted one (a replayed or cloned key)"
            case .invalidPolicy: "the server's verification policy is invalid (a configuration error)"
            case .receiptMalformed: "the App Attest receipt cannot be parsed"
            case .receiptTooLarge: "the receipt is over its size limit"
            case .receiptSignatureInvalid: "the receipt's signature does not verify"
            case .receiptCertificateExpired: "the receipt's certificate had expired"
            case .receiptCertificateNotYetValid: "the receipt's certificate was not yet valid"
            case .receiptChainInvalid: "the receipt's chain does not reach Apple Root CA - G3"
            case .receiptAppIDMismatch: "the receipt is for another App ID"
            case .receiptCertificateMismatch: "the receipt is for another key's certificate"
            case .receiptClientHashMismatch: "the receipt's client hash does not match"
            case .receiptTypeUnexpected: "the receipt's type is not the one expected"
            }
        }

        public var description: String { self.backing.rawValue }

        /// The attestation object does not have the `apple-appattest` structure.
        public static let malformedAttestation = Code(.malformedAttestation)
        /// The attestation object is larger than ``AppAttestLimits/maximumAttestationSize``.
        public static let attestationTooLarge = Code(.attestationTooLarge)
        /// `fmt` is not `apple-appattest`.
        public static let unsupportedFormat = Code(.unsupportedFormat)
        /// The authenticator data is truncated, has trailing bytes or a malformed part.
        public static let malformedAuthenticatorData = Code(.malformedAuthenticatorData)
        /// A certificate in `x5c` (or a trust anchor) is not a well-formed X.509 certificate.
        public static let malformedCertificate = Code(.malformedCertificate)
        /// Step 1: a certificate of the chain expired before the verification time.
        public static let certificateExpired = Code(.certificateExpired)
        /// Step 1: a certificate of the chain is not yet valid at the verification time.
        public static let certificateNotYetValid = Code(.certificateNotYetValid)
        /// Step 1: `x5c` does not chain to a trusted App Attest root.
        public static let certificateChainInvalid = Code(.certificateChainInvalid)
        /// Steps 2–4: the leaf lacks the nonce extension (1.2.840.113635.100.8.2) or it has another shape.
        public static let nonceExtensionInvalid = Code(.nonceExtensionInvalid)
        /// Step 4: SHA256(authData ‖ clientDataHash) differs from the nonce in the leaf certificate.
        public static let nonceMismatch = Code(.nonceMismatch)
        /// Step 5: SHA256 of the leaf's public key differs from the keyId.
        public static let keyIDMismatch = Code(.keyIDMismatch)
        /// Step 6 (and assertion step 4): rpIdHash is not SHA256 of an accepted app id.
        public static let appIDMismatch = Code(.appIDMismatch)
        /// Step 7: the attestation's counter is not 0.
        public static let counterNotZero = Code(.counterNotZero)
        /// Step 8: the aaguid is neither `appattestdevelop` nor `appattest` followed by seven zero bytes.
        public static let aaguidInvalid = Code(.aaguidInvalid)
        /// Step 8: the aaguid names an environment the policy does not accept.
        public static let environmentNotAllowed = Code(.environmentNotAllowed)
        /// Step 9: the credentialId in authData differs from the keyId.
        public static let credentialIDMismatch = Code(.credentialIDMismatch)
        /// Step 9: the COSE key in authData is not the leaf certificate's key.
        public static let publicKeyMismatch = Code(.publicKeyMismatch)
        /// iOS 27 extensions: the validation category is not one the policy accepts.
        public static let validationCategoryNotAllowed = Code(.validationCategoryNotAllowed)
        /// iOS 27 extensions: the bundle version is below the policy's minimum, or cannot be
        /// compared with it (not dot-separated digits).
        public static let bundleVersionTooOld = Code(.bundleVersionTooOld)
        /// iOS 27 extensions: the CDHash is not an allowed one (for its bundle version), is not of a
        /// type the policy can compare (SHA-256), or is absent although the policy requires it.
        public static let cdHashNotAllowed = Code(.cdHashNotAllowed)
        /// iOS 27 extensions: the policy requires the validation category and the bundle version,
        /// and the authenticator data lacks one of them.
        public static let extensionsRequired = Code(.extensionsRequired)
        /// macOS 27: the credential certificate's access-control extension (1.2.840.113635.100.8.6)
        /// is absent or differs from the value the policy requires.
        public static let accessControlMismatch = Code(.accessControlMismatch)
        /// The clientDataHash is empty or larger than the accepted maximum.
        public static let invalidClientDataHash = Code(.invalidClientDataHash)
        /// The assertion does not have the `{signature, authenticatorData}` structure.
        public static let malformedAssertion = Code(.malformedAssertion)
        /// The assertion is larger than ``AppAttestLimits/maximumAssertionSize``.
        public static let assertionTooLarge = Code(.assertionTooLarge)
        /// The public key given to verify an assertion is not a valid P-256 key.
        public static let invalidPublicKey = Code(.invalidPublicKey)
        /// Assertion step 3: the signature does not verify with the attested key.
        public static let signatureInvalid = Code(.signatureInvalid)
        /// Assertion step 5: the counter is not strictly greater than the stored one.
        public static let counterNotIncreasing = Code(.counterNotIncreasing)
        /// The verification policy itself is unusable (for example, no app id or no trust anchor).
        public static let invalidPolicy = Code(.invalidPolicy)
        /// The receipt is not a CMS SignedData carrying a well-formed App Attest payload.
        public static let receiptMalformed = Code(.receiptMalformed)
        /// The receipt is larger than ``AppAttestLimits/maximumReceiptSize``.
        public static let receiptTooLarge = Code(.receiptTooLarge)
        /// The receipt's signature does not verify with its signing certificate, or uses another algorithm.
        public static let receiptSignatureInvalid = Code(.receiptSignatureInvalid)
        /// The receipt's signing certificate expired before the verification time.
        public static let receiptCertificateExpired = Code(.receiptCertificateExpired)
        /// The receipt's signing certificate is not yet valid at the verification time.
        public static let receiptCertificateNotYetValid = Code(.receiptCertificateNotYetValid)
        /// The receipt's signing certificate does not chain to a receipt trust anchor (Apple Root CA - G3).
        public static let receiptChainInvalid = Code(.receiptChainInvalid)
        /// The receipt names another app id than the attestation it came with.
        public static let receiptAppIDMismatch = Code(.receiptAppIDMismatch)
        /// The receipt's attested certificate is not the attestation's credential certificate.
        public static let receiptCertificateMismatch = Code(.receiptCertificateMismatch)
        /// An attestation receipt's client hash is not the attestation's clientDataHash.
        public static let receiptClientHashMismatch = Code(.receiptClientHashMismatch)
        /// The receipt's type is not the one expected (ATTEST in an attestation).
        public static let receiptTypeUnexpected = Code(.receiptTypeUnexpected)
    }

    /// What failed.
    public let code: Code
    /// Why, in words meant for a log or an operator. Never contains secrets.
    public let reason: String
    /// Where the error was raised.
    public let file: String
    /// Where the error was raised.
    public let line: UInt

    /// Creates an error with an explicit code. Prefer the static factories.
    public init(code: Code, reason: String, file: String = #fileID, line: UInt = #line) {
        self.code = code
        self.reason = reason
        self.file = file
        self.line = line
    }

    public var description: String { "\(self.code.identifier): \(self.reason)" }

    public static func == (lhs: AppAttestError, rhs: AppAttestError) -> Bool { lhs.code == rhs.code }

    public func hash(into hasher: inout Hasher) { hasher.combine(self.code) }
}

extension AppAttestError {
    // Factories, one per code, so call sites read like the spec step they enforce.

    public static func malformedAttestation(_ reason: String, file: String = #fileID, line: UInt = #line) -> Self {
        Self(code: .malformedAttestation, reason: reason, file: file, line: line)
    }
    public static func malformedAuthenticatorData(
        _ reason: String,
        file: String = #fileID,
        line: UInt = #line
    ) -> Self {
        Self(code: .malformedAuthenticatorData, reason: reason, file: file, line: line)
    }
    public static func receiptMalformed(_ reason: String, file: String = #fileID, line: UInt = #line) -> Self {
        Self(code: .receiptMalformed, reason: reason, file: file, line: line)
    }
    public static func malformedAssertion(_ reason: String, file: String = #fileID, line: UInt = #line) -> Self {
        Self(code: .malformedAssertion, reason: reason, file: file, line: line)
    }
}
