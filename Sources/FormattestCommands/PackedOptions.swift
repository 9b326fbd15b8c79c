//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import ArgumentParser
import FormAttestTokens
import Foundation

/// The FIDO2 `packed` format's authority and relying party, as `wrap --format packed` takes them
/// (`serve` reads the same two settings into a ``PackedSource`` directly).
package struct PackedOptions: ParsableArguments {
    @Option(
        name: .customLong("attestation-ca"),
        help: "The attestation authority's directory (formattest keys attestation-ca generate), for the packed format.")
    var directory: String?

    @Option(name: .customLong("rp-id"), help: "The WebAuthn relying party id whose SHA-256 the packed format's authenticator data carries.")
    var relyingPartyID: String?

    package init() {}

    /// The values, checked (``PackedSource/init(directory:relyingPartyID:name:)``).
    var source: PackedSource {
        get throws { try PackedSource(directory: self.directory, relyingPartyID: self.relyingPartyID) }
    }

    package func validate() throws {
        _ = try self.source
    }

    /// The authority and relying party, when configured.
    func packed() throws -> (authority: PackedAttestationAuthority, relyingPartyID: String)? {
        try self.source.packed()
    }
}

/// Where the `packed` format's authority comes from, and its relying party: ``PackedOptions``'
/// values for `wrap`, `serve`'s `attestation-ca` and `rp-id` settings for `serve`. Its initializer
/// is the one check of the two, whichever command gives them.
package struct PackedSource: Sendable {
    /// The authority's directory; nil when the format is not configured.
    package let directory: String?
    package let relyingPartyID: String?
    /// How messages name the directory's setting (`--attestation-ca`, with its source on `serve`).
    let directoryName: String

    /// - Parameter name: how a message names the setting of a key: its flag (``Setting/flag(_:)``),
    ///   or on `serve` its flag and its source (``ServeSettings/Resolved/name(_:)``).
    /// - Throws: `ValidationError` when one of the two is given without the other, or the relying
    ///   party id is not text.
    init(directory: String?, relyingPartyID: String?, name: (String) -> String = Setting.flag) throws {
        guard (directory == nil) == (relyingPartyID == nil) else {
            throw ValidationError("\(name("attestation-ca")) and \(name("rp-id")) go together.")
        }
        if let relyingPartyID { try Setting.checkText(relyingPartyID, name("rp-id")) }
        self.directory = directory
        self.relyingPartyID = relyingPartyID
        self.directoryName = name("attestation-ca")
    }

    /// `serve`'s `attestation-ca` and `rp-id`, through the same check.
    ///
    /// - Throws: ``UsageError`` naming each setting given with its source.
    package init(_ settings: ServeSettings.Resolved) throws {
        self = try settings.reported {
            try PackedSource(directory: settings.textIfSet("attestation-ca"), relyingPartyID: settings.textIfSet("rp-id"), name: settings.name)
        }
    }

    /// The authority and relying party, when configured.
    func packed() throws -> (authority: PackedAttestationAuthority, relyingPartyID: String)? {
        guard let directory = self.directory, let relyingPartyID = self.relyingPartyID else { return nil }
        do {
            return (try PackedAttestationAuthorityDirectory(directory: URL(fileURLWithPath: directory)).load(), relyingPartyID)
        } catch {
            throw UsageError("\(self.directoryName) \(directory): \(error)")
        }
    }
}
