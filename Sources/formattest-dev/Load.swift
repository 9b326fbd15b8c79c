//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import ArgumentParser
import FormattestCommands
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// `formattest-dev load`: the HTTP load of `benchmarks/http/run.sh`, on one thread.
///
/// The same work as wrk with `benchmarks/http/assert.lua`, over the same files: connection `i`
/// sends the bodies of `bodies-i.json` in order (one key per connection, so its counters arrive in
/// order), one request at a time, as `POST /api/appattest/assert`. wrk can keep a connection's
/// requests in order only with one thread per connection, and on two cores shared with the server
/// its 16 threads spent about half of its CPU switching between themselves. Here one event loop
/// serves every connection.
///
/// Every request (its head and body) is made before the first is sent. The window starts once every
/// connection is open and lasts `--duration` seconds; a response that completes after it is
/// neither counted nor followed by another request. Percentiles are exact: every latency in the
/// window is kept and sorted. Prints one JSON line, in the shape `assert.lua` prints.
struct Load: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send pre-signed assert requests over N connections for a duration (benchmarks/http/run.sh's generator)."
    )

    @OptionGroup var target: LoadTarget

    @Option(help: "The directory of bodies-0.json ... bodies-(N-1).json, one request body per line.")
    var bodies: String

    @Option(help: "Connections (one per body file).")
    var connections: Int

    @Option(help: "Seconds of load.")
    var duration: Double

    func validate() throws {
        guard (1...1024).contains(self.connections) else { throw ValidationError("--connections must be 1 to 1024") }
        guard self.duration > 0, self.duration <= 3600 else { throw ValidationError("--duration must be above 0 and at most 3600 s") }
    }

    func run() async throws {
        let requests = try (0..<self.connections).map { try self.requests(connection: $0) }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()

        // Every connection opened before the window starts; a refused one counts as a connect error.
        let opened = await self.target.connect(on: loop, requests.map { connectionRequests in { LoadConnection(requests: connectionRequests) } })
        let duration = TimeAmount.nanoseconds(Int64(self.duration * 1e9))
        let cpuBefore = Self.cpuMicroseconds()
        let results = try await loop.flatSubmit { () -> EventLoopFuture<[ConnectionResult]> in
            LoadTarget.begin(opened, on: loop, end: NIODeadline.now() + duration)
        }.get()
        let cpu = Self.cpuMicroseconds() - cpuBefore
        try await group.shutdownGracefully()
        print(Self.report(results, duration: self.duration, cpuMicroseconds: cpu))
    }

    /// Connection `index`'s requests: a head and a body for each line of its file.
    private func requests(connection index: Int) throws -> [LoadRequest] {
        let file = URL(fileURLWithPath: self.bodies).appendingPathComponent("bodies-\(index).json")
        guard let data = FileManager.default.contents(atPath: file.path) else { throw UsageError("cannot read \(file.path)") }
        return data.split(separator: UInt8(ascii: "\n")).map { body in
            self.target.request(body: ByteBuffer(bytes: body))
        }
    }

    /// The exact `p`th percentile (nearest rank) of `sorted`; 0 when it is empty.
    static func percentile(_ p: Double, of sorted: [UInt64]) -> UInt64 {
        guard !sorted.isEmpty else { return 0 }
        let rank = Int((p / 100 * Double(sorted.count)).rounded(.up)) - 1
        return sorted[min(max(rank, 0), sorted.count - 1)]
    }

    /// This process's CPU time (user and system), in microseconds.
    static func cpuMicroseconds() -> Int {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1_000_000 + Int(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec)
    }

    /// One JSON line, the shape `assert.lua` prints, with the generator's CPU time over the window
    /// (`cpuMicroseconds`: reading the bodies and making the requests before it are not the
    /// load's).
    private static func report(_ results: [ConnectionResult], duration: Double, cpuMicroseconds: Int) -> String {
        var latencies = results.flatMap(\.latencies)
        latencies.sort()
        func percentile(_ p: Double) -> UInt64 { Self.percentile(p, of: latencies) }
        let errors = [
            ("connect", results.filter(\.connectFailed).count),
            ("read", results.reduce(0) { $0 + $1.readErrors }),
            ("write", 0),
            ("status", results.reduce(0) { $0 + $1.statusErrors }),
            ("timeout", results.reduce(0) { $0 + $1.timeouts }),
        ]
        return "{\"requests\":\(latencies.count),\"durationMicroseconds\":\(Int(duration * 1e6)),"
            + "\"p50Microseconds\":\(percentile(50)),\"p90Microseconds\":\(percentile(90)),\"p99Microseconds\":\(percentile(99)),"
            + "\"maxMicroseconds\":\(latencies.last ?? 0),"
            + "\"errors\":{\(errors.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ","))},"
            + "\"exhaustedConnections\":\(results.filter(\.exhausted).count),"
            + "\"reconnections\":\(results.reduce(0) { $0 + $1.reconnections }),\"cpuMicroseconds\":\(cpuMicroseconds)}"
    }
}

