//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
import Foundation
import RFC3339

/// The `--json` output of the commands whose answer is not one of `FormAttestResponses`' types
/// (`wrap`'s summary, `pool status`, `simulate`, `evidence verify`, `receipt refresh`): RFC 8785
/// text like every other answer, dates to the second.
package enum JSONOutput {
    package static func string(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .rfc3339UTC(fractionDigits: 0)
        return String(decoding: try CanonicalJSON.canonicalize(encoding: value, encoder: encoder), as: UTF8.self)
    }
}
