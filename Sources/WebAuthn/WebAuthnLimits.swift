//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// Size limits applied before any parsing. Real responses are far smaller (a packed registration
/// with one certificate is about 2 KB of JSON, an assertion about 600 bytes; a TPM registration
/// with its chain reaches 6 KB); the limits bound the work an attacker can cause.
public enum WebAuthnLimits {
    /// Largest response JSON accepted (`PublicKeyCredential.toJSON()`): 32 KiB.
    public static let maximumResponseSize = 32 * 1024
    /// Largest clientDataJSON accepted: 4 KiB (browsers write about 150–250 bytes).
    public static let maximumClientDataSize = 4 * 1024
    /// Largest attestation object accepted: 16 KiB.
    public static let maximumAttestationObjectSize = 16 * 1024
    /// Largest authenticator data accepted (in an assertion or inside an attestation object): 4 KiB.
    public static let maximumAuthenticatorDataSize = 4 * 1024
    /// Largest signature accepted: 1 KiB (an RSA-4096 signature is 512 bytes).
    public static let maximumSignatureSize = 1024
    /// Largest userHandle accepted: WebAuthn caps user ids at 64 bytes.
    public static let maximumUserHandleSize = 64
    /// Longest credential id accepted (WebAuthn §7.1 step 25).
    public static let maximumCredentialIDLength = 1023
    /// Most certificates accepted in `x5c`.
    public static let maximumCertificates = 5
    /// Deepest JSON nesting accepted in a response or clientDataJSON.
    public static let maximumJSONDepth = 8
}
