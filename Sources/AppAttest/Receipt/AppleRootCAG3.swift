//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import SwiftASN1
public import X509

/// Apple Root CA - G3, the trust anchor of App Attest *receipts* (not of attestations, which chain
/// to ``AppleAppAttestationRoot``).
///
/// A receipt is signed by "Application Attestation Fraud Receipt Signing", issued by "Apple
/// Application Integration CA 5 - G1", issued by this root. P-384, self-signed with
/// ecdsa-with-SHA384, valid 2014-04-30T18:19:06Z to 2039-04-30T18:19:06Z.
/// SHA-256 of the DER: `63343abfb89a6a03ebb57e9b3f5fa7be7c4f5c756f3017b3a8c488c3653e9179`
/// (Apple's published fingerprint; a test pins it, and another checks that every real receipt
/// carries this same certificate). Source: https://www.apple.com/certificateauthority/AppleRootCA-G3.cer
public enum AppleRootCAG3 {
    /// The root certificate in PEM.
    public static let pem = """
        -----BEGIN CERTIFICATE-----
        MIICQzCCAcmgAwIBAgIILcX8iNLFS5UwCgYIKoZIzj0EAwMwZzEbMBkGA1UEAwwS
        QXBwbGUgUm9vdCBDQSAtIEczMSYwJAYDVQQLDB1BcHBsZSBDZXJ0aWZpY2F0aW9u
        IEF1dGhvcml0eTETMBEGA1UECgwKQXBwbGUgSW5jLjELMAkGA1UEBhMCVVMwHhcN
        MTQwNDMwMTgxOTA2WhcNMzkwNDMwMTgxOTA2WjBnMRswGQYDVQQDDBJBcHBsZSBS
        b290IENBIC0gRzMxJjAkBgNVBAsMHUFwcGxlIENlcnRpZmljYXRpb24gQXV0aG9y
        aXR5MRMwEQYDVQQKDApBcHBsZSBJbmMuMQswCQYDVQQGEwJVUzB2MBAGByqGSM49
        AgEGBSuBBAAiA2IABJjpLz1AcqTtkyJygRMc3RCV8cWjTnHcFBbZDuWmBSp3ZHtf
        TjjTuxxEtX/1H7YyYl3J6YRbTzBPEVoA/VhYDKX1DyxNB0cTddqXl5dvMVztK517
        IDvYuVTZXpmkOlEKMaNCMEAwHQYDVR0OBBYEFLuw3qFYM4iapIqZ3r6966/ayySr
        MA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgEGMAoGCCqGSM49BAMDA2gA
        MGUCMQCD6cHEFl4aXTQY2e3v9GwOAEZLuN+yRhHFD/3meoyhpmvOwgPUnPWTxnS4
        at+qIxUCMG1mihDK1A3UT82NQz60imOlM27jbdoXt2QfyFMm+YhidDkLF1vLUagM
        6BgD56KyKA==
        -----END CERTIFICATE-----
        """

    /// The root certificate.
    public static let certificate: Certificate = {
        // The PEM above is a constant checked by a test (its SHA-256 is pinned), so parsing cannot fail.
        // swift-format-ignore: NeverUseForceTry
        try! Certificate(pemEncoded: pem)
    }()
}
