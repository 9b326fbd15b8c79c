//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import AppAttest
import AppAttestSimulator
import ArgumentParser
import CanonicalJSON
import FormAttestForm
import FormattestCommands
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import RFC3339

/// `formattest-dev soak`: hours of load in minutes' clothing. Unlike `load`, which replays bodies
/// signed beforehand, it signs each form as it sends it (timestamp now, a fresh nonce, the key's
/// next counter), so the service can run with a short form window and its replay records expire
/// and are purged during the run, as they do in production.
///
/// The keys are the simulated device's (`--seed`), registered to users `backlog-i` by
/// `formattest-dev simulate backlog --keys N` (counter 0). Connection `c` signs with keys
/// `c, c + C, ...` in turn, one request at a time, so each key's counters arrive in order.
/// With `--rate`, each connection sends on a fixed schedule and a request's latency counts from
/// when it was due (a slow answer delays the next send and shows in its latency); without, each
/// request goes as soon as the last was answered (saturation).
///
/// Prints one JSON line per `--window`: requests, rate, p50/p99/p99.9/max latency, status
/// errors, and, for the server given by `--server-pid` and `--database`, its CPU per request,
/// resident memory, and the database's and write-ahead log's sizes. benchmarks/soak/ plots them.
struct Soak: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Sign and send fresh assert requests for a long run, one JSON line of figures per window (docs/performance.md)."
    )

    @OptionGroup var target: LoadTarget
    @Option(help: "Keys registered by `simulate backlog --keys N` with the same --seed (at least --connections).")
    var keys: Int
    @Option var seed: UInt64 = 1
    @Option(name: .customLong("app-id")) var appID = "ABCDE12345.com.formattest.demo"
    @Option(name: .customLong("first-counter"), help: "The counter of each key's first assertion (above the stored one).")
    var firstCounter: UInt32 = 1
    @Option(help: "Connections.")
    var connections = 4
    @Option(help: "Seconds of load.")
    var duration: Double
    @Option(help: "Requests per second in all (a fixed schedule); 0: as fast as the answers come.")
    var rate: Double = 0
    @Option(help: "Seconds per reported window.")
    var window: Double = 60
    @Option(name: .customLong("server-pid"), help: "The server's process id (its CPU and memory are read from /proc).")
    var serverPID: Int32?
    @Option(help: "The server's SQLite file (its size and its -wal file's are reported).")
    var database: String?

    func validate() throws {
        guard (1...1024).contains(self.connections) else { throw ValidationError("--connections must be 1 to 1024") }
        guard self.keys >= self.connections else { throw ValidationError("--keys must be at least --connections") }
        guard self.duration > 0, self.duration <= 86_400 else { throw ValidationError("--duration must be above 0 and at most 86400 s") }
        guard self.window >= 1, self.window <= self.duration else { throw ValidationError("--window must be 1 s to --duration") }
        guard self.rate >= 0, self.rate <= 1_000_000 else { throw ValidationError("--rate must be 0 to 1000000") }
    }

    /// One window's figures.
    struct WindowReport: Encodable {
        var window: Int
        var endSeconds: Double
        var requests: Int
        var requestsPerSecond: Double
        var p50Microseconds: UInt64
        var p99Microseconds: UInt64
        var p999Microseconds: UInt64
        var maxMicroseconds: UInt64
        var statusErrors: Int
        var generatorCPUMicrosecondsPerRequest: Int?
        var serverCPUMicrosecondsPerRequest: Int?
        var serverRSSBytes: Int?
        var databaseBytes: Int?
        var walBytes: Int?
    }

    func run() async throws {
        let authority = try SimulatedAttestationAuthority()
        let device = SimulatedDevice(authority: authority, appID: self.appID, seed: self.seed)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let interval = self.rate > 0 ? TimeAmount.nanoseconds(Int64(Double(self.connections) / self.rate * 1e9)) : nil

        let signers = (0..<self.connections).map { connection in
            RequestSigner(
                device: device,
                keyIndexes: Array(stride(from: connection, to: self.keys, by: self.connections)),
                firstCounter: self.firstCounter,
                connection: connection,
                target: self.target
            )
        }
        let opened = await self.target.connect(on: loop, signers.map { signer in { LoadConnection(source: { signer.next() }, interval: interval) } })
        let duration = TimeAmount.nanoseconds(Int64(self.duration * 1e9))
        let windowLength = TimeAmount.nanoseconds(Int64(self.window * 1e9))
        let windows = SoakWindows(channels: opened, sampler: ServerSampler(pid: self.serverPID, database: self.database), window: self.window)
        // The windows that end before the run: the last one (shorter, when the duration is not a
        // multiple of the window) ends with it.
        let windowCount = Int((self.duration / self.window).rounded(.up))
        let lastWindow = self.duration - Double(windowCount - 1) * self.window
        let results = try await loop.flatSubmit { () -> EventLoopFuture<[ConnectionResult]> in
            let start = NIODeadline.now()
            windows.begin(at: start)
            // Each window but the last: drain every connection's latencies, then print the window's line.
            if windowCount > 1 {
                _ = loop.scheduleRepeatedTask(initialDelay: windowLength, delay: windowLength) { task in
                    windows.report()
                    if windows.reported >= windowCount - 1 { task.cancel() }
                }
            }
            return LoadTarget.begin(opened, on: loop, end: start + duration)
        }.get()
        // The last window's line, from what each connection recorded after the last drain and
        // returned when it ended. (Drained from the connections, as the others are, it was
        // empty: the report ran at the run's deadline, when that deadline had just closed every
        // connection and removed its handler.)
        try await loop.submit { windows.report(final: results, length: lastWindow) }.get()
        try await group.shutdownGracefully()
        let failed = results.filter(\.connectFailed).count + results.reduce(0) { $0 + $1.readErrors + $1.timeouts }
        if failed > 0 { throw UsageError("\(failed) connection(s) failed or timed out") }
    }
}

