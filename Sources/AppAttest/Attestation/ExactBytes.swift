//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// Bytes as a dictionary key, equal only to the same bytes, hashed as one block.
///
/// `[UInt8]`'s own `Hashable` feeds the hasher one byte at a time; for the certificate DER the
/// caches are keyed by (about 1 KB, looked up several times in every attestation) that cost more
/// than the rest of a lookup. A profile of `attestation.verify` showed it.
struct ExactBytes: Hashable, Sendable {
    let bytes: [UInt8]

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(self.bytes.count)
        unsafe self.bytes.withUnsafeBytes { unsafe hasher.combine(bytes: $0) }
    }

    static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.bytes == rhs.bytes
    }
}
