//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON

/// The form the demo, `formattest-dev simulate`, the load preparation and the benchmarks sign:
/// a transfer of `amount` to bob, as its RFC 8785 bytes.
public enum DemoTransferForm {
    /// The canonical bytes of `{action: transfer, amount, to: bob, username, timestamp, nonce}`.
    ///
    /// - Parameters:
    ///   - username: who signs.
    ///   - amount: the amount, as text.
    ///   - timestamp: the form's RFC 3339 UTC time, already formatted (the caller checks it).
    ///   - nonce: the form's nonce: the same nonce and timestamp give the same form.
    public static func bytes(username: String, amount: String = "10.00", timestamp: String, nonce: String) -> [UInt8] {
        JSONValue.object(
            JSONObject(constantMembers: [
                ("action", .string(JSONString("transfer"))),
                ("amount", .string(JSONString(amount))),
                ("to", .string(JSONString("bob"))),
                ("username", .string(JSONString(username))),
                ("timestamp", .string(JSONString(timestamp))),
                ("nonce", .string(JSONString(nonce))),
            ])
        ).canonicalBytes
    }
}
