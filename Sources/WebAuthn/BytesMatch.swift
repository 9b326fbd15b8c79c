//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto

/// Whether two byte strings are equal, in time that does not depend on where they differ.
///
/// Challenges, nonces, credential ids and user handles are compared through their SHA-256
/// digests, whose `==` is constant time (swift-crypto); equal digests mean equal inputs except
/// with negligible probability, and the lengths (public) are checked first.
func bytesMatch(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
    guard lhs.count == rhs.count else { return false }
    return SHA256.hash(data: lhs) == SHA256.hash(data: rhs)
}
