//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Foundation

/// The completion-handler surface of DeviceCheck's `DCAppAttestService`, so that the client can
/// run against the real service on a device and against a simulated one everywhere else.
public protocol DCAppAttestServiceProtocol: Sendable {
    /// Whether App Attest is available on this device.
    var isSupported: Bool { get }
    /// Creates a key pair in the Secure Enclave and returns its keyId (base64 SHA-256 of the key).
    func generateKey(completionHandler: @escaping @Sendable (String?, (any Error)?) -> Void)
    /// Asks Apple to attest the key over `clientDataHash`; returns the attestation object (CBOR).
    func attestKey(
        _ keyId: String,
        clientDataHash: Data,
        completionHandler: @escaping @Sendable (Data?, (any Error)?) -> Void
    )
    /// Signs `clientDataHash` with the key; returns the assertion (CBOR).
    func generateAssertion(
        _ keyId: String,
        clientDataHash: Data,
        completionHandler: @escaping @Sendable (Data?, (any Error)?) -> Void
    )
}

/// DeviceCheck's error domain and codes (`DCError.Code`), usable where DeviceCheck is absent.
public enum DCErrorCode: Int, Sendable {
    case unknownSystemFailure = 0
    case featureUnsupported = 1
    case invalidInput = 2
    case invalidKey = 3
    case serverUnavailable = 4

    /// `DCErrorDomain`.
    public static let domain = "com.apple.devicecheck.error"

    /// The DeviceCheck code of `error`, when it is a DeviceCheck error.
    public init?(_ error: any Error) {
        let error = error as NSError
        guard error.domain == Self.domain, let code = Self(rawValue: error.code) else { return nil }
        self = code
    }

    /// An `NSError` in DeviceCheck's domain, as the real service reports it.
    public var error: NSError {
        NSError(domain: Self.domain, code: self.rawValue)
    }
}
