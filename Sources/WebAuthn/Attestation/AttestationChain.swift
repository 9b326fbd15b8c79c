//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CBOR
import Foundation
import SwiftASN1
@_spi(FixedExpiryValidationTime) import X509

/// The `x5c` certificates of an attestation statement, checked at an injected time.
struct AttestationChain {
    /// The attestation certificate (first of `x5c`).
    let leaf: Certificate
    /// The rest of `x5c`, in order.
    let intermediates: [Certificate]

    /// Reads `x5c`: a non-empty array of DER certificates, at most ``WebAuthnLimits/maximumCertificates``.
    init(x5c item: CBORItem) throws(WebAuthnError) {
        guard let elements = item.arrayElements, !elements.isEmpty else {
            throw WebAuthnError.malformedAttestation("x5c is not a non-empty array")
        }
        guard elements.count <= WebAuthnLimits.maximumCertificates else {
            throw WebAuthnError.malformedAttestation("x5c has \(elements.count) certificates; at most \(WebAuthnLimits.maximumCertificates)")
        }
        var certificates: [Certificate] = []
        for (index, element) in elements.enumerated() {
            guard let der = element.byteString else {
                throw WebAuthnError.malformedAttestation("x5c[\(index)] is not a byte string")
            }
            do {
                certificates.append(try Certificate(derEncoded: der))
            } catch {
                throw WebAuthnError(code: .malformedCertificate, reason: "x5c[\(index)] is not a DER X.509 certificate")
            }
        }
        // Non-empty: checked above.
        self.leaf = certificates.removeFirst()
        self.intermediates = certificates
    }

    /// Checks every certificate's validity at `time`, then the path.
    ///
    /// With `anchors`, the path from the leaf through `x5c` must reach one of them (RFC 5280 at
    /// `time`). Without, each certificate of `x5c` must be signed by the next one; nothing says who
    /// the last one is, and the answer is `false` (not anchored).
    ///
    /// - Returns: whether the chain reached a trust anchor.
    func validate(
        anchors: [Certificate],
        at time: Date,
        handledCriticalExtensions: [ASN1ObjectIdentifier] = []
    ) async throws(WebAuthnError) -> Bool {
        for (index, certificate) in ([self.leaf] + self.intermediates).enumerated() {
            guard time >= certificate.notValidBefore else {
                throw WebAuthnError(code: .certificateNotYetValid, reason: "x5c[\(index)] is valid from \(certificate.notValidBefore), after \(time)")
            }
            guard time <= certificate.notValidAfter else {
                throw WebAuthnError(code: .certificateExpired, reason: "x5c[\(index)] expired at \(certificate.notValidAfter), before \(time)")
            }
        }
        guard !anchors.isEmpty else {
            let path = [self.leaf] + self.intermediates
            for (index, pair) in zip(path, path.dropFirst()).enumerated() {
                guard pair.1.publicKey.isValidSignature(pair.0.signature, for: pair.0) else {
                    throw WebAuthnError(code: .certificateChainInvalid, reason: "x5c[\(index)] is not signed by x5c[\(index + 1)]")
                }
            }
            return false
        }
        var verifier = Verifier(rootCertificates: CertificateStore(anchors)) {
            RFC5280Policy(fixedExpiryValidationTime: time)
            FormatCheckedExtensions(verifyingCriticalExtensions: handledCriticalExtensions)
        }
        let result = await verifier.validate(leaf: self.leaf, intermediates: CertificateStore(self.intermediates))
        guard case .validCertificate = result else {
            throw WebAuthnError(code: .certificateChainInvalid, reason: "x5c does not chain to a configured trust anchor at \(time)")
        }
        return true
    }
}

/// Critical extensions a format's own checks have already read (tpm: the AIK certificate's subject
/// alternative name and certificate policies, §8.3.2), declared handled so that RFC 5280 path
/// validation does not refuse the chain for them; it adds no requirement of its own.
struct FormatCheckedExtensions: VerifierPolicy {
    let verifyingCriticalExtensions: [ASN1ObjectIdentifier]

    func chainMeetsPolicyRequirements(chain: UnverifiedCertificateChain) async -> PolicyEvaluationResult {
        .meetsPolicy
    }
}
