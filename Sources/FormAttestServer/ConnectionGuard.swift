//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import HTTPTypes
import HummingbirdCore
import Logging
import Metrics
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTPTypes

/// The connection limits of one listener: in total, per peer address, and the time a connection
/// may take to send a request's head.
public struct ConnectionLimits: Sendable, Hashable {
    /// Open connections in total. At the limit a new connection is admitted by closing the
    /// connection idle longest (no request in flight, nothing unwritten, idle for at least
    /// ``ConnectionRegistry/minimumIdle``; the peer holding the most only breaks ties), at most
    /// ``ConnectionRegistry/shedsPerSecond`` a second (``ConnectionRegistry``); the listener stops
    /// accepting (new connections wait in the kernel's backlog) only at ``ceiling``, when nothing
    /// could be shed.
    public var total: Int
    /// Open connections per peer address (IPv4 /32, IPv6 by the rate limits' prefix): one more is
    /// closed at once. Not applied behind trusted proxies (every peer is a proxy then).
    public var perAddress: Int
    /// A connection must send a request's complete head within this time of opening, or of its
    /// last answer; else it is closed. Never longer than the idle timeout.
    public var headerTimeout: Duration

    public init(total: Int = 1024, perAddress: Int = 128, headerTimeout: Duration = .seconds(10)) {
        self.total = total
        self.perAddress = perAddress
        self.headerTimeout = headerTimeout
    }

    /// Requests a connection may have waiting for their answers (HTTP/1.1 pipelining): a request
    /// arriving while this many are unanswered is the connection's last (served with
    /// `Connection: close`); nothing after it is read, and the connection closes once its answers
    /// are written. Without it, one read of a few KB of pipelined requests queued thousands of
    /// them, which were served one after another, without letting other connections' requests
    /// in, long after the client had gone (issue 31 r5 F1).
    public static let maximumPipelined = 16

    /// The hard ceiling of open connections, where the listener stops accepting: a little above
    /// ``total`` (1/16 more, at least 4), for connections admitted while every other one had a
    /// request in flight. The descriptor limit must hold it.
    public var ceiling: Int { Self.ceiling(total: self.total) }

    public static func ceiling(total: Int) -> Int { total + max(4, total / 16) }

    /// The largest total whose ceiling fits in `descriptors` connections.
    public static func total(fitting descriptors: Int) -> Int {
        var total = descriptors - max(4, descriptors / 16)
        while total > 0 && Self.ceiling(total: total) > descriptors { total -= 1 }
        return max(0, total)
    }
}

/// The hard ceiling, as Hummingbird's accept gate: counts open connections and stops reading the
/// server channel (accepting) at ``ConnectionLimits/ceiling``. The transitions are logged and
/// counted (`formattest_connections_saturated_total`), so that a full listener is never silent;
/// the line at most once a second, with the count since the last (r4 F5: an attacker at the
/// ceiling made 27 lines a second).
struct ConnectionCap: AvailableConnectionsDelegate {
    let maximum: Int
    let logger: Logger
    var open = 0
    let log = RateLimitedLog()

    init(maximum: Int, logger: Logger) {
        self.maximum = maximum
        self.logger = logger
    }

    mutating func connectionOpened() {
        self.open += 1
        if self.open == self.maximum {
            Counter(label: "formattest_connections_saturated_total").increment()
            if let count = self.log.due() {
                self.logger.warning(
                    "connection limit reached: every connection has a request in flight; new connections wait in the backlog until one closes",
                    metadata: ["open": "\(self.open)", "limit": "\(self.maximum)", "reached": "\(count)"]
                )
            }
        }
    }

    mutating func connectionClosed() {
        self.open -= 1
    }

    func isAcceptingNewConnections() -> Bool { self.open < self.maximum }
}

