//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation
import FormAttestTestSupport
import Testing

/// Faults under load (tests/faults/fault_test.py): the service killed mid-load and restarted on
/// SQLite, and MongoDB killed mid-load and brought back. Every form ends accepted exactly once,
/// outages answer 503, and every accepted form is a replay afterwards.
struct FaultTests {
    @Test("kill -9 mid-load on SQLite, and MongoDB down mid-load: nothing accepted is lost or accepted twice")
    func faultsUnderLoad() throws {
        let check = try PythonCheck(venv: ".venv-mongoeco", overrideVariable: "FORMATTEST_MONGOECO_PYTHON")
        let files = try TemporaryFiles()
        let result = try check.run(
            "tests/faults/fault_test.py",
            ["--binary", Formattest.executable.path, "--mongoeco-python", check.python.path, "--work", files.directory.path]
        )
        #expect(result.status == 0, "\(result.output)")
        #expect(result.output.contains(" passed, 0 failed"), "\(result.output)")
        for line in result.output.split(separator: "\n") where line.hasPrefix("sqlite restart:") || line.hasPrefix("mongodb outage:") {
            print(line)
        }
    }
}
