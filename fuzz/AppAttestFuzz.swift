//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

// libFuzzer target: the strict CBOR decoder, authenticator data (both shapes) and assertions.
// Built by scripts/fuzz from the pure sources of Sources/AppAttest. Any input must either parse
// or throw AppAttestError; a trap or a sanitizer report is a finding.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if let item = try? CBORDecoder.decode(bytes) {
        // A decoded item's ranges must lie inside the input.
        precondition(item.range == 0..<bytes.count, "the top-level item must span the input")
    }
    _ = try? CBORDecoder.decodePrefix(bytes)
    _ = try? AuthenticatorData(bytes: bytes, kind: .attestation)
    _ = try? AuthenticatorData(bytes: bytes, kind: .assertion)
    _ = try? AssertionObject(cborEncoded: bytes)
    return 0
}