/// The open connections of one listener, each with its peer key and its state (a request in
/// flight, or idle since when), shared by the connections' handlers (which run on several event
/// loops). It applies the per-address cap and, over the total, chooses the idle connection to
/// shed: the one idle longest, among those idle for at least ``minimumIdle`` (the peer holding the
/// most connections breaks ties only). A connection with a request in flight is never chosen, nor
/// one idle only for an instant: a keep-alive connection between two requests, or a fresh one
/// whose first request head is on its way (issue 31 r4 F2: shed then, the client's next request
/// met EOF); and no more than ``shedsPerSecond`` are shed a second, whatever the churn of new
/// connections. One chosen is closed only if it is still idle on its own event loop
/// (``ConnectionGuardHandler``).
final class ConnectionRegistry: Sendable {
    /// What ``admit(_:now:shed:)`` decided.
    enum Admission {
        /// Over the per-address cap: close the new connection.
        case refused
        /// Admitted, under the total.
        case admitted(id: Int)
        /// Admitted over the total: the idle connection chosen is to be shed (its closure closes
        /// it on its event loop if it is still idle); `nil` when none was idle.
        case admittedShedding(id: Int, victim: (@Sendable () -> Void)?)
    }

    private struct Entry {
        var peer: String
        /// Requests whose head arrived and whose answer is not yet written.
        var busy: Bool
        var idleSince: NIODeadline
        /// Whether a request head ever arrived on it.
        var used = false
        var shedding: Bool
        let shed: @Sendable () -> Void

        /// How readily it is shed, over the total: 0 for a connection that never sent a request
        /// head (for `minimumIdle` at least), 1 for a keep-alive connection idle between requests
        /// (as long), nil when it is not to be shed (busy, or idle only for an instant); with the
        /// time it has been so since.
        func shedRank(idleBefore: NIODeadline) -> (rank: Int, since: NIODeadline)? {
            guard !self.busy, self.idleSince <= idleBefore else { return nil }
            return (self.used ? 1 : 0, self.idleSince)
        }
    }

    private struct State {
        var entries: [Int: Entry] = [:]
        var perPeer: [String: Int] = [:]
        var shedding = 0
        var nextID = 0
        /// The sheds in the current second, from `windowStart`.
        var sheds = 0
        var windowStart = NIODeadline.uptimeNanoseconds(0)
    }

    private let state = NIOLockedValueBox(State())
    /// The shedding's log line, at most one a second.
    let shedLog = RateLimitedLog()
    /// The write deadline's log line, at most one a second.
    let writeTimeoutLog = RateLimitedLog()
    /// The pipelining bound's log line, at most one a second.
    let pipelinedLog = RateLimitedLog()
    /// The per-address cap; `nil` behind trusted proxies.
    let perAddress: Int?
    let total: Int
    /// A connection is sheddable only after this long idle (or, fresh, without a request head).
    let minimumIdle: TimeAmount
    /// Sheds a second at most: 1/16 of the total, at least 4 (as the ceiling's slack).
    let shedsPerSecond: Int

    init(total: Int, perAddress: Int?, minimumIdle: TimeAmount = .seconds(1)) {
        self.total = total
        self.perAddress = perAddress
        self.minimumIdle = minimumIdle
        self.shedsPerSecond = max(4, total / 16)
    }

    /// Registers a new connection of `peer` (idle until its first request head).
    func admit(_ peer: String, now: NIODeadline, shed: @escaping @Sendable () -> Void) -> Admission {
        self.state.withLockedValue { state in
            let open = state.perPeer[peer, default: 0]
            if let limit = self.perAddress, open >= limit { return .refused }
            let id = state.nextID
            state.nextID += 1
            state.perPeer[peer] = open + 1
            state.entries[id] = Entry(peer: peer, busy: false, idleSince: now, shedding: false, shed: shed)
            guard state.entries.count - state.shedding > self.total else { return .admitted(id: id) }
            return .admittedShedding(id: id, victim: self.chooseVictim(&state, now: now))
        }
    }

