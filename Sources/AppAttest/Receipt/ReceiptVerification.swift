//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
public import Foundation
import SwiftASN1
import X509

/// A receipt whose signature and certificate chain verified, and which belongs to the key it was
/// checked against.
public struct VerifiedReceipt: Sendable {
    /// The parsed receipt.
    public let receipt: AppAttestReceipt
    /// The time the chain was verified at.
    public let verificationTime: Date

    /// The decoded payload.
    public var payload: ReceiptPayload { self.receipt.payload }
}

/// What a receipt must match to belong to an attested key.
public struct ReceiptExpectation: Sendable {
    /// How the attested key is known.
    public enum AttestedKey: Sendable {
        /// The DER of the credential certificate (x5c[0]): the receipt must carry exactly it.
        case certificate([UInt8])
        /// The stored key's uncompressed P-256 point: the receipt's certificate must hold it
        /// (for refreshed receipts, checked against the key stored at attestation).
        case publicKey([UInt8])
    }

    /// The app id the attestation matched.
    public var appID: String
    /// The attested key.
    public var attestedKey: AttestedKey
    /// For an attestation's own receipt: the clientDataHash given to `attestKey`. `nil` skips the check
    /// (refreshed receipts carry another value).
    public var clientHash: [UInt8]?
    /// The receipt type required, or `nil` for any.
    public var type: ReceiptPayload.ReceiptType?

    public init(
        appID: String,
        attestedKey: AttestedKey,
        clientHash: [UInt8]? = nil,
        type: ReceiptPayload.ReceiptType? = nil
    ) {
        self.appID = appID
        self.attestedKey = attestedKey
        self.clientHash = clientHash
        self.type = type
    }
}

/// The outcome of checking an attestation's receipt, reported whether or not the policy requires it.
public enum ReceiptCheck: Sendable {
    /// Signature, chain and binding verified.
    case verified(VerifiedReceipt)
    /// The receipt did not verify; the error names the step.
    case failed(AppAttestError)

    /// The verified receipt, if any.
    public var verified: VerifiedReceipt? {
        guard case .verified(let receipt) = self else { return nil }
        return receipt
    }

    /// The error, if the receipt did not verify.
    public var error: AppAttestError? {
        guard case .failed(let error) = self else { return nil }
        return error
    }

    /// What the command line and the HTTP API report about the receipt.
    public struct Summary: Sendable, Encodable, Hashable {
        /// `verified` or `invalid`.
        public var status: String
        /// The error code when invalid (`receipt_chain_invalid`, ...).
        public var code: String?
        public var message: String?
        public var type: String?
        public var environment: String?
        public var creationTime: Date?
        public var expirationTime: Date?
        public var riskMetric: Int?
    }

    /// This outcome as a ``Summary``.
    public var summary: Summary {
        switch self {
        case .verified(let receipt):
            let payload = receipt.payload
            return Summary(
                status: "verified",
                type: payload.type.rawValue,
                environment: payload.environment,
                creationTime: payload.creationTime,
                expirationTime: payload.expirationTime,
                riskMetric: payload.riskMetric
            )
        case .failed(let error):
            return Summary(status: "invalid", code: error.code.identifier, message: error.reason)
        }
    }
}

extension AppAttestVerifier {
    /// Verifies a receipt: parses the CMS, checks that exactly one signer signed the payload with
    /// ECDSA P-256 / SHA-256, that its certificate was valid at `time` and chains to a receipt trust
    /// anchor (``AppAttestPolicy/receiptTrustAnchors``, Apple Root CA - G3 by default), and that the
    /// payload belongs to the expected key.
    ///
    /// Apple's receipt steps ("Assessing fraud risk") also ask for a creation time at most five
    /// minutes old for *refreshed* receipts; that check belongs to the caller that just refreshed.
    ///
    /// - Throws: ``AppAttestError`` with a `receipt_*` code naming the failed check.
    public func verifyReceipt(
        _ bytes: some Collection<UInt8>,
        expecting expectation: ReceiptExpectation,
        at time: Date
    ) async throws(AppAttestError) -> VerifiedReceipt {
        let receipt = try AppAttestReceipt(berEncoded: bytes)
        try Self.checkSignature(of: receipt)
        try await self.checkReceiptChain(of: receipt, at: time)
        try Self.check(receipt.payload, against: expectation)
        return VerifiedReceipt(receipt: receipt, verificationTime: time)
    }

    /// Checks a receipt the way ``verifyAttestation(_:keyID:clientDataHash:at:)`` reports it.
    func checkAttestationReceipt(
        _ bytes: [UInt8],
        expecting expectation: ReceiptExpectation,
        at time: Date
    ) async -> ReceiptCheck {
        do {
            return .verified(try await self.verifyReceipt(bytes, expecting: expectation, at: time))
        } catch {
            return .failed(error)
        }
    }

    // MARK: - Steps

