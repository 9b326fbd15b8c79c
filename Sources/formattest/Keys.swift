//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import ArgumentParser
import CanonicalJSON
import Crypto
import FormAttestTokens
import Foundation

/// The server's JWS signing key.
struct Keys: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Generate, show or publish the server's JWS signing key.",
        subcommands: [Generate.self, Show.self, JWKS.self]
    )

    struct Generate: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create the signing key, or rotate it (the previous key stays in the JWKS); print its kid."
        )
        @OptionGroup var signing: SigningOptions

        func run() throws {
            let directory = self.signing.keyDirectory
            let keys = FileManager.default.fileExists(atPath: directory.currentKeyFile.path)
                ? try directory.rotate() : try directory.loadOrCreate()
            print(keys.currentKeyID)
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the current key's kid and public key.")
        @OptionGroup var signing: SigningOptions

        func run() throws {
            let keys = try self.signing.keys()
            print("kid: \(keys.currentKeyID)")
            print(keys.current.publicKey.pemRepresentation)
        }
    }

    struct JWKS: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the JWKS document (current and previous keys).")
        @OptionGroup var signing: SigningOptions

        func run() throws {
            FileHandle.standardOutput.write(Data(try self.signing.keys().jwks.canonicalBytes + [0x0A]))
        }
    }
}
