//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON

/// Reads `bytes` as one JSON object with the project's strict RFC 8785 parser (duplicate
/// members at every level, ill-formed UTF-8, lone surrogates and control characters refused),
/// after the size limit and with the depth limit. Every value is checked; none is built: the
/// caller takes the members it needs from the input's bytes.
///
/// - Throws: ``WebAuthnError/Code/responseTooLarge`` over `limit`; `malformed` for anything else.
func strictJSONObject(
    _ bytes: some Collection<UInt8>,
    limit: Int,
    what: String,
    malformed: WebAuthnError.Code
) throws(WebAuthnError) -> JSONObjectMembers {
    guard bytes.count <= limit else {
        throw WebAuthnError(code: .responseTooLarge, reason: "\(what) has \(bytes.count) bytes; the limit is \(limit)")
    }
    do {
        return try JSONObjectMembers(
            parsing: bytes,
            limits: .init(maximumSize: limit, maximumDepth: WebAuthnLimits.maximumJSONDepth)
        )
    } catch {
        throw WebAuthnError(code: malformed, reason: "\(what) is not strict JSON: \(error.reason)")
    }
}

extension JSONObjectMembers {
    /// The member `name` when it is a string: its unescaped UTF-8.
    func stringBytes(_ name: String) -> ArraySlice<UInt8>? {
        guard let value = self[name], value.kind == .string else { return nil }
        return self.string(value)
    }

    /// The member `name` when it is a string.
    func stringValue(_ name: String) -> String? {
        self.stringBytes(name).map { String(decoding: $0, as: UTF8.self) }
    }
}
