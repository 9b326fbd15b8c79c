//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import AppAttest
public import Foundation

extension FormFlows {
    /// What a risk-metric refresh produced.
    public struct RiskMetricOutcome: Sendable {
        /// The key, with the receipt now stored.
        public var key: StoredKey
        /// The receipt now stored, verified.
        public var receipt: VerifiedReceipt
        /// `false` when Apple answered 304 (asked before "not before"): the stored receipt stays.
        public var refreshed: Bool
    }

    /// Trades the key's stored receipt for a new one through `exchange` and stores it.
    ///
    /// The new receipt must verify (signature, chain to the receipt anchors at `now`), be of type
    /// RECEIPT, name the key's app id and hold the stored key, and be at most
    /// ``FlowConfiguration/maximumReceiptAge`` old (Apple's five minutes). It replaces the stored
    /// receipt by compare-and-set, so concurrent refreshes cannot lose a newer receipt. Any
    /// failure changes nothing.
    public func refreshRiskMetric(
        keyID: [UInt8],
        using exchange: any ReceiptExchanging,
        now: Date
    ) async throws(FlowError) -> RiskMetricOutcome {
        guard var key = try await self.load(keyID) else {
            throw FlowError.keyMismatch("this keyId is not registered")
        }
        let response: ReceiptExchangeResponse
        do {
            response = try await exchange.exchange(key.receipt, environment: key.environment)
        } catch {
            throw FlowError(code: .init(error.code), category: .upstreamUnavailable, reason: error.reason)
        }
        switch response {
        case .notModified:
            // The stored receipt stays; report it as it verifies now.
            let stored = try await self.verifiedReceipt(key.receipt, key: key, type: nil, now: now)
            return RiskMetricOutcome(key: key, receipt: stored, refreshed: false)
        case .newReceipt(let bytes):
            let receipt = try await self.verifiedReceipt(bytes, key: key, type: .receipt, now: now)
            let age = now.timeIntervalSince(receipt.payload.creationTime)
            guard age <= self.configuration.maximumReceiptAge, age >= -self.configuration.maximumReceiptAge else {
                throw FlowError(
                    code: .receiptStale,
                    category: .verificationFailed,
                    reason: "the new receipt was created \(Int(age)) s ago; at most \(Int(self.configuration.maximumReceiptAge)) s accepted"
                )
            }
            let replaced: Bool
            do {
                replaced = try await self.store.replaceReceipt(keyID: keyID, previous: key.receipt, with: bytes)
            } catch {
                throw FlowError(error)
            }
            guard replaced else {
                throw FlowError(code: .receiptChanged, category: .conflict, reason: "another refresh stored a receipt first")
            }
            key.receipt = bytes
            return RiskMetricOutcome(key: key, receipt: receipt, refreshed: true)
        }
    }

    private func verifiedReceipt(
        _ bytes: [UInt8],
        key: StoredKey,
        type: ReceiptPayload.ReceiptType?,
        now: Date
    ) async throws(FlowError) -> VerifiedReceipt {
        do throws(AppAttestError) {
            return try await self.verifier.verifyReceipt(
                bytes,
                expecting: ReceiptExpectation(appID: key.appID, attestedKey: .publicKey(key.publicKey), type: type),
                at: now
            )
        } catch {
            throw FlowError(error)
        }
    }
}