/// Where the load goes, shared by `load` and `soak`.
struct LoadTarget: ParsableArguments {
    @Option(help: "The server's port (on --host).")
    var port: Int

    @Option(help: "The server's address.")
    var host = "127.0.0.1"

    @Option(help: "The path the requests are posted to.")
    var path = "/api/appattest/assert"

    func validate() throws {
        guard (1...65535).contains(self.port) else { throw ValidationError("--port must be 1 to 65535") }
    }

    /// A JSON POST of `body` to the target.
    func request(body: ByteBuffer) -> LoadRequest {
        let headers: HTTPHeaders = [
            "Host": "\(self.host):\(self.port)", "Content-Type": "application/json", "Content-Length": "\(body.readableBytes)",
        ]
        return LoadRequest(head: HTTPRequestHead(version: .http1_1, method: .POST, uri: self.path, headers: headers), body: body)
    }

    /// Opens one connection on `loop` for each handler maker, in order; a refused one is `nil`.
    func connect(on loop: any EventLoop, _ handlers: [@Sendable () -> LoadConnection]) async -> [(any Channel)?] {
        var channels: [(any Channel)?] = []
        for handler in handlers {
            let connection = self.open(on: loop, handler)
            channels.append(try? await connection.get())
        }
        return channels
    }

    /// Opens a connection on `loop` whose pipeline ends with the handler `make` makes, and gives
    /// that handler the way to open its next connection when the server closes this one.
    private func open(on loop: any EventLoop, _ make: @escaping @Sendable () -> LoadConnection) -> EventLoopFuture<any Channel> {
        let target = self
        return ClientBootstrap(group: loop)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers(leftOverBytesStrategy: .fireError)
                    let handler = make()
                    // The next connection carries the same handler on: its requests, its results.
                    handler.reopen = { handler in
                        let bound = NIOLoopBound(handler, eventLoop: loop)
                        return target.open(on: loop, { bound.value })
                    }
                    try channel.pipeline.syncOperations.addHandler(handler)
                }
            }
            .connect(host: self.host, port: self.port)
    }

    /// Starts every connection at once (on `loop`); succeeds with each one's result when the
    /// window ends at `end`. A connection that was refused is a connect failure.
    static func begin(_ channels: [(any Channel)?], on loop: any EventLoop, end: NIODeadline) -> EventLoopFuture<[ConnectionResult]> {
        let futures = channels.map { channel -> EventLoopFuture<ConnectionResult> in
            guard let channel, let connection = try? channel.pipeline.syncOperations.handler(type: LoadConnection.self) else {
                return loop.makeSucceededFuture(ConnectionResult(connectFailed: true))
            }
            return connection.begin(channel: channel, end: end)
        }
        return EventLoopFuture.whenAllSucceed(futures, on: loop)
    }
}

/// One request: made before the load starts (`load`), or as it goes (`soak`).
struct LoadRequest: Sendable {
    let head: HTTPRequestHead
    let body: ByteBuffer
}

/// What one connection saw in the window.
struct ConnectionResult: Sendable {
    /// Microseconds from a request's first byte written to its response's end, for each response
    /// that ended in the window.
    var latencies: [UInt64] = []
    var connectFailed = false
    /// Answers with a status of 400 or more (counted in `latencies` too, as wrk counts them).
    var statusErrors = 0
    /// The connection failed or was closed by the server while a request was outstanding.
    var readErrors = 0
    /// A request with no answer 10 s after the window ended.
    var timeouts = 0
    /// The connection ran out of bodies inside the window (the figures are then not valid).
    var exhausted = false
    /// Answers that carried `Connection: close` (the service's `--max-requests-per-connection`
    /// and `--max-connection-age`), after which the next request went on a new connection, as
    /// an HTTP client's pool does.
    var reconnections = 0
}

