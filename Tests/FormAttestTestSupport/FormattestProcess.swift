//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

public import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Runs the built `formattest` executable (or `formattest-dev` for the developer tools), for every
/// test target that runs the binaries: the CLI's tests and the system tests.
public enum Formattest {
    public struct Result {
        public var status: Int32
        public var stdout: String
        public var stderr: String

        public func jsonObject() throws -> [String: Any] {
            let object = try JSONSerialization.jsonObject(with: Data(self.stdout.utf8))
            guard let dictionary = object as? [String: Any] else {
                throw CocoaError(.propertyListReadCorrupt)
            }
            return dictionary
        }
    }

    /// The executable beside the test bundle (SwiftPM puts both in the products directory).
    public static var executable: URL {
        if let override = ProcessInfo.processInfo.environment["FORMATTEST_BINARY"] {
            return URL(fileURLWithPath: override)
        }
        var directory = Bundle.main.bundleURL
        if directory.pathExtension == "xctest" {
            directory.deleteLastPathComponent()
        }
        return directory.appendingPathComponent("formattest")
    }

    /// The developer executable beside it (`bench`, `simulate`, `pool`, `load`, `soak`, `serve --dev-simulator`).
    public static var developerExecutable: URL {
        if let override = ProcessInfo.processInfo.environment["FORMATTEST_DEV_BINARY"] {
            return URL(fileURLWithPath: override)
        }
        return Self.executable.deletingLastPathComponent().appendingPathComponent("formattest-dev")
    }

    /// The binary that has the command: the developer tools are `formattest-dev`'s alone (the
    /// product's binary contains no simulator; `FormattestCLITests` show that it refuses them).
    public static func executable(for arguments: [String]) -> URL {
        guard let command = arguments.first else { return Self.executable }
        let developer =
            ["bench", "simulate", "pool", "load", "soak"].contains(command) || (command == "serve" && arguments.contains("--dev-simulator"))
        return developer ? Self.developerExecutable : Self.executable
    }

    /// A started process; ``finish()`` collects its output.
    public struct Running {
        public let process: Process
        public let output: Pipe
        public let errors: Pipe

        /// Sends SIGTERM and waits up to `seconds` for the process to exit; kills it otherwise.
        /// The wait runs on a dispatch thread (``Formattest/offloaded(_:)``).
        /// - Returns: whether it exited by itself in time.
        public func terminate(within seconds: Double) async -> Bool {
            await Formattest.offloaded { self.blockingTerminate(within: seconds) }
        }

        /// The same, blocking the calling thread: for `defer` blocks and synchronous code.
        public func terminate(within seconds: Double) -> Bool { self.blockingTerminate(within: seconds) }

        private func blockingTerminate(within seconds: Double) -> Bool {
            self.process.terminate()
            let deadline = Date().addingTimeInterval(seconds)
            while self.process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
            guard !self.process.isRunning else {
                kill(self.process.processIdentifier, SIGKILL)
                self.process.waitUntilExit()
                return false
            }
            return true
        }

        /// Reads both pipes to their end and waits for the exit, on a dispatch thread
        /// (``Formattest/offloaded(_:)``).
        public func finish() async -> Result {
            await Formattest.offloaded { self.blockingFinish() }
        }

        /// The same, blocking the calling thread: for synchronous code.
        public func finish() -> Result { self.blockingFinish() }

        fileprivate func blockingFinish() -> Result {
            // Read stderr on another thread so that neither pipe can fill up and block the child.
            let errors = self.errors
            let stderrData = LockedData()
            let reader = Thread { stderrData.set(errors.fileHandleForReading.readDataToEndOfFile()) }
            reader.start()
            let stdoutData = self.output.fileHandleForReading.readDataToEndOfFile()
            self.process.waitUntilExit()
            while !stderrData.isSet { Thread.sleep(forTimeInterval: 0.001) }
            return Result(
                status: self.process.terminationStatus,
                stdout: String(decoding: stdoutData, as: UTF8.self),
                stderr: String(decoding: stderrData.value, as: UTF8.self)
            )
        }
    }

    public static func start(_ arguments: [String], stdin: Data? = nil, environment: [String: String] = [:], currentDirectory: URL? = nil) throws
        -> Running
    {
        try self.start(arguments, stdin: stdin, keepStdinOpen: false, environment: environment, currentDirectory: currentDirectory)
    }

    /// - Parameters:
    ///   - environment: variables set for the child on top of this process's, without any
    ///     FORMATTEST_* setting of this process when given.
    ///   - currentDirectory: the child's working directory (default: this process's).
    ///   - executable: the binary to run (default: the one that has the command).
    public static func start(
        _ arguments: [String],
        stdin: Data?,
        keepStdinOpen: Bool,
        environment: [String: String] = [:],
        currentDirectory: URL? = nil,
        executable: URL? = nil
    ) throws -> Running {
        let process = Process()
        process.executableURL = executable ?? Self.executable(for: arguments)
        process.arguments = arguments
        if let currentDirectory { process.currentDirectoryURL = currentDirectory }
        var variables = ProcessInfo.processInfo.environment
        if !environment.isEmpty {
            variables = variables.filter { !$0.key.hasPrefix("FORMATTEST_") }
            variables.merge(environment) { $1 }
        }
        // libmongoc (loaded by every command) warns on stderr at start when a killed process left
        // /dev/shm/mongoc-<pid> behind for the pid it got; its shared-memory counters are unused.
        variables["MONGOC_DISABLE_SHM"] = "1"
        process.environment = variables
        let output = Pipe()
        let errors = Pipe()
        let input = Pipe()
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = input
        try process.run()
        input.fileHandleForWriting.write(stdin ?? Data())
        if !keepStdinOpen { try input.fileHandleForWriting.close() }
        return Running(process: process, output: output, errors: errors)
    }

