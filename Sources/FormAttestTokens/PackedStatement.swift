//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CBOR

/// A `packed`-shaped attestation statement (ES256), and the CBOR attestation object around it:
/// `{fmt, attStmt: {alg: -7, sig, x5c?}, authData}`. Written once for the packed attestation this
/// server vouches for and the test-only packed-like one.
struct PackedStatement {
    /// The DER ECDSA signature over `authenticatorData ‖ clientDataHash`.
    var signature: [UInt8]
    /// The attestation certificate (DER), or `nil` for a statement without `x5c`.
    var certificate: [UInt8]?

    func attestationObject(format: String, authenticatorData: [UInt8]) throws -> [UInt8] {
        var serializer = CBORSerializer()
        try serializer.appendMap([
            (.text("fmt"), { $0.appendTextString(format) }),
            (.text("attStmt"), { try self.append(to: &$0) }),
            (.text("authData"), { $0.appendByteString(authenticatorData) }),
        ])
        return serializer.bytes
    }

    private func append(to statement: inout CBORSerializer) throws {
        var members: [(key: CBORSerializer.MapKey, value: (inout CBORSerializer) throws -> Void)] = [
            (.text("alg"), { $0.appendInteger(-7) }),
            (.text("sig"), { $0.appendByteString(self.signature) }),
        ]
        if let certificate = self.certificate {
            members.append(
                (
                    .text("x5c"),
                    { list in
                        list.appendArrayHeader(count: 1)
                        list.appendByteString(certificate)
                    }
                )
            )
        }
        try statement.appendMap(members)
    }
}
