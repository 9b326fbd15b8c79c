//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

package import ArgumentParser
import Foundation

/// `formattest`: the product's commands over the FormAttest libraries. The developer tools
/// (`bench`, `simulate`, `pool`, `serve --dev-simulator`) are `formattest-dev`'s: this module never
/// links the simulator.
///
/// Exit codes are a contract for scripts: 0 success, 1 rejected (verification failed or invalid
/// input document), 2 usage or I/O error.
package struct Formattest: AsyncParsableCommand {
    package static let configuration = CommandConfiguration(
        commandName: "formattest",
        abstract: "Verify Apple App Attest attestations and assertions over signed forms.",
        version: "0.1.0",
        subcommands: [
            Serve.self, Docs.self, Verify.self, Inspect.self, Receipt.self, Wrap.self, EvidenceCommand.self, Keys.self, DeviceKeys.self,
            Canonicalize.self, Hash.self,
        ]
    )

    package init() {}
}

/// Runs a root command with the exit-code contract: 0, 1 (``ExitCode``), or 2 for a usage or I/O
/// problem (ArgumentParser would say 64). Help and version requests exit 0.
package enum CommandLineMain {
    package static func run(_ root: any ParsableCommand.Type) async {
        do {
            var command = try root.parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let exitCode as ExitCode {
            exit(exitCode.rawValue)
        } catch {
            let message = root.fullMessage(for: error)
            if root.exitCode(for: error).isSuccess {
                print(message)
                exit(0)
            }
            FileHandle.standardError.write(Data((message + "\n").utf8))
            exit(2)
        }
    }
}

/// A usage or I/O problem: exit 2 with this message.
package struct UsageError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}
