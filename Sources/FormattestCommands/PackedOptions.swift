//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import ArgumentParser
import FormAttestTokens
import Foundation

/// The FIDO2 `packed` format's authority and relying party (`wrap --format packed`, `serve`).
struct PackedOptions: ParsableArguments {
    @Option(
        name: .customLong("attestation-ca"),
        help: "The attestation authority's directory (formattest keys attestation-ca generate), for the packed format.")
    var directory: String?

    @Option(name: .customLong("rp-id"), help: "The WebAuthn relying party id whose SHA-256 the packed format's authenticator data carries.")
    var relyingPartyID: String?

    func validate() throws {
        guard (self.directory == nil) == (self.relyingPartyID == nil) else {
            throw ValidationError("--attestation-ca and --rp-id go together.")
        }
        if let relyingPartyID { try Setting.checkText(relyingPartyID, "--rp-id") }
    }

    /// The authority and relying party, when configured.
    func packed() throws -> (authority: PackedAttestationAuthority, relyingPartyID: String)? {
        guard let directory = self.directory, let relyingPartyID = self.relyingPartyID else { return nil }
        do {
            return (try PackedAttestationAuthorityDirectory(directory: URL(fileURLWithPath: directory)).load(), relyingPartyID)
        } catch {
            throw UsageError("--attestation-ca \(directory): \(error)")
        }
    }
}
