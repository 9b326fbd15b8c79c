//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormattestCommands

/// `formattest`: the product's executable. The commands are `FormattestCommands`'; this binary
/// contains no simulator (the developer tools are `formattest-dev`).
@main
enum FormattestMain {
    static func main() async {
        await CommandLineMain.run(Formattest.self)
    }
}
