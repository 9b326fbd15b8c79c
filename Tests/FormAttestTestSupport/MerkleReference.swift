//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Crypto
import TransparencyLog

/// RFC 9162 §2.1.1's MTH, written from its definition: the oracle the log's code is checked against.
public func referenceRoot(_ leafHashes: ArraySlice<[UInt8]>) -> [UInt8] {
    switch leafHashes.count {
    case 0: return Array(SHA256.hash(data: [UInt8]()))
    case 1: return leafHashes.first!
    default:
        var split = 1
        while split * 2 < leafHashes.count { split *= 2 }
        let middle = leafHashes.startIndex + split
        return MerkleHash.node(referenceRoot(leafHashes[..<middle]), referenceRoot(leafHashes[middle...]))
    }
}