/// The soak's windows: each drains every connection's latencies and prints one line. Confined to
/// the connections' event loop.
private final class SoakWindows: @unchecked Sendable {
    private let channels: [(any Channel)?]
    /// Each connection's handler, found in its first channel's pipeline when the run begins: it
    /// carries on over the connections it opens when the server closes one.
    private var connections: [LoadConnection] = []
    private let sampler: ServerSampler
    private let window: Double
    private var start = NIODeadline.uptimeNanoseconds(0)
    private var index = 0
    private var last: ServerSampler.Sample
    /// The windows reported so far.
    var reported: Int { self.index }

    init(channels: [(any Channel)?], sampler: ServerSampler, window: Double) {
        self.channels = channels
        self.sampler = sampler
        self.window = window
        self.last = sampler.sample()
    }

    func begin(at start: NIODeadline) {
        self.start = start
        self.last = self.sampler.sample()
        self.connections = self.channels.compactMap { channel in
            channel.flatMap { try? $0.pipeline.syncOperations.handler(type: LoadConnection.self) }
        }
    }

    /// Drains every connection and prints the window that ends now.
    func report() {
        var latencies: [UInt64] = []
        var statusErrors = 0
        for handler in self.connections {
            let drained = handler.drain()
            latencies += drained.latencies
            statusErrors += drained.statusErrors
        }
        self.emit(latencies: latencies, statusErrors: statusErrors, length: self.window)
    }

    /// Prints the last window, `length` seconds long, from the connections' final results (what
    /// they recorded after the last drain).
    func report(final results: [ConnectionResult], length: Double) {
        self.emit(latencies: results.flatMap(\.latencies), statusErrors: results.reduce(0) { $0 + $1.statusErrors }, length: length)
    }

