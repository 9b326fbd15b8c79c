//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Foundation

/// Errors of ``AppAttestClient``, as the product's iOS apps handle them.
///
/// An enum (the cases are the contract the apps switch over), unlike the verifier's struct
/// error: new cases here are a deliberate, versioned change to the app-facing API.
public enum AppAttestError: Error, Sendable {
    /// App Attest is not available (simulator, old device, unsupported platform).
    case notSupported
    /// `generateKey` failed.
    case keyGeneration(any Error)
    /// `attestKey` failed, or returned something unusable.
    case attestation(any Error)
    /// `generateAssertion` failed, or returned something unusable.
    case assertion(any Error)
    /// The clientDataHash is not exactly 32 bytes.
    case invalidClientDataHash
    /// The service answered with neither a result nor an error.
    case unknownError
    /// The service did not answer within the timeout.
    case timeout
    /// Another registration with a different clientDataHash is running.
    case registrationInProgress
    /// Too many attestations recently: the re-attestation circuit breaker is open until the date.
    case reattestationLimited(until: Date)
    /// The server challenge expired (beyond the grace period) before it could be used.
    case challengeExpired
}

/// A service answer that breaks FormAttest's limits (attestation over 8 KiB, assertion over 2 KiB).
public struct OversizedResponse: Error, Sendable, CustomStringConvertible {
    public let size: Int
    public let limit: Int
    public var description: String { "the service returned \(self.size) bytes; the limit is \(self.limit)" }
}
