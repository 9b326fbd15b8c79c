//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// The attestation statement formats (WebAuthn §8) this verifier implements.
///
/// Any other `fmt` (`android-safetynet`, which WebAuthn Level 3 deprecates, among them) is refused
/// with ``WebAuthnError/Code/unsupportedFormat``.
public struct AttestationFormat: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: String

    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    /// §8.7: no attestation; the credential is trusted on first use.
    public static let none = AttestationFormat(rawValue: "none")
    /// §8.2: self attestation, or a batch certificate in `x5c`.
    public static let packed = AttestationFormat(rawValue: "packed")
    /// §8.6: a U2F security key's attestation.
    public static let fidoU2F = AttestationFormat(rawValue: "fido-u2f")
    /// §8.8: Apple's anonymous attestation.
    public static let apple = AttestationFormat(rawValue: "apple")

    /// §8.3: a TPM's attestation identity key certifies the credential key (Windows Hello).
    public static let tpm = AttestationFormat(rawValue: "tpm")
    /// §8.4: an Android Keystore key attestation.
    public static let androidKey = AttestationFormat(rawValue: "android-key")

    /// The formats verified, in the order the project implements them.
    public static let implemented: [AttestationFormat] = [.none, .packed, .fidoU2F, .apple, .tpm, .androidKey]

    public var description: String { self.rawValue }
}
