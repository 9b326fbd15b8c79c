//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// Size limits applied before any parsing. Real objects are far smaller (attestations 5.2–5.7 KB,
/// assertions about 150 bytes); the limits bound the work an attacker can cause.
public enum AppAttestLimits {
    /// Largest attestation object accepted: 8 KiB.
    public static let maximumAttestationSize = 8 * 1024
    /// Largest assertion accepted: 2 KiB.
    public static let maximumAssertionSize = 2 * 1024
    /// Largest clientDataHash accepted. Form flows always pass 32 bytes; Apple's own sample app
    /// passed a raw 21-byte challenge, so the verifier treats the value as opaque bytes up to this size.
    public static let maximumClientDataHashSize = 1024
    /// Largest receipt accepted on its own (refreshed receipts): 16 KiB. Real ones are 3.6–4.0 KB;
    /// inside an attestation the attestation's limit already applies.
    public static let maximumReceiptSize = 16 * 1024
}