    private func emit(latencies unsorted: [UInt64], statusErrors: Int, length: Double) {
        self.index += 1
        let latencies = unsorted.sorted()
        let sample = self.sampler.sample()
        let requests = latencies.count
        func perRequest(_ difference: Int?) -> Int? { requests > 0 ? difference.map { $0 / requests } : nil }
        let report = Soak.WindowReport(
            window: self.index,
            endSeconds: Double((NIODeadline.now() - self.start).nanoseconds) / 1e9,
            requests: requests,
            requestsPerSecond: Double(requests) / length,
            p50Microseconds: Load.percentile(50, of: latencies),
            p99Microseconds: Load.percentile(99, of: latencies),
            p999Microseconds: Load.percentile(99.9, of: latencies),
            maxMicroseconds: latencies.last ?? 0,
            statusErrors: statusErrors,
            generatorCPUMicrosecondsPerRequest: perRequest(sample.generatorCPU - self.last.generatorCPU),
            serverCPUMicrosecondsPerRequest: perRequest(sample.serverCPU.flatMap { now in self.last.serverCPU.map { now - $0 } }),
            serverRSSBytes: sample.serverRSS,
            databaseBytes: sample.databaseBytes,
            walBytes: sample.walBytes
        )
        self.last = sample
        if let line = try? JSONOutput.string(report) {
            // Written at once (not through print's buffer), so that a pipe sees each window as it ends.
            FileHandle.standardOutput.write(Data((line + "\n").utf8))
        }
    }
}

/// Signs one connection's requests as they are sent: its keys in turn, each with its next
/// counter, over a fresh form stamped now. Confined to the connection's event loop.
private final class RequestSigner: @unchecked Sendable {
    private let device: SimulatedDevice
    private let keys: [(key: SimulatedKey, username: String, keyID: String)]
    private var counters: [UInt32]
    private var sent = 0
    private let connection: Int
    private let target: LoadTarget

    init(device: SimulatedDevice, keyIndexes: [Int], firstCounter: UInt32, connection: Int, target: LoadTarget) {
        self.device = device
        self.keys = keyIndexes.map { index in
            let key = device.key(index)
            return (key, "backlog-\(index)", Base64URL.encode(key.keyID))
        }
        self.counters = Array(repeating: firstCounter, count: keyIndexes.count)
        self.connection = connection
        self.target = target
    }

    func next() -> LoadRequest? {
        let slot = self.sent % self.keys.count
        let (key, username, keyID) = self.keys[slot]
        let counter = self.counters[slot]
        self.sent += 1
        self.counters[slot] = counter &+ 1
        let form = DemoTransferForm.bytes(
            username: username,
            timestamp: RFC3339UTC.format(Date()),
            nonce: "soak-\(self.connection)-\(self.sent)-\(UUID().uuidString)"
        )
        guard let signed = try? SignedForm(jsonBytes: form), let parsed = try? CanonicalJSON.parse(form),
            let assertion = try? self.device.assert(key, clientDataHash: signed.clientDataHash, counter: counter)
        else { return nil }
        let body = JSONValue.object(
            JSONObject(constantMembers: [
                ("username", .string(JSONString(username))),
                ("keyId", .string(JSONString(keyID))),
                ("assertion", .string(JSONString(Base64URL.encode(assertion)))),
                ("form", parsed),
            ])
        ).canonicalBytes
        return self.target.request(body: ByteBuffer(bytes: body))
    }
}

/// The generator's and the server's resource figures at one moment.
private struct ServerSampler: Sendable {
    let pid: Int32?
    let database: String?

    struct Sample {
        var generatorCPU: Int
        var serverCPU: Int?
        var serverRSS: Int?
        var databaseBytes: Int?
        var walBytes: Int?
    }

    func sample() -> Sample {
        Sample(
            generatorCPU: Load.cpuMicroseconds(),
            serverCPU: self.pid.flatMap(Self.cpuMicroseconds),
            serverRSS: self.pid.flatMap(Self.residentBytes),
            databaseBytes: self.database.flatMap(Self.size),
            walBytes: self.database.flatMap { Self.size($0 + "-wal") }
        )
    }

    /// utime + stime of /proc/PID/stat (fields 14 and 15, after the parenthesized name).
    static func cpuMicroseconds(_ pid: Int32) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // After the name: state is field 3, so utime (14) and stime (15) are at 11 and 12.
        guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else { return nil }
        let ticks = sysconf(Int32(_SC_CLK_TCK))
        guard ticks > 0 else { return nil }
        return (user + system) * 1_000_000 / ticks
    }

    /// VmRSS of /proc/PID/status.
    static func residentBytes(_ pid: Int32) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
        else { return nil }
        return line.split(separator: " ").dropFirst().first.flatMap { Int($0) }.map { $0 * 1024 }
    }

    static func size(_ path: String) -> Int? {
        (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.intValue
    }
}
