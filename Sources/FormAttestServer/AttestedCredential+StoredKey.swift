//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import Crypto
import FormAttestFlows
import FormAttestTokens

// The adapter joins the store's record and the formatter's input; neither library knows the other.
extension AttestedCredential {
    /// A verified assertion's key, with its stored record: the key the flow parsed from the
    /// record's point and verified the assertion with.
    init(_ key: StoredKey, verifiedWith publicKey: P256.Signing.PublicKey) {
        self.init(keyID: key.keyID, publicKey: publicKey, publicKeyPoint: key.publicKey, appID: key.appID, environment: key.environment.rawValue)
    }
}
