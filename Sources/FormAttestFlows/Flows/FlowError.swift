//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
public import FormAttestForm

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
    }

    public let code: String
    public let category: Category
    public let reason: String
    /// A fresh challenge for the retry, when the configuration rotates challenges.
    public internal(set) var nextChallenge: IssuedChallenge?

    public init(code: String, category: Category, reason: String, nextChallenge: IssuedChallenge? = nil) {
        self.code = code
        self.category = category
        self.reason = reason
        self.nextChallenge = nextChallenge
    }

    public var description: String { "\(self.code): \(self.reason)" }

    static func keyMismatch(_ reason: String) -> FlowError {
        FlowError(code: "key_mismatch", category: .keyMismatch, reason: reason)
    }

    static func requiresReattestation(_ reason: String) -> FlowError {
        FlowError(code: "requires_reattestation", category: .requiresReattestation, reason: reason)
    }

    /// Codes of the verifier that describe malformed input rather than a failed check.
    private static let malformedVerifierCodes: Set<AppAttestError.Code> = [
        .malformedCBOR, .malformedAttestation, .attestationTooLarge, .unsupportedFormat,
        .malformedAuthenticatorData, .malformedCertificate, .malformedAssertion, .assertionTooLarge,
        .invalidPublicKey, .invalidClientDataHash,
    ]

    /// The verifier's error as the flows report it (malformed input or a failed check).
    public init(_ error: AppAttestError) {
        self.init(
            code: error.code.identifier,
            category: Self.malformedVerifierCodes.contains(error.code) ? .malformedInput : .verificationFailed,
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
        self.init(code: error.code.identifier, category: category, reason: error.reason)
    }

    /// A store's error as the flows report it.
    public init(_ error: StoreError) {
        let category: Category
        switch error.code {
        case .unavailable: category = .storeUnavailable
        case .replay, .duplicateKey, .staleCounter, .duplicateChallenge: category = .conflict
        case .challengeInvalid: category = .policy
        default: category = .keyMismatch
        }
        let code: String
        switch error.code {
        case .duplicateKey: code = "key_already_registered"
        case .staleCounter: code = "counter_not_increasing"
        case .unknownKey: code = "key_mismatch"
        default: code = error.code.identifier
        }
        self.init(code: code, category: category, reason: error.reason)
    }
}
