//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
public import FormAttestForm
public import WebAuthn

/// Why a flow rejected a request: a stable `code` (such as `nonce_mismatch`, `replay`,
/// `timestamp_outside_window`), the ``Category`` an adapter maps to a status, and a reason.
public struct FlowError: Error, Sendable, CustomStringConvertible {
    /// The kind of failure; the HTTP layer maps each to one status in one place.
    public enum Category: String, Sendable, Hashable {
        /// The request or one of its documents is malformed (400).
        case malformedInput
        /// Apple's checks failed: the data is not a genuine, matching attestation or assertion (401).
        case verificationFailed
        /// The keyId is unknown or not this user's: the client must attest a key (401).
        case keyMismatch
        /// The form was signed in another session than the caller's (403).
        case callerMismatch
        /// The form lacks a signature the factor policy requires for it (403).
        case factorMissing
        /// The form, key or challenge was used already (409).
        case conflict
        /// A policy refused an otherwise valid request: time window, binding, challenge (422).
        case policy
        /// The key must be attested again (428).
        case requiresReattestation
        /// The store failed; nothing was changed (503).
        case storeUnavailable
        /// A service FormAttest calls (Apple's receipt exchange) failed; nothing was changed (502).
        case upstreamUnavailable
        /// A budget of the caller's is spent for this window; nothing was changed (429, `Retry-After`).
        case rateLimited
    }

    /// What failed: the flows' own codes, or the code of the verifier's, a form rule's, a
    /// store's or the receipt exchange's error the flow met, by the same identifier.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The flows' own codes, each with the category it is raised with.
        fileprivate enum Own: String, Hashable, Sendable, CaseIterable {
            case invalidRequest = "invalid_request"
            case invalidJSON = "invalid_json"
            case challengeRequired = "challenge_required"
            case clientDataHashMismatch = "client_data_hash_mismatch"
            case keyMismatch = "key_mismatch"
            case keyAlreadyRegistered = "key_already_registered"
            case counterOutOfOrder = "counter_out_of_order"
            case requiresReattestation = "requires_reattestation"
            case keyAttestationUnverifiable = "key_attestation_unverifiable"
            case receiptStale = "receipt_stale"
            case receiptChanged = "receipt_changed"
            case storeCorrupt = "store_corrupt"
            case rateLimited = "rate_limited"
            case appAttestRequired = "app_attest_required"
            case passkeyRequired = "passkey_required"
            case userVerificationRequired = "user_verification_required"
            case passkeysDisabled = "passkeys_disabled"
            case passkeyMismatch = "passkey_mismatch"
            case passkeyRevoked = "passkey_revoked"
            case passkeyApprovalRequired = "passkey_approval_required"
            case passkeyAlreadyRegistered = "passkey_already_registered"

            /// What the code means, in a line.
            var summary: String {
                switch self {
                case .invalidRequest: "a request field is missing, of the wrong type, or not valid (such as a username with a control character)"
                case .invalidJSON: "the request body is not strict JSON"
                case .challengeRequired: "the service requires a server challenge and the form has none"
                case .clientDataHashMismatch: "the claimed clientDataHash is not SHA-256 of the canonical form"
                case .keyMismatch: "the keyId is unknown, or another user's: no attested key signs for this user"
                case .keyAlreadyRegistered: "this keyId is registered already"
                case .counterOutOfOrder:
                    "the assertion is validly signed but its counter is not above the key's last accepted one because a later form was accepted first (it arrived first, or another request advanced the counter between this one's read and its write); refused, nothing changed, the key kept"
                case .requiresReattestation: "the key is too old, or its signed counter went backwards as the counter rule retires (then for good)"
                case .keyAttestationUnverifiable:
                    "evidence records are on and this key's registration cannot support a verifiable one (its attestation was not kept, or its receipt does not verify; a passkey's registration was not kept); nothing changed"
                case .receiptStale: "Apple's new receipt was created outside the accepted age"
                case .receiptChanged: "the stored receipt changed while it was being refreshed"
                case .storeCorrupt: "a stored record cannot be read; nothing was changed"
                case .rateLimited:
                    "too many requests for this user, backend or client address in the window (without caller authentication an assertion counts against its user once the key's signature verified)"
                case .appAttestRequired: "the factor policy requires an App Attest assertion for this form and the request has none"
                case .passkeyRequired: "the factor policy requires a passkey assertion for this form and the request has none"
                case .userVerificationRequired:
                    "the factor policy requires a passkey assertion with user verification (UV) for this form, and the assertion's UV flag is not set"
                case .passkeysDisabled: "the request carries a passkey and this service has no passkey settings (relying party id, origins)"
                case .passkeyMismatch: "the passkey's credential id is unknown, or another user's"
                case .passkeyRevoked: "the passkey was revoked (by an operator, or as the least recently used beyond the per-user limit)"
                case .passkeyApprovalRequired:
                    "the user has a passkey, and a new one is registered only with an assertion of it (user verification) over the registration's challenge"
                case .passkeyAlreadyRegistered: "this credential id is registered already"
                }
            }
            var category: Category {
                switch self {
                case Self.invalidRequest, Self.invalidJSON: .malformedInput
                case Self.challengeRequired: .policy
                case Self.clientDataHashMismatch, Self.receiptStale: .verificationFailed
                case Self.keyMismatch: .keyMismatch
                case Self.keyAlreadyRegistered, Self.counterOutOfOrder, Self.receiptChanged: .conflict
                case Self.requiresReattestation, Self.keyAttestationUnverifiable: .requiresReattestation
                case Self.storeCorrupt: .storeUnavailable
                case Self.rateLimited: .rateLimited
                case Self.appAttestRequired, Self.passkeyRequired, Self.userVerificationRequired, Self.passkeyApprovalRequired: .factorMissing
                case Self.passkeysDisabled: .policy
                case Self.passkeyMismatch, Self.passkeyRevoked: .keyMismatch
                case Self.passkeyAlreadyRegistered: .conflict
                }
            }
        }

