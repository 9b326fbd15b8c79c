//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Foundation

/// The repository the tests run from.
public let repositoryDirectory = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// Runs one of the repository's Python checks (e2e/…) with a venv that `scripts/setup` made.
///
/// Each check prints `N passed, M failed` last and exits non-zero on any failure.
public struct PythonCheck {
    public struct Missing: Error, CustomStringConvertible {
        public let description: String
    }

    public let python: URL

    /// - Parameters:
    ///   - venv: the venv's directory in the repository, such as `.venv-interop`.
    ///   - overrideVariable: an environment variable naming another interpreter.
    public init(venv: String, overrideVariable: String) throws {
        let path =
            ProcessInfo.processInfo.environment[overrideVariable]
            ?? repositoryDirectory.appendingPathComponent("\(venv)/bin/python").path
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw Missing(description: "no \(venv): run scripts/setup (or set \(overrideVariable))")
        }
        self.python = URL(fileURLWithPath: path)
    }

    /// Runs `script` (relative to the repository) and returns its exit status and combined output.
    public func run(_ script: String, _ arguments: [String]) async throws -> (status: Int32, output: String) {
        try await self.runTool(self.python, [repositoryDirectory.appendingPathComponent(script).path] + arguments)
    }

    /// Runs a command the venv installed (such as `schemathesis`), without terminal colours.
    public func run(tool name: String, _ arguments: [String]) async throws -> (status: Int32, output: String) {
        try await self.runTool(self.python.deletingLastPathComponent().appendingPathComponent(name), arguments)
    }

    /// Waits for the process on a dispatch thread: checks run for up to a minute, and a test that
    /// blocked one of the few concurrency threads that long would starve the others' timers.
    private func runTool(_ executable: URL, _ arguments: [String]) async throws -> (status: Int32, output: String) {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try Self.runBlocking(executable, arguments) })
            }
        }
    }

    private static func runBlocking(_ executable: URL, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["NO_COLOR"] = "1"
        process.environment = environment
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, output)
    }
}
