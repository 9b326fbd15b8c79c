//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Foundation

/// Why ``AppAttestClient`` could not do what the app asked: the package's one error shape (a
/// ``Code`` that is stable and extensible, and a reason), as the verifier's `AppAttestError`.
///
/// The service's own error, when there was one, is in ``underlying`` (read it with
/// `DCErrorCode(_:)`); a refused re-attestation says until when in ``retryAfter``. Two errors
/// compare equal when their codes are equal.
public struct AppAttestClientError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What failed. Compare with the static members, for example ``Code/timeout``.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Backing: String, Hashable, Sendable, CaseIterable {
            case notSupported = "not_supported"
            case keyGeneration = "key_generation_failed"
            case attestation = "attestation_failed"
            case assertion = "assertion_failed"
            case invalidClientDataHash = "invalid_client_data_hash"
            case unknownError = "unknown_error"
            case timeout = "timeout"
            case registrationInProgress = "registration_in_progress"
            case reattestationLimited = "reattestation_limited"
            case challengeExpired = "challenge_expired"
        }

        fileprivate let backing: Backing

        fileprivate init(_ backing: Backing) {
            self.backing = backing
        }

        /// Every code of the client.
        public static var allCases: [Code] { Backing.allCases.map(Code.init) }

        /// The stable `snake_case` identifier, such as `timeout`.
        public var identifier: String { self.backing.rawValue }

        public var description: String { self.backing.rawValue }

        /// App Attest is not available (simulator, old device, unsupported platform).
        public static let notSupported = Code(.notSupported)
        /// `generateKey` failed (``AppAttestClientError/underlying`` has the service's error).
        public static let keyGeneration = Code(.keyGeneration)
        /// `attestKey` failed, or returned something unusable.
        public static let attestation = Code(.attestation)
        /// `generateAssertion` failed, or returned something unusable.
        public static let assertion = Code(.assertion)
        /// The clientDataHash is not exactly 32 bytes.
        public static let invalidClientDataHash = Code(.invalidClientDataHash)
        /// The service answered with neither a result nor an error.
        public static let unknownError = Code(.unknownError)
        /// The service did not answer within the timeout.
        public static let timeout = Code(.timeout)
        /// Another registration with a different clientDataHash is running.
        public static let registrationInProgress = Code(.registrationInProgress)
        /// Too many attestations recently: the re-attestation circuit breaker is open until
        /// ``AppAttestClientError/retryAfter``.
        public static let reattestationLimited = Code(.reattestationLimited)
        /// The server challenge expired (beyond the grace period) before it could be used.
        public static let challengeExpired = Code(.challengeExpired)
    }

    public let code: Code
    public let reason: String
    /// The service's error (or an ``OversizedResponse``) behind a failed service call.
    public let underlying: (any Error)?
    /// For ``Code/reattestationLimited``: when the circuit breaker lets the next attestation through.
    public let retryAfter: Date?

    public init(code: Code, reason: String, underlying: (any Error)? = nil, retryAfter: Date? = nil) {
        self.code = code
        self.reason = reason
        self.underlying = underlying
        self.retryAfter = retryAfter
    }

    public var description: String { "\(self.code): \(self.reason)" }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.code == rhs.code }

    public func hash(into hasher: inout Hasher) { hasher.combine(self.code) }

    static let notSupported = Self(code: .notSupported, reason: "App Attest is not available on this device")
    static let invalidClientDataHash = Self(code: .invalidClientDataHash, reason: "the clientDataHash must be exactly 32 bytes")
    static let unknownError = Self(code: .unknownError, reason: "the service answered with neither a result nor an error")
    static let timeout = Self(code: .timeout, reason: "the service did not answer in time")
    static let registrationInProgress = Self(
        code: .registrationInProgress, reason: "another registration with a different clientDataHash is running"
    )
    static let challengeExpired = Self(code: .challengeExpired, reason: "the server challenge expired before it could be used")

    static func reattestationLimited(until: Date) -> Self {
        Self(code: .reattestationLimited, reason: "too many attestations recently", retryAfter: until)
    }

    static func keyGeneration(_ underlying: any Error) -> Self {
        Self(code: .keyGeneration, reason: "generateKey failed: \(underlying)", underlying: underlying)
    }

    static func attestation(_ underlying: any Error) -> Self {
        Self(code: .attestation, reason: "attestKey failed: \(underlying)", underlying: underlying)
    }

    static func assertion(_ underlying: any Error) -> Self {
        Self(code: .assertion, reason: "generateAssertion failed: \(underlying)", underlying: underlying)
    }
}

/// A service answer that breaks FormAttest's limits (attestation over 8 KiB, assertion over 2 KiB).
public struct OversizedResponse: Error, Sendable, CustomStringConvertible {
    public let size: Int
    public let limit: Int
    public var description: String { "the service returned \(self.size) bytes; the limit is \(self.limit)" }
}
