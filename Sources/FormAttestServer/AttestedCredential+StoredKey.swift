//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import FormAttestFlows
import FormAttestTokens

// The adapter joins the store's record and the formatter's input; neither library knows the other.
extension AttestedCredential {
    /// - Throws: when the stored point is not a valid P-256 key.
    init(_ key: StoredKey) throws {
        try self.init(keyID: key.keyID, publicKeyPoint: key.publicKey, appID: key.appID, environment: key.environment.rawValue)
    }
}