    /// Runs the executable to completion, waiting on a dispatch thread so that the few concurrency
    /// threads stay free for the tests running beside it (their timers, their in-process servers).
    public static func run(_ arguments: [String], stdin: Data? = nil, environment: [String: String] = [:], currentDirectory: URL? = nil) async throws
        -> Result
    {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(
                    with: Swift.Result {
                        try self.start(arguments, stdin: stdin, environment: environment, currentDirectory: currentDirectory).blockingFinish()
                    })
            }
        }
    }

    /// A port nothing listens on now: the kernel's choice for a socket bound to port 0 (another
    /// process may still take it before the caller does, but far less often than a random pick).
    /// Waits, when the current fixed rate-limit window (`seconds` long, aligned on the epoch as
    /// the service aligns them) has less than `margin` seconds left, until the next one begins:
    /// a test that counts requests to a limit must not see its count start over mid-way (three
    /// such tests failed together once, run across 23:00:00 UTC with a window of an hour).
    public static func awayFromWindowEdge(_ seconds: TimeInterval, margin: TimeInterval = 60) async throws {
        let left = seconds - Date().timeIntervalSince1970.truncatingRemainder(dividingBy: seconds)
        if left < margin { try await Task.sleep(for: .seconds(left + 1)) }
    }

    public static func freePort() -> Int {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0 }
        }
        return bound ? Int(UInt16(bigEndian: address.sin_port)) : Int.random(in: 20_000...60_000)
    }

    /// Runs blocking work (a wait for a child process, a pipe read to its end, a polling loop
    /// with `Thread.sleep`) for an async test. It runs on the calling thread, as these waits
    /// always did: dispatched to their own threads, they let every system test start its services
    /// at once, and in a fresh-clone CI run the in-process receipt tests were then starved past
    /// their 10 s deadlines (two failures; the same suite had passed before with the waits
    /// blocking). The async signature stays, so that a bound on the services started at once can
    /// replace this without touching the callers.
    public static func offloaded<T>(_ work: @escaping () -> T) async -> T {
        work()
    }

    /// Waits until something accepts TCP connections on 127.0.0.1:`port`, for at most `seconds`,
    /// or until `process` (when given) has exited: a server that failed to start is not waited for.
    /// The polling runs on a dispatch thread (``offloaded(_:)``).
    public static func waitForListener(port: Int, seconds: Double = 120, process: Process? = nil) async -> Bool {
        let process = UncheckedBox(process)
        return await Self.offloaded { Self.blockingWaitForListener(port: port, seconds: seconds, process: process.value) }
    }

    /// The same, blocking the calling thread: for synchronous code.
    public static func waitForListener(port: Int, seconds: Double = 120, process: Process? = nil) -> Bool {
        Self.blockingWaitForListener(port: port, seconds: seconds, process: process)
    }

    private static func blockingWaitForListener(port: Int, seconds: Double, process: Process?) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let process, !process.isRunning { return false }
            let socketDescriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard socketDescriptor >= 0 else { return false }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(socketDescriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            close(socketDescriptor)
            if connected == 0 { return true }
            Thread.sleep(forTimeInterval: 0.1)
        }
        return false
    }

    /// `verify attestation` of a real sample at its pinned time, with its clientDataHash, as JSON.
    public static func verifyArguments(_ sample: RealSample, attestationPath: String) throws -> [String] {
        guard let keyID = sample.keyID, let clientDataHash = sample.clientDataHash, let at = Self.rfc3339(sample.validAt) else {
            throw CocoaError(.coderValueNotFound, userInfo: [NSLocalizedDescriptionKey: "\(sample.name) has no keyId, clientDataHash or time"])
        }
        return [
            "verify", "attestation", "--attestation", attestationPath,
            "--key-id", Data(keyID).base64EncodedString(),
            "--app-id", sample.appID,
            "--client-data-hash", hexString(clientDataHash),
            "--at", at,
            "--json",
        ]
    }

    /// base64url without padding: how FormAttest writes key ids (docs/formats.md, Encodings).
    public static func base64url(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    public static func rfc3339(_ date: Date?) -> String? {
        guard let date else { return nil }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: date)
    }
}

/// Data handed from a reader thread.
final class LockedData: @unchecked Sendable {
    private let lock = NSLock()
    private var data: Data?

    func set(_ data: Data) { self.lock.withLock { self.data = data } }
    var isSet: Bool { self.lock.withLock { self.data != nil } }
    var value: Data { self.lock.withLock { self.data ?? Data() } }
}

/// A temporary directory removed when the value goes away.
public final class TemporaryFiles {
    public let directory: URL

    public init() throws {
        self.directory = FileManager.default.temporaryDirectory.appendingPathComponent("formattest-\(UUID().uuidString)")
        // 0700 whatever the umask: `serve` refuses a data directory other users may write.
        try FileManager.default.createDirectory(at: self.directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }

    deinit {
        try? FileManager.default.removeItem(at: self.directory)
    }

    public func write(_ data: Data, named name: String) throws -> String {
        let url = self.directory.appendingPathComponent(name)
        try data.write(to: url)
        return url.path
    }

    public func write(_ text: String, named name: String) throws -> String {
        try self.write(Data(text.utf8), named: name)
    }

    /// Writes a secret or key file readable by its owner alone (0600), as `serve` requires.
    public func writeSecret(_ text: String, named name: String) throws -> String {
        let path = try self.write(Data(text.utf8), named: name)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        return path
    }
}

/// A value handed to a dispatch thread and back: the test helpers' processes and pipes, which
/// Foundation does not mark `Sendable`, used by one thread at a time.
struct UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
