//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation

/// Lowercase hex of `bytes`, as the command line prints hashes (`--client-data-hash`, `hash`):
/// the tests' own spelling, independent of the package's encoder.
public func hexString(_ bytes: some Sequence<UInt8>) -> String {
    bytes.map { String(format: "%02x", $0) }.joined()
}