        /// The stable `snake_case` identifier the API and the command line print.
        public let identifier: String

        fileprivate init(_ own: Own) { self.identifier = own.rawValue }
        /// The verifier's code, unchanged.
        public init(_ code: AppAttestError.Code) { self.identifier = code.identifier }
        /// A form rule's code, unchanged.
        public init(_ code: FormError.Code) { self.identifier = code.identifier }
        /// A store's code, unchanged (``FlowError/init(_:)-(StoreError)`` renames two for clients).
        public init(_ code: StoreError.Code) { self.identifier = code.identifier }
        /// The receipt exchange's code, unchanged.
        public init(_ code: ReceiptExchangeError.Code) { self.identifier = code.identifier }
        /// The passkey verifier's code, unchanged.
        public init(_ code: WebAuthnError.Code) { self.identifier = code.identifier }

        public var description: String { self.identifier }

        /// What one of the flows' own codes means, in a line (docs/errors.md is generated from
        /// it); `nil` for a code the flows pass on from the verifier, the form rules, the stores
        /// or the receipt exchange, whose own types say it.
        public var summary: String? { Own(rawValue: self.identifier)?.summary }

        /// The flows' own codes with the category each is raised with (docs/errors.md lists them).
        public static var own: [(code: Code, category: Category)] { Own.allCases.map { (Code($0), $0.category) } }

