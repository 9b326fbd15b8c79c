//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Foundation

extension UUID {
    /// A random (version 4, RFC 9562) UUID from the system's generator (`getrandom` on Linux).
    ///
    /// The same kind of value as `UUID()`, which on Linux opens, reads and closes `/dev/urandom` for
    /// every identifier: a profile of the JWS signer, which gives every token a `jti`, found those
    /// system calls on the request path.
    public static func random() -> UUID {
        var generator = SystemRandomNumberGenerator()
        let high: UInt64 = generator.next()
        let low: UInt64 = generator.next()
        func byte(_ word: UInt64, _ index: Int) -> UInt8 { UInt8(truncatingIfNeeded: word >> (56 - 8 * index)) }
        return UUID(
            uuid: (
                byte(high, 0), byte(high, 1), byte(high, 2), byte(high, 3), byte(high, 4), byte(high, 5),
                byte(high, 6) & 0x0F | 0x40,  // version 4
                byte(high, 7),
                byte(low, 0) & 0x3F | 0x80,  // the RFC 9562 variant (0b10)
                byte(low, 1), byte(low, 2), byte(low, 3), byte(low, 4), byte(low, 5), byte(low, 6), byte(low, 7)
            ))
    }
}
