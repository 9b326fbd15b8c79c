//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation

/// The MongoDB the tests use: `FORMATTEST_MONGODB_URI` when set (a real MongoDB, replica set or
/// not), otherwise a mongoeco wire server started here on a free loopback port from the
/// project's venv (`scripts/setup` makes it). The server watches its stdin and exits when this
/// test process ends.
public enum MongoTestServer {
    public struct Unavailable: Error, CustomStringConvertible {
        public let description: String
    }

    /// Kept open for the life of the test process: its end of file stops the server.
    nonisolated(unsafe) private static var lifeline: Pipe?

    /// The connection string, or why there is none.
    public static let uri: Result<String, Unavailable> = {
        if let uri = ProcessInfo.processInfo.environment["FORMATTEST_MONGODB_URI"], !uri.isEmpty {
            return .success(uri)
        }
        let python =
            ProcessInfo.processInfo.environment["FORMATTEST_MONGOECO_PYTHON"]
            ?? repositoryDirectory.appendingPathComponent(".venv-mongoeco/bin/python").path
        guard FileManager.default.isExecutableFile(atPath: python) else {
            return .failure(
                Unavailable(description: "no MongoDB: set FORMATTEST_MONGODB_URI, or run scripts/setup to create .venv-mongoeco with mongoeco[wire]"))
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [repositoryDirectory.appendingPathComponent("scripts/mongoeco_server.py").path, "--watch-stdin"]
        let output = Pipe()
        let input = Pipe()
        process.standardOutput = output
        process.standardInput = input
        do {
            try process.run()
        } catch {
            return .failure(Unavailable(description: "cannot start mongoeco: \(error)"))
        }
        Self.lifeline = input
        // The first line is "URI mongodb://127.0.0.1:PORT/?directConnection=true".
        var line = Data()
        while true {
            let byte = output.fileHandleForReading.readData(ofLength: 1)
            if byte.isEmpty || byte == Data([0x0A]) { break }
            line.append(byte)
        }
        let text = String(decoding: line, as: UTF8.self)
        guard text.hasPrefix("URI ") else {
            return .failure(Unavailable(description: "mongoeco did not start: \(text)"))
        }
        // mongoeco is one Python process serving every MongoDB suite of a run at once: under the
        // full suite's load a new client waited past the product's 2 s server selection (a 503 in
        // LiveCallerTests, a simulate command's exit 2 in SharedStoreTests), never when alone.
        // The tests' clients wait longer; failing fast is tested with URIs of their own.
        return .success(String(text.dropFirst(4)) + "&serverSelectionTimeoutMS=60000&connectTimeoutMS=60000")
    }()
}