        /// A request field is missing or malformed.
        public static let invalidRequest = Code(Own.invalidRequest)
        /// The request body is not strict JSON.
        public static let invalidJSON = Code(Own.invalidJSON)
        /// The configuration requires a server challenge and the form has none.
        public static let challengeRequired = Code(Own.challengeRequired)
        /// The form's challenge is not base64url, unknown, used or expired (the store's code,
        /// which the flows raise too: one type declares each wire code).
        public static let challengeInvalid = Code(StoreError.Code.challengeInvalid)
        /// The claimed clientDataHash is not SHA-256 of the canonical form.
        public static let clientDataHashMismatch = Code(Own.clientDataHashMismatch)
        /// The keyId is unknown or another user's.
        public static let keyMismatch = Code(Own.keyMismatch)
        /// The key was revoked (the store's code).
        public static let keyRevoked = Code(StoreError.Code.keyRevoked)
        /// The keyId is registered already (the store's `duplicate_key`, as clients see it).
        public static let keyAlreadyRegistered = Code(Own.keyAlreadyRegistered)
        /// A validly signed form whose counter is not above the key's stored one because a later
        /// form was accepted first (delivered out of order, or another request advanced the counter
        /// between the read and the commit: the store's `stale_counter`): refused, the key kept;
        /// sign the form again. (The verifier's `counter_not_increasing`, 401, is a counter it
        /// refuses by itself, such as a pooled key's first assertion at counter 0.)
        public static let counterOutOfOrder = Code(Own.counterOutOfOrder)
        /// The form was accepted before (the store's code).
        public static let replay = Code(StoreError.Code.replay)
        /// The key must be attested again.
        public static let requiresReattestation = Code(Own.requiresReattestation)
        /// With evidence records on, the key's registration cannot support a verifiable record
        /// (its attestation was not kept, or its receipt does not verify): attest a new key.
        public static let keyAttestationUnverifiable = Code(Own.keyAttestationUnverifiable)
        /// Apple's new receipt is outside the accepted age.
        public static let receiptStale = Code(Own.receiptStale)
        /// Another refresh stored a receipt first.
        public static let receiptChanged = Code(Own.receiptChanged)
        /// A stored record is not what the store may hold.
        public static let storeCorrupt = Code(Own.storeCorrupt)
        /// A budget is spent for this window (the user's assertions, checked once the key's
        /// signature verified): retry after `Retry-After` seconds.
        public static let rateLimited = Code(Own.rateLimited)
        /// The factor policy requires an App Attest assertion for this form and the request has none.
        public static let appAttestRequired = Code(Own.appAttestRequired)
        /// The factor policy requires a passkey assertion for this form and the request has none.
        public static let passkeyRequired = Code(Own.passkeyRequired)
        /// The factor policy requires user verification (the UV flag) for this form and the
        /// passkey assertion does not have it.
        public static let userVerificationRequired = Code(Own.userVerificationRequired)
        /// A passkey request to a service without passkey settings (relying party id and origins).
        public static let passkeysDisabled = Code(Own.passkeysDisabled)
        /// The passkey's credential id is unknown or another user's.
        public static let passkeyMismatch = Code(Own.passkeyMismatch)
        /// The passkey was revoked.
        public static let passkeyRevoked = Code(Own.passkeyRevoked)
        public static let passkeyApprovalRequired = Code(Own.passkeyApprovalRequired)
        /// The credential id is registered already (the store's `duplicate_key` for a passkey).
        public static let passkeyAlreadyRegistered = Code(Own.passkeyAlreadyRegistered)
    }

    public let code: Code
    public let category: Category
    public let reason: String
    /// A fresh challenge for the retry, when the configuration rotates challenges.
    public internal(set) var nextChallenge: IssuedChallenge?
    /// With ``Category/rateLimited``: the seconds until the window ends.
    public let retryAfter: Int?

    public init(code: Code, category: Category, reason: String, nextChallenge: IssuedChallenge? = nil) {
        self.code = code
        self.category = category
        self.reason = reason
        self.nextChallenge = nextChallenge
        self.retryAfter = nil
    }

    /// A spent budget: 429 `rate_limited` with `Retry-After: retryAfter`.
    public init(rateLimitedFor retryAfter: Int, reason: String) {
        self.code = .rateLimited
        self.category = .rateLimited
        self.reason = reason
        self.nextChallenge = nil
        self.retryAfter = max(1, retryAfter)
    }

    public var description: String { "\(self.code): \(self.reason)" }

    static func keyMismatch(_ reason: String) -> FlowError {
        FlowError(code: .keyMismatch, category: .keyMismatch, reason: reason)
    }

    static func requiresReattestation(_ reason: String) -> FlowError {
        FlowError(code: .requiresReattestation, category: .requiresReattestation, reason: reason)
    }

    /// Codes of the verifier that describe malformed input rather than a failed check.
    private static let malformedVerifierCodes: Set<AppAttestError.Code> = [
        .malformedAttestation, .attestationTooLarge, .unsupportedFormat,
        .malformedAuthenticatorData, .malformedCertificate, .malformedAssertion, .assertionTooLarge,
        .invalidPublicKey, .invalidClientDataHash,
    ]

    /// The verifier's error as the flows report it (malformed input or a failed check).
    public init(_ error: AppAttestError) {
        self.init(
            code: Code(error.code),
            category: Self.malformedVerifierCodes.contains(error.code) ? .malformedInput : .verificationFailed,
            reason: error.reason
        )
    }

    /// Codes of the passkey verifier that describe malformed input rather than a failed check.
    private static let malformedWebAuthnCodes: Set<WebAuthnError.Code> = [
        .responseTooLarge, .malformedResponse, .malformedClientData, .malformedAttestation, .malformedAuthenticatorData,
        .malformedCertificate, .credentialIDTooLong, .invalidPublicKey, .unsupportedFormat,
    ]

    /// The passkey verifier's error as the flows report it (malformed input or a failed check).
    public init(_ error: WebAuthnError) {
        self.init(
            code: Code(error.code),
            category: Self.malformedWebAuthnCodes.contains(error.code) ? .malformedInput : .verificationFailed,
            reason: error.reason
        )
    }

    /// A form rule's error as the flows report it.
    public init(_ error: FormError) {
        let category: Category
        switch error.code {
        case .timestampOutsideWindow, .bindingMismatch, .missingField: category = .policy
        case .sessionMismatch: category = .callerMismatch
        default: category = .malformedInput
        }
        self.init(code: Code(error.code), category: category, reason: error.reason)
    }

    /// A store's error as the flows report it.
    public init(_ error: StoreError) {
        let category: Category
        switch error.code {
        case .unavailable: category = .storeUnavailable
        case .replay, .duplicateKey, .staleCounter, .duplicateChallenge: category = .conflict
        case .challengeInvalid: category = .policy
        case .passkeyExists: category = .factorMissing
        default: category = .keyMismatch
        }
        let code: Code
        switch error.code {
        case .duplicateKey: code = .keyAlreadyRegistered
        case .staleCounter: code = .counterOutOfOrder
        case .revoked: code = .passkeyRevoked
        case .passkeyExists: code = .passkeyApprovalRequired
        case .keyRevoked: code = .keyRevoked
        case .unknownKey: code = .keyMismatch
        default: code = Code(error.code)
        }
        self.init(code: code, category: category, reason: error.reason)
    }
}