    private static func checkSignature(of receipt: AppAttestReceipt) throws(AppAttestError) {
        let signer = receipt.signer
        guard signer.digestAlgorithm == .sha256Digest, signer.signatureAlgorithm == .ecdsaWithSHA256 else {
            throw AppAttestError(
                code: .receiptSignatureInvalid,
                reason: "signed with \(signer.signatureAlgorithm) over \(signer.digestAlgorithm); ecdsa-with-SHA256 expected"
            )
        }
        guard let key = P256.Signing.PublicKey(receipt.signingCertificate.publicKey) else {
            throw AppAttestError(code: .receiptSignatureInvalid, reason: "the signing certificate's key is not P-256")
        }
        let signature: P256.Signing.ECDSASignature
        do {
            signature = try P256.Signing.ECDSASignature(derRepresentation: signer.signature)
        } catch {
            throw AppAttestError(code: .receiptSignatureInvalid, reason: "the signature is not a DER ECDSA signature")
        }
        let signed: [UInt8]
        if let attributes = signer.signedAttributes {
            // RFC 5652 §5.4: with signed attributes, the message-digest attribute holds the
            // content's digest and the signature covers the attributes.
            guard let digest = signer.messageDigest,
                constantTimeEquals(digest, SHA256.hash(data: receipt.content))
            else {
                throw AppAttestError(
                    code: .receiptSignatureInvalid,
                    reason: "the message-digest attribute is not SHA-256 of the payload"
                )
            }
            signed = attributes
        } else {
            signed = receipt.content
        }
        guard key.isValidSignature(signature, for: signed) else {
            throw AppAttestError(
                code: .receiptSignatureInvalid,
                reason: "the signature does not verify with the signing certificate"
            )
        }
    }

    private func checkReceiptChain(of receipt: AppAttestReceipt, at time: Date) async throws(AppAttestError) {
        let signer = receipt.signingCertificate
        try Self.checkValidity(
            of: signer,
            role: "receipt signing certificate",
            at: time,
            notYetValid: .receiptCertificateNotYetValid,
            expired: .receiptCertificateExpired
        )
        // Apple's receipt signer is the same certificate in every receipt for about a year, so the
        // fact "these exact DER bytes chain to these anchors, within this window" is cached like a
        // verified intermediate (successes only; the window covers the whole path).
        let signerKey = VerifiedChainCache.Key(
            intermediate: receipt.certificatesDER[receipt.signer.certificateIndex],
            anchors: self.trustAnchors(.receipt).digest
        )
        if self.chainCache.contains(signerKey, at: time) { return }

        let issuerIndex = receipt.certificatesDER.indices.first { index in
            index != receipt.signer.certificateIndex && (try? receipt.certificate(at: index))?.subject == signer.issuer
        }
        guard let issuerIndex else {
            throw AppAttestError(
                code: .receiptChainInvalid,
                reason: "the receipt carries no certificate for the signer's issuer \(signer.issuer)"
            )
        }
        let window: ClosedRange<Date>
        do {
            window = try await self.validateChain(
                leaf: signer,
                intermediate: try receipt.certificate(at: issuerIndex),
                intermediateDER: receipt.certificatesDER[issuerIndex],
                anchors: .receipt,
                at: time
            )
        } catch let error where error.code == .certificateChainInvalid {
            throw AppAttestError(
                code: .receiptChainInvalid,
                reason: "the receipt signing certificate does not chain to a receipt trust anchor at \(time)"
            )
        }
        self.chainCache.insert(signerKey, certificate: signer, window: window)
    }

    private static func check(_ payload: ReceiptPayload, against expectation: ReceiptExpectation) throws(AppAttestError) {
        if let type = expectation.type, payload.type != type {
            throw AppAttestError(
                code: .receiptTypeUnexpected,
                reason: "the receipt's type is \(payload.type); \(type) expected"
            )
        }
        guard payload.appID == expectation.appID else {
            throw AppAttestError(
                code: .receiptAppIDMismatch,
                reason: "the receipt is for \(payload.appID), not \(expectation.appID)"
            )
        }
        switch expectation.attestedKey {
        case .certificate(let der):
            guard constantTimeEquals(payload.attestedCertificateDER, der) else {
                throw AppAttestError(
                    code: .receiptCertificateMismatch,
                    reason: "the receipt's attested certificate is not the credential certificate"
                )
            }
        case .publicKey(let point):
            guard let key = P256.Signing.PublicKey(try payload.attestedCertificate.publicKey),
                constantTimeEquals(key.x963Representation, point)
            else {
                throw AppAttestError(
                    code: .receiptCertificateMismatch,
                    reason: "the receipt's attested certificate does not hold the stored key"
                )
            }
        }
        if let clientHash = expectation.clientHash, !constantTimeEquals(payload.clientHash, clientHash) {
            throw AppAttestError(
                code: .receiptClientHashMismatch,
                reason: "the receipt's client hash is not the attestation's clientDataHash"
            )
        }
    }
}

extension ASN1ObjectIdentifier {
    fileprivate static let sha256Digest: ASN1ObjectIdentifier = [2, 16, 840, 1, 101, 3, 4, 2, 1]
    fileprivate static let ecdsaWithSHA256: ASN1ObjectIdentifier = [1, 2, 840, 10045, 4, 3, 2]
}