/// One connection: sends its requests one at a time, each after the previous one's answer ended
/// (and, when paced, not before its scheduled time). When an answer carries `Connection: close`
/// (the service's `--max-requests-per-connection` and `--max-connection-age`), the next request
/// goes on a new connection, as an HTTP client's pool does; the handler carries its requests and
/// results over. Confined to its channels' event loop.
final class LoadConnection: ChannelInboundHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    /// The next request; `nil` when there is none left.
    private let source: () -> LoadRequest?
    /// The time between two scheduled sends; `nil`: each request as soon as the last was answered.
    private let interval: TimeAmount?
    private var result = ConnectionResult()
    private var status = 0
    /// When the outstanding request was due: its latency counts from then, so that a slow answer
    /// that delays the next send is not hidden (no coordinated omission).
    private var sentAt = NIODeadline.uptimeNanoseconds(0)
    private var nextDue = NIODeadline.uptimeNanoseconds(0)
    private var end = NIODeadline.uptimeNanoseconds(0)
    private var outstanding = false
    /// The answer being read said `Connection: close`: the next request goes on a new connection.
    private var closeAfterAnswer = false
    /// Between the server's close and the new connection: the old one's end is not a failure.
    private var reconnecting = false
    private var channel: (any Channel)?
    private var done: EventLoopPromise<ConnectionResult>?
    /// Opens the next connection with this handler in its pipeline (set by ``LoadTarget``).
    fileprivate var reopen: ((LoadConnection) -> EventLoopFuture<any Channel>)?

    /// Sends `requests` in order, as fast as they are answered.
    convenience init(requests: [LoadRequest]) {
        var iterator = requests.makeIterator()
        self.init(source: { iterator.next() }, interval: nil)
        self.result.latencies.reserveCapacity(requests.count)
    }

    init(source: @escaping () -> LoadRequest?, interval: TimeAmount?) {
        self.source = source
        self.interval = interval
    }

    /// The latencies and status errors since the last call (the soak's per-window figures).
    func drain() -> (latencies: [UInt64], statusErrors: Int) {
        defer {
            self.result.latencies.removeAll(keepingCapacity: true)
            self.result.statusErrors = 0
        }
        return (self.result.latencies, self.result.statusErrors)
    }

    /// Starts sending; the future succeeds when the window ended (or the connection failed).
    func begin(channel: any Channel, end: NIODeadline) -> EventLoopFuture<ConnectionResult> {
        let promise = channel.eventLoop.makePromise(of: ConnectionResult.self)
        self.channel = channel
        self.done = promise
        self.end = end
        // Answers that never come: counted as timeouts 10 s after the window, then closed.
        channel.eventLoop.assumeIsolated().scheduleTask(deadline: end + .seconds(10)) {
            if self.outstanding { self.result.timeouts += 1 }
            self.finish()
        }
        self.send()
        return promise.futureResult
    }

    private func send() {
        guard let channel = self.channel, self.done != nil else { return }
        if self.interval != nil {
            let now = NIODeadline.now()
            if self.nextDue == .uptimeNanoseconds(0) { self.nextDue = now }
            guard self.nextDue <= now else {
                channel.eventLoop.assumeIsolated().scheduleTask(deadline: self.nextDue) { self.send() }
                return
            }
        }
        guard let request = self.source() else {
            // Never resend a body (it would be a replay): stop this connection and say so.
            self.result.exhausted = true
            self.finish()
            return
        }
        self.outstanding = true
        self.sentAt = self.interval == nil ? .now() : self.nextDue
        if let interval = self.interval { self.nextDue = self.nextDue + interval }
        channel.write(HTTPClientRequestPart.head(request.head), promise: nil)
        channel.write(HTTPClientRequestPart.body(.byteBuffer(request.body)), promise: nil)
        channel.writeAndFlush(HTTPClientRequestPart.end(nil), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            self.status = Int(head.status.code)
            self.closeAfterAnswer = !head.isKeepAlive
        case .body:
            break
        case .end:
            let now = NIODeadline.now()
            self.outstanding = false
            guard now <= self.end else {
                self.finish()
                return
            }
            self.result.latencies.append(UInt64(max(0, (now - self.sentAt).nanoseconds) / 1000))
            if self.status >= 400 { self.result.statusErrors += 1 }
            if self.closeAfterAnswer {
                self.reconnect(from: context.channel)
            } else {
                self.send()
            }
        }
    }

    /// The server closes `old` after this answer: close it, open the next connection, and go on
    /// there. A connection that cannot be opened ends this one as a connect failure.
    private func reconnect(from old: any Channel) {
        guard let reopen = self.reopen else {
            self.result.readErrors += 1
            self.finish()
            return
        }
        self.reconnecting = true
        old.close(promise: nil)
        old.closeFuture.assumeIsolated().flatMap { reopen(self) }.whenComplete { opened in
            self.reconnecting = false
            switch opened {
            case .success(let channel):
                guard self.done != nil else {
                    channel.close(promise: nil)
                    return
                }
                self.channel = channel
                self.result.reconnections += 1
                self.send()
            case .failure:
                self.result.connectFailed = true
                self.finish()
            }
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // The old connection's end while the next one opens (a reset after the server's close).
        guard !self.reconnecting else { return }
        self.result.readErrors += 1
        self.finish()
    }

    func channelInactive(context: ChannelHandlerContext) {
        guard !self.reconnecting, context.channel === self.channel else { return }
        if self.outstanding { self.result.readErrors += 1 }
        self.outstanding = false
        self.finish()
    }

    /// Closes the connection and reports, once.
    private func finish() {
        guard let done = self.done else { return }
        self.done = nil
        self.channel?.close(promise: nil)
        done.succeed(self.result)
    }
}
