//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import ArgumentParser
import CanonicalJSON
import Crypto
import FormAttestTokens
import Foundation
import SwiftASN1
import X509

/// The server's JWS signing key.
struct Keys: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Generate, show or publish the server's JWS signing key.",
        subcommands: [Generate.self, Show.self, JWKS.self, AttestationCA.self]
    )

    struct Generate: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a signing key and print its kid.",
            discussion: """
                With --signing-key PATH: write a new P-256 key to PATH (PKCS#8 PEM, mode 0600); an \
                existing file is refused unless --overwrite is given. Otherwise: create the data \
                directory's key, or rotate it (the previous key stays in the JWKS until the next \
                rotation: the JWKS holds the current and the previous key).
                """
        )
        @OptionGroup var signing: SigningOptions

        @Flag(help: "With --signing-key: replace the file if it exists.")
        var overwrite = false

        func validate() throws {
            if self.overwrite && self.signing.signingKeyPath == nil {
                throw ValidationError("--overwrite applies to --signing-key only (the data directory's key is rotated, never lost).")
            }
        }

        func run() throws {
            let keys: SigningKeys
            if let path = self.signing.signingKeyPath {
                do {
                    keys = try SigningKeyDirectory.generate(privateKeyPEM: path, overwrite: self.overwrite)
                } catch {
                    throw UsageError("\(error)")
                }
            } else {
                let directory = self.signing.keyDirectory
                do {
                    keys =
                        FileManager.default.fileExists(atPath: directory.currentKeyFile.path)
                        ? try directory.rotate() : try directory.loadOrCreate()
                } catch {
                    throw UsageError("cannot create the signing key in \(directory.directory.path): \(error)")
                }
            }
            print(keys.currentKeyID)
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the current key's kid and public key (never creates a key).")
        @OptionGroup var signing: SigningOptions

        func run() throws {
            let keys = try self.signing.existingKeys()
            print("kid: \(keys.currentKeyID)")
            print(keys.current.publicKey.pemRepresentation)
        }
    }

    struct JWKS: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the JWKS document: the current key, then the previous one (never creates a key).")
        @OptionGroup var signing: SigningOptions

        func run() throws {
            FileHandle.standardOutput.write(Data(try self.signing.existingKeys().jwks.canonicalBytes + [0x0A]))
        }
    }

    /// The deployment's attestation authority for the FIDO2 `packed` format.
    struct AttestationCA: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "attestation-ca",
            abstract: "Generate or show the attestation authority of the packed format (a root and a WebAuthn attestation certificate).",
            subcommands: [Generate.self, Show.self]
        )

        struct Generate: ParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Create the authority (refuses to replace one); print the root's PEM.")
            @Option(help: "Its directory.") var dir = "./formattest-data/attestation-ca"
            @Option(help: "Subject O (the deployment's organization).") var organization: String
            @Option(help: "Subject C (ISO 3166 two-letter country).") var country: String

            func validate() throws {
                try Setting.checkText(self.organization, "--organization")
                guard self.country.utf8.count == 2, self.country.utf8.allSatisfy({ $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") }) else {
                    throw ValidationError("--country is two upper-case letters (ISO 3166).")
                }
            }

            func run() throws {
                let authority: PackedAttestationAuthority
                do {
                    authority = try PackedAttestationAuthorityDirectory(directory: URL(fileURLWithPath: self.dir))
                        .generate(organization: self.organization, country: self.country)
                } catch {
                    throw UsageError("\(error)")
                }
                print(try authority.rootCertificate.serializeAsPEM().pemString)
            }
        }

        struct Show: ParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Print the root's PEM (what relying parties trust), the AAGUID and the attestation certificate's subject.")
            @Option(help: "Its directory.") var dir = "./formattest-data/attestation-ca"

            func run() throws {
                let authority: PackedAttestationAuthority
                do {
                    authority = try PackedAttestationAuthorityDirectory(directory: URL(fileURLWithPath: self.dir)).load()
                } catch {
                    throw UsageError("\(error)")
                }
                let hex = PackedAttestationAuthority.aaguid.map { String(format: "%02x", $0) }.joined()
                let parts = [hex.prefix(8), hex.dropFirst(8).prefix(4), hex.dropFirst(12).prefix(4), hex.dropFirst(16).prefix(4), hex.dropFirst(20)]
                print("aaguid: \(parts.joined(separator: "-"))")
                print("attestation certificate: \(authority.attestationCertificate.subject)")
                print(try authority.rootCertificate.serializeAsPEM().pemString)
            }
        }
    }
}
