//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import CanonicalJSON

/// A JSON document FormAttest answers with (an HTTP API body, or `--json` output of the CLI).
///
/// Each conforming type names the schema in `schemas/openapi.yaml` (`components/schemas`) that
/// describes it; a test encodes a sample of every conforming type and validates it against that
/// schema, and fails for a type that names none.
///
/// Binary fields are base64url without padding, key ids included (docs/formats.md, Encodings).
public protocol APIResponse: Encodable, Sendable {
    /// The name of the schema under `components/schemas` of `schemas/openapi.yaml`.
    static var schemaName: String { get }

    /// The document as a JSON value. The default encodes the type's `Encodable` conformance with
    /// ``JSONValueEncoder``; a type on the service's hot path may build the same value member by
    /// member (a test holds each such type equal to its `Encodable` encoding).
    func jsonValue() throws -> JSONValue
}

extension APIResponse {
    /// The RFC 8785 bytes: encoded straight into a `JSONValue` (``JSONValueEncoder``, no JSON
    /// text in between), then written by the canonical writer. The responses hold integers below
    /// 2^53 (counters, counts, categories), strings and booleans; dates are pre-formatted strings.
    ///
    /// - Throws: `EncodingError` for a number JSON cannot hold exactly or a duplicated member
    ///   name (neither happens for these types).
    public func canonicalBytes() throws -> [UInt8] {
        try self.jsonValue().canonicalBytes
    }

    public func jsonValue() throws -> JSONValue {
        try JSONValueEncoder().encode(self)
    }
}
