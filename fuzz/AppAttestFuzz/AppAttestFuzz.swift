//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

// libFuzzer target: the strict CBOR decoder, authenticator data (both shapes) and assertions, and
// the passkey verifier's parsers (WebAuthn authenticator data, attestation object, COSE key,
// clientDataJSON, the response JSON). Built by scripts/fuzz through SwiftPM (FORMATTEST_FUZZ=1
// adds this target) from the CBOR, AppAttest and WebAuthn modules. Any input must either parse or
// throw (CBORError, AppAttestError, WebAuthnError); a trap or a sanitizer report is a finding.

import AppAttest
import CBOR
import FuzzDriver
import WebAuthn

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
    _ = try? WebAuthnAuthenticatorData(bytes: bytes)
    _ = try? WebAuthnAttestationObject(bytes: bytes)
    _ = try? CredentialPublicKey(cborEncoded: bytes)
    _ = try? CollectedClientData(bytes: bytes)
    _ = try? RegistrationResponse(json: bytes)
    _ = try? AuthenticationResponse(json: bytes)
    return 0
}

// SwiftPM links an executable target's entry point as `<module>_main` (see FuzzDriver).
@_cdecl("AppAttestFuzz_main")
public func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Int32 {
    FuzzDriver.run(argc, argv) { data, size in fuzz(data, size) }
}