    /// Chooses the connection to shed (marked so): first a connection that never sent a request
    /// head, for `minimumIdle` at least, not counted against `shedsPerSecond` (r5 F6: a churn of
    /// connections that send nothing made honest keep-alive connections go, and newcomers wait, at
    /// 4 a second); then, at most `shedsPerSecond` a second, the keep-alive connection idle
    /// longest, idle for at least `minimumIdle`. The longest so first; the peer with the most
    /// connections breaks ties.
    private func chooseVictim(_ state: inout State, now: NIODeadline) -> (@Sendable () -> Void)? {
        if now - state.windowStart >= .seconds(1) {
            state.windowStart = now
            state.sheds = 0
        }
        let capped = state.sheds >= self.shedsPerSecond
        let idleBefore = now - self.minimumIdle
        var chosen: (id: Int, rank: Int, since: NIODeadline, peerOpen: Int)?
        for (candidate, entry) in state.entries where !entry.shedding {
            guard let (rank, since) = entry.shedRank(idleBefore: idleBefore), !(capped && rank > 0) else { continue }
            let peerOpen = state.perPeer[entry.peer, default: 0]
            if let best = chosen, (rank, since, -peerOpen) >= (best.rank, best.since, -best.peerOpen) { continue }
            chosen = (candidate, rank, since, peerOpen)
        }
        guard let victim = chosen else { return nil }
        state.entries[victim.id]?.shedding = true
        state.shedding += 1
        if victim.rank > 0 { state.sheds += 1 }
        return state.entries[victim.id]?.shed
    }

    /// A request head arrived (`true`) or the last answer was written (`false`). A request
    /// arriving on a connection chosen to be shed keeps it: the shedding is cancelled.
    func mark(_ id: Int, busy: Bool, now: NIODeadline) {
        self.state.withLockedValue { state in
            guard var entry = state.entries[id] else { return }
            entry.busy = busy
            if busy { entry.used = true }
            if !busy { entry.idleSince = now }
            if busy && entry.shedding {
                entry.shedding = false
                state.shedding -= 1
            }
            state.entries[id] = entry
        }
    }

    /// The connection chosen to be shed is kept after all (found busy on its event loop).
    func keep(_ id: Int) {
        self.state.withLockedValue { state in
            guard state.entries[id]?.shedding == true else { return }
            state.entries[id]?.shedding = false
            state.shedding -= 1
        }
    }

    /// Whether the connection is still to be shed (checked on its own event loop before closing).
    func stillShedding(_ id: Int) -> Bool {
        self.state.withLockedValue { state in state.entries[id].map { $0.shedding && !$0.busy } ?? false }
    }

    func release(_ id: Int) {
        self.state.withLockedValue { state in
            guard let entry = state.entries.removeValue(forKey: id) else { return }
            if entry.shedding { state.shedding -= 1 }
            let open = state.perPeer[entry.peer, default: 1] - 1
            state.perPeer[entry.peer] = open > 0 ? open : nil
        }
    }

    var openCount: Int { self.state.withLockedValue { $0.entries.count } }
}

/// Logs at most one line per interval, with the count of the events since the last line.
final class RateLimitedLog: Sendable {
    private let state = NIOLockedValueBox((last: NIODeadline?.none, unlogged: 0))
    let interval: TimeAmount

    init(interval: TimeAmount = .seconds(1)) {
        self.interval = interval
    }

    /// Counts one event; returns the events to report when a line is due now, else `nil`.
    func due(now: NIODeadline = .now()) -> Int? {
        self.state.withLockedValue { state in
            state.unlogged += 1
            guard state.last.map({ now - $0 >= self.interval }) ?? true else { return nil }
            let count = state.unlogged
            state = (now, 0)
            return count
        }
    }
}

