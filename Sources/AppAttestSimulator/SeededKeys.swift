//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto

/// Derives keys and serial numbers from a seed, so that a simulated CA and device are the same in
/// every run. ECDSA signatures stay randomized (BoringSSL mixes fresh randomness into each nonce),
/// so certificates and assertions differ in their signature bytes only.
enum SeededKeys {
    static func bytes(seed: UInt64, label: String, count: Int) -> [UInt8] {
        var output: [UInt8] = []
        var block: UInt32 = 0
        while output.count < count {
            var hasher = SHA256()
            hasher.update(data: Array("formattest-simulator".utf8))
            withUnsafeBytes(of: seed.bigEndian) { hasher.update(bufferPointer: $0) }
            hasher.update(data: Array(label.utf8))
            withUnsafeBytes(of: block.bigEndian) { hasher.update(bufferPointer: $0) }
            output += hasher.finalize()
            block += 1
        }
        return Array(output.prefix(count))
    }

    /// A P-256 key; candidates outside [1, n-1] (probability about 2^-32) are skipped.
    static func p256(seed: UInt64, label: String) -> P256.Signing.PrivateKey {
        var attempt = 0
        while true {
            if let key = try? P256.Signing.PrivateKey(
                rawRepresentation: bytes(seed: seed, label: "\(label)#\(attempt)", count: 32)
            ) {
                return key
            }
            attempt += 1
        }
    }

    /// A P-384 key; candidates outside [1, n-1] are skipped.
    static func p384(seed: UInt64, label: String) -> P384.Signing.PrivateKey {
        var attempt = 0
        while true {
            if let key = try? P384.Signing.PrivateKey(
                rawRepresentation: bytes(seed: seed, label: "\(label)#\(attempt)", count: 48)
            ) {
                return key
            }
            attempt += 1
        }
    }
}
