//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import ArgumentParser
import Foundation

/// `formattest`: one executable, thin commands over the FormAttest libraries.
///
/// Exit codes are a contract for scripts: 0 success, 1 rejected (verification failed or invalid
/// input document), 2 usage or I/O error.
struct Formattest: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "formattest",
        abstract: "Verify Apple App Attest attestations and assertions over signed forms.",
        version: "0.1.0",
        subcommands: [Serve.self, Docs.self, Verify.self, Inspect.self, Receipt.self, Wrap.self, EvidenceCommand.self, Keys.self, DeviceKeys.self, Canonicalize.self, Hash.self, Pool.self, Simulate.self, Bench.self]
    )
}

@main
enum FormattestMain {
    static func main() async {
        do {
            var command = try Formattest.parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let exitCode as ExitCode {
            exit(exitCode.rawValue)
        } catch {
            // Help and version requests are "errors" that exit 0; everything else here is a usage
            // or I/O problem, which the contract reports as exit 2 (ArgumentParser would say 64).
            let message = Formattest.fullMessage(for: error)
            if Formattest.exitCode(for: error).isSuccess {
                print(message)
                exit(0)
            }
            FileHandle.standardError.write(Data((message + "\n").utf8))
            exit(2)
        }
    }
}

/// A usage or I/O problem: exit 2 with this message.
struct UsageError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
