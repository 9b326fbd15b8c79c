//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// Compares two byte sequences in time that depends only on their lengths (which are public).
///
/// Used for every comparison of digests, nonces, key ids and challenges, so that timing never
/// tells an attacker how many leading bytes of a guess were right.
package func constantTimeEquals(_ lhs: some Sequence<UInt8>, _ rhs: some Sequence<UInt8>) -> Bool {
    let left = Array(lhs)
    let right = Array(rhs)
    guard left.count == right.count else { return false }
    var difference: UInt8 = 0
    for (left, right) in zip(left, right) {
        difference |= left ^ right
    }
    return difference == 0
}
