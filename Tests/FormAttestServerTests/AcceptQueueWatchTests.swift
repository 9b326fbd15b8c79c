//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestServer
import Foundation
import Logging
import NIOCore
import NIOPosix
import Prometheus
import Testing

/// The accept-queue watch (``AcceptQueueWatch``, issue 31 r7 F7) on real listening sockets: the
/// kernel's count of connections waiting to be accepted is what the gauge and the log say.
struct AcceptQueueWatchTests {
    /// The warning lines a logger received.
    final class Lines: @unchecked Sendable {
        private let lock = NSLock()
        private var lines: [(message: String, metadata: Logger.Metadata, at: Date)] = []
        var all: [(message: String, metadata: Logger.Metadata, at: Date)] { self.lock.withLock { self.lines } }
        func add(_ message: String, _ metadata: Logger.Metadata) { self.lock.withLock { self.lines.append((message, metadata, Date())) } }
    }

    struct Capture: LogHandler {
        let lines: Lines
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .debug
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { self.metadata[key] }
            set { self.metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            if event.level >= .warning { self.lines.add("\(event.message)", event.metadata ?? [:]) }
        }
    }

    /// A listener on a free loopback port that accepts (`autoRead` on) or never does.
    static func listener(accepting: Bool) async throws -> any Channel {
        try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 16)
            .serverChannelOption(.autoRead, value: accepting)
            .childChannelInitializer { $0.eventLoop.makeSucceededVoidFuture() }
            .bind(host: "127.0.0.1", port: 0).get()
    }

    /// Three clients connected to `server` (the kernel completes the handshakes whether or not it accepts).
    static func connectThree(_ server: any Channel) async throws -> [any Channel] {
        let port = try #require(server.localAddress?.port)
        var clients: [any Channel] = []
        for _ in 0..<3 {
            clients.append(
                try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: "127.0.0.1", port: port).get())
        }
        return clients
    }

    static func gauge(_ listener: String, _ name: String = "formattest_listener_accept_queue") -> Double? {
        let text = ServiceHarness.metrics.emitToString()
        let prefix = "\(name){listener=\"\(listener)\"} "
        return text.split(separator: "\n").first { $0.hasPrefix(prefix) }.flatMap { Double($0.dropFirst(prefix.count)) }
    }

    static let waitingSeconds = "formattest_listener_accept_waiting_seconds_total"

    /// A listener (accepting or not) watched every 100 ms, three clients connected to it, and the
    /// warning lines the watch logged.
    /// The three clients connect before the watch starts, so its first reading finds them all
    /// (the full suite's load can hold this test's task between two connects for seconds).
    static func watched(accepting: Bool, name: String) async throws -> (listener: any Channel, clients: [any Channel], lines: Lines) {
        _ = ServiceHarness.metrics
        let lines = Lines()
        let logger = Logger(label: "accept-queue-test") { _ in Capture(lines: lines) }
        let listener = try await Self.listener(accepting: accepting)
        let clients = try await Self.connectThree(listener)
        AcceptQueueWatch.install(on: listener, listener: name, logger: logger, interval: .milliseconds(100))
        return (listener, clients, lines)
    }

    static func close(_ watched: (listener: any Channel, clients: [any Channel], lines: Lines)) async throws {
        for client in watched.clients { try? await client.close() }
        try await watched.listener.close()
    }

    @Test("connections the listener does not accept: the gauge reads 3 from the kernel, and after three readings one warning line says so")
    func unacceptedConnectionsSeen() async throws {
        let stuck = try await Self.watched(accepting: false, name: "stuck")
        let deadline = Date().addingTimeInterval(30)
        while stuck.lines.all.isEmpty && Date() < deadline { try await Task.sleep(for: .milliseconds(50)) }
        let line = try #require(stuck.lines.all.first, "no warning in 30 s")
        // Every reading that found the queue counted, those before the line too (a queue that
        // empties between readings still counts).
        let counted = Self.gauge("stuck", Self.waitingSeconds) ?? 0
        #expect(counted >= 3, "\(counted)")
        #expect(line.message.contains("new connections are waiting to be accepted"), "\(line.message)")
        #expect(line.metadata["queued"] == "3" && line.metadata["listener"] == "stuck", "\(line.metadata)")
        #expect(Self.gauge("stuck") == 3, "\(Self.gauge("stuck").map { "\($0)" } ?? "no gauge")")
        // Readings every 100 ms, lines 10 s apart at least, however many readings find the queue
        // (the test's own task may be held for seconds by the full suite's load: the lines'
        // times are taken where they are logged).
        try await Task.sleep(for: .milliseconds(500))
        let times = stuck.lines.all.map(\.at)
        #expect(zip(times, times.dropFirst()).allSatisfy { $1.timeIntervalSince($0) >= 9.5 }, "\(times)")
        try await Self.close(stuck)
    }

    @Test("the one change: a listener that accepts the same three connections: the gauge reads 0 and nothing is logged")
    func acceptedConnectionsQuiet() async throws {
        let accepting = try await Self.watched(accepting: true, name: "accepting")
        // Ten readings and more.
        try await Task.sleep(for: .milliseconds(1200))
        #expect(accepting.lines.all.isEmpty, "\(accepting.lines.all.map(\.message))")
        #expect((Self.gauge("accepting", Self.waitingSeconds) ?? 0) == 0)
        #expect(Self.gauge("accepting") == 0, "\(Self.gauge("accepting").map { "\($0)" } ?? "no gauge")")
        try await Self.close(accepting)
    }
}