/// In each connection's pipeline, after HTTP decoding: the connection's entry in the listener's
/// ``ConnectionRegistry``, and with it the per-peer cap (a connection over it is closed at once,
/// logged and counted `formattest_connections_refused_total{reason="per_address"}`) and the
/// shedding of idle connections over the total (the chosen one is closed on its event loop if it
/// is still idle there, logged at most once a second and counted
/// `formattest_connections_refused_total{reason="shed_idle"}`); and the header deadline (a
/// connection that has not sent a complete request head within `headerTimeout` of opening, or of
/// its last answer, is closed: `formattest_connections_refused_total{reason="header_timeout"}`);
/// and the write deadline (an answer part not written to the socket within `writeTimeout`, the
/// body timeout, closes it: `reason="write_timeout"`); and the pipelining bound (a request head
/// arriving while ``ConnectionLimits/maximumPipelined`` requests are unanswered is passed on with
/// `Connection: close`, nothing after it is read or passed on, and the connection closes once
/// its answers are written: `reason="pipelined"`). A connection that sends nothing thus holds
/// its descriptor for the header deadline, not the idle timeout, one that never reads its
/// answers for the write deadline, and one that pipelines requests gets at most that many served.
final class ConnectionGuardHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let registry: ConnectionRegistry
    private let ipv6Prefix: Int
    private let headerTimeout: TimeAmount
    private let logger: Logger
    private var id: Int?
    private var started = false
    private var deadline: Scheduled<Void>?
    /// Requests whose head arrived and whose answer is not yet complete.
    private var requestsInFlight = 0
    /// Answer parts passed to the socket and not yet written to it.
    private var unwritten = 0
    private let writeTimeout: TimeAmount
    private var writeDeadline: Scheduled<Void>?
    /// Set once a request was passed on as the connection's last (the pipelining bound): nothing
    /// after it is read or passed on, and the connection closes once its answers are written.
    private var lastRequestPassed = false
    private var discarding = false

    init(registry: ConnectionRegistry, ipv6Prefix: Int, headerTimeout: Duration, writeTimeout: Duration, logger: Logger) {
        self.registry = registry
        self.ipv6Prefix = ipv6Prefix
        self.headerTimeout = TimeAmount(headerTimeout)
        self.writeTimeout = TimeAmount(writeTimeout)
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { self.start(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        self.start(context: context)
        context.fireChannelActive()
    }

    private func start(context: ChannelHandlerContext) {
        guard !self.started else { return }
        self.started = true
        let peer = context.channel.remoteAddress.flatMap { ClientAddress.key($0, ipv6Prefix: self.ipv6Prefix) } ?? "unknown"
        let loop = context.eventLoop
        let bound = NIOLoopBound((handler: self, context: context), eventLoop: loop)
        let shed: @Sendable () -> Void = {
            loop.execute { bound.value.handler.shedIfIdle(context: bound.value.context) }
        }
        switch self.registry.admit(peer, now: .now(), shed: shed) {
        case .refused:
            Counter(label: "formattest_connections_refused_total", dimensions: [("reason", "per_address")]).increment()
            self.logger.warning(
                "connection closed: its address is at the per-address connection limit", metadata: ["limit": "\(self.registry.perAddress ?? 0)"])
            context.close(promise: nil)
            return
        case .admitted(let id):
            self.id = id
        case .admittedShedding(let id, let victim):
            self.id = id
            victim?()
        }
        self.arm(context: context)
    }

    /// Closes this connection, chosen to be shed, if it is still idle (no request in flight).
    private func shedIfIdle(context: ChannelHandlerContext) {
        guard let id = self.id else { return }
        guard self.requestsInFlight == 0, self.unwritten == 0, self.registry.stillShedding(id) else {
            // Busy again meanwhile: it stays.
            self.registry.keep(id)
            return
        }
        Counter(label: "formattest_connections_refused_total", dimensions: [("reason", "shed_idle")]).increment()
        if let count = self.registry.shedLog.due() {
            self.logger.warning(
                "idle connection closed: the listener is at its connection limit and it was idle longest (it sent no request yet, or is between requests)",
                metadata: ["shed": "\(count)", "limit": "\(self.registry.total)", "metric": "formattest_connections_refused_total{reason=\"shed_idle\"}"]
            )
        }
        context.close(promise: nil)
    }

    private func arm(context: ChannelHandlerContext) {
        self.deadline?.cancel()
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        self.deadline = context.eventLoop.assumeIsolated().scheduleTask(in: self.headerTimeout) {
            Counter(label: "formattest_connections_refused_total", dimensions: [("reason", "header_timeout")]).increment()
            loopBound.value.close(promise: nil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !self.discarding else { return }
        guard case .head(var head) = Self.unwrapInboundIn(data) else {
            context.fireChannelRead(data)
            return
        }
        // A request after the connection's last: neither it nor anything after it is served.
        guard !self.lastRequestPassed else {
            self.discarding = true
            return
        }
        self.deadline?.cancel()
        self.deadline = nil
        self.requestsInFlight += 1
        if let id = self.id { self.registry.mark(id, busy: true, now: .now()) }
        guard self.requestsInFlight > ConnectionLimits.maximumPipelined else {
            context.fireChannelRead(data)
            return
        }
        // Over the pipelining bound: this request is the connection's last.
        self.lastRequestPassed = true
        head.headerFields[.connection] = "close"
        Counter(label: "formattest_connections_refused_total", dimensions: [("reason", "pipelined")]).increment()
        if let count = self.registry.pipelinedLog.due() {
            self.logger.warning(
                "connection closing: its client pipelined more requests than are served unanswered; the rest are not read",
                metadata: [
                    "limit": "\(ConnectionLimits.maximumPipelined)", "closed": "\(count)",
                    "metric": "formattest_connections_refused_total{reason=\"pipelined\"}",
                ])
        }
        context.fireChannelRead(Self.wrapInboundOut(.head(head)))
    }

    /// Nothing more is read from a connection past its last request (the pipelining bound).
    func read(context: ChannelHandlerContext) {
        guard !self.lastRequestPassed else { return }
        context.read()
    }

    /// Every answer part is watched until it is written to the socket: a connection is idle
    /// (sheddable) only with no request in flight and nothing unwritten, and a part that stays
    /// unwritten for `writeTimeout` (a client that sends requests and never reads the answers)
    /// closes the connection (`formattest_connections_refused_total{reason="write_timeout"}`).
    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = Self.unwrapOutboundIn(data) {
            self.requestsInFlight = max(0, self.requestsInFlight - 1)
            if self.requestsInFlight == 0 { self.arm(context: context) }
        }
        let written = context.eventLoop.makePromise(of: Void.self)
        if let promise { written.futureResult.cascade(to: promise) }
        self.unwritten += 1
        if self.writeDeadline == nil { self.armWrite(context: context) }
        context.write(data, promise: written)
        written.futureResult.assumeIsolated().whenComplete { _ in
            self.unwritten -= 1
            self.writeDeadline?.cancel()
            self.writeDeadline = nil
            if self.unwritten > 0 {
                self.armWrite(context: context)
            } else if self.requestsInFlight == 0 && self.lastRequestPassed {
                context.close(promise: nil)
            } else if self.requestsInFlight == 0, let id = self.id {
                self.registry.mark(id, busy: false, now: .now())
            }
        }
    }

    private func armWrite(context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        let logger = self.logger
        let timeout = self.writeTimeout
        let log = self.registry.writeTimeoutLog
        self.writeDeadline = context.eventLoop.assumeIsolated().scheduleTask(in: self.writeTimeout) {
            Counter(label: "formattest_connections_refused_total", dimensions: [("reason", "write_timeout")]).increment()
            if let count = log.due() {
                logger.warning(
                    "connection closed: its client took no answer bytes for the write timeout (the body timeout)",
                    metadata: ["timeout": "\(timeout)", "closed": "\(count)"])
            }
            loopBound.value.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.stop()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.stop()
    }

    private func stop() {
        self.deadline?.cancel()
        self.deadline = nil
        self.writeDeadline?.cancel()
        self.writeDeadline = nil
        if let id = self.id {
            self.id = nil
            self.registry.release(id)
        }
    }
}

@available(*, unavailable)
extension ConnectionGuardHandler: Sendable {}
