//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import ArgumentParser
import FormAttestDevSimulator
import FormattestCommands

/// `formattest-dev`: the developer tools, apart from the product's binary because they link the
/// simulator (a CA that mints attestations a verifier configured with its root accepts).
///
/// Same exit codes as `formattest`: 0 success, 1 rejected, 2 usage or I/O error.
struct FormattestDev: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "formattest-dev",
        abstract: "FormAttest's developer tools: benchmarks, the simulated device, the service with the demo's simulator.",
        version: "0.1.0",
        subcommands: [ServeDev.self, Simulate.self, Pool.self, Bench.self, Load.self, Soak.self, LogBench.self]
    )
}

/// `formattest-dev serve`: `formattest serve` with `--dev-simulator` available (the demo page's
/// simulated device at `POST /api/dev/simulate`, its CA trusted). Every other setting is the same.
struct ServeDev: AsyncParsableCommand {
    static let configuration = ServeOptions.configuration

    @OptionGroup var options: ServeOptions

    func run() async throws {
        try await self.options.run { appID in
            let simulated = try SimulatedDevelopmentDevice.make(appID: appID)
            return (simulated.device, simulated.trustAnchor, simulated.receiptTrustAnchor)
        }
    }
}

@main
enum FormattestDevMain {
    static func main() async {
        await CommandLineMain.run(FormattestDev.self)
    }
}
