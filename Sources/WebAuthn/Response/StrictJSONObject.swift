//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON

/// Parses `bytes` as one JSON object with the project's strict RFC 8785 parser (duplicate
/// members, ill-formed UTF-8, lone surrogates and control characters refused), after the size
/// limit and with the depth limit.
///
/// - Throws: ``WebAuthnError/Code/responseTooLarge`` over `limit`; `malformed` for anything else.
func strictJSONObject(
    _ bytes: some Collection<UInt8>,
    limit: Int,
    what: String,
    malformed: WebAuthnError.Code
) throws(WebAuthnError) -> JSONValue {
    guard bytes.count <= limit else {
        throw WebAuthnError(code: .responseTooLarge, reason: "\(what) has \(bytes.count) bytes; the limit is \(limit)")
    }
    let value: JSONValue
    do {
        value = try CanonicalJSON.parse(bytes, limits: .init(maximumSize: limit, maximumDepth: WebAuthnLimits.maximumJSONDepth))
    } catch {
        throw WebAuthnError(code: malformed, reason: "\(what) is not strict JSON: \(error.reason)")
    }
    guard case .object = value else {
        throw WebAuthnError(code: malformed, reason: "\(what) is not a JSON object")
    }
    return value
}
