//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

/// Ed25519 public keys of small order, which no honest authenticator makes and which BoringSSL's
/// verification (RFC 8032's cofactorless equation, without a check of the key) accepts: with the
/// identity as the key, the 64 bytes `01 00…00 ‖ 00…00` (R the identity, S = 0) "sign" every
/// message, so a passkey registered with it has no secret at all.
///
/// The encodings are libsodium's (`ge25519_has_small_order`, crypto_sign_verify's check): the y
/// coordinates of the eight points of order dividing 8 (1: the identity; p − 1: order 2; 0 and
/// its non-canonical spelling p: order 4; two values of order 8) and p + 1 (the identity spelled
/// non-canonically), compared with x's sign bit cleared, so both signs of each are covered.
enum Ed25519SmallOrder {
    static let encodings: [[UInt8]] = [
        [UInt8](repeating: 0, count: 32),  // y = 0: order 4
        [0x01] + [UInt8](repeating: 0, count: 31),  // y = 1: the identity
        [
            0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98, 0xf0,
            0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53, 0xfc, 0x05,
        ],  // order 8
        [
            0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67, 0x0f,
            0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac, 0x03, 0x7a,
        ],  // order 8
        [0xec] + [UInt8](repeating: 0xff, count: 30) + [0x7f],  // y = p − 1: order 2
        [0xed] + [UInt8](repeating: 0xff, count: 30) + [0x7f],  // y = p (0 spelled non-canonically): order 4
        [0xee] + [UInt8](repeating: 0xff, count: 30) + [0x7f],  // y = p + 1 (1 spelled non-canonically): the identity
    ]

    /// Whether the 32-byte encoding is one of a point of small order (either sign of x).
    static func contains(_ encoding: [UInt8]) -> Bool {
        guard encoding.count == 32 else { return false }
        var y = encoding
        y[31] &= 0x7f
        return Self.encodings.contains(y)
    }
}
