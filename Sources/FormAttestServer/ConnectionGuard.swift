//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import HTTPTypes
import HummingbirdCore
import Logging
import Metrics
import NIOConcurrencyHelpers
package import NIOCore
import NIOHTTPTypes

/// The connection limits of one listener: in total, per peer address, and the time a connection
/// may take to send a request's head.
public struct ConnectionLimits: Sendable, Hashable {
    /// Open connections in total. Over it a new connection is admitted by shedding another
    /// (`ConnectionRegistry`): one idle for `ConnectionRegistry.minimumIdle` (no request in
    /// flight, nothing unwritten), else the oldest request body in progress for as long (408),
    /// else the connection served most (its answer carries `Connection: close`); the listener
    /// stops accepting (new connections wait in the kernel's backlog) at ``ceiling``, until the
    /// connections shed close.
    public var total: Int
    /// Open connections per peer address (IPv4 /32, IPv6 by the rate limits' prefix): one more is
    /// closed at once. Not applied behind trusted proxies (every peer is a proxy then).
    public var perAddress: Int
    /// A connection must send a request's complete head within this time of opening, or of its
    /// last answer; else it is closed. Never longer than the idle timeout.
    public var headerTimeout: Duration
    /// Requests one connection is served: the answer to the last carries `Connection: close`, and
    /// the connection closes once it is written (as nginx's `keepalive_requests`).
    public var maximumRequests: Int
    /// How long one connection is served: the answer to the first request that arrives after
    /// this carries `Connection: close`, and the connection closes once it is written (as
    /// nginx's `keepalive_time`).
    public var maximumAge: Duration

    public init(
        total: Int = 1024, perAddress: Int = 128, headerTimeout: Duration = .seconds(10), maximumRequests: Int = 1000,
        maximumAge: Duration = .seconds(300)
    ) {
        self.total = total
        self.perAddress = perAddress
        self.headerTimeout = headerTimeout
        self.maximumRequests = maximumRequests
        self.maximumAge = maximumAge
    }

    /// Requests a connection may have waiting for their answers (HTTP/1.1 pipelining): a request
    /// arriving while this many are unanswered is the connection's last (served with
    /// `Connection: close`); nothing after it is read, and the connection closes once its answers
    /// are written. Without it, one read of a few KB of pipelined requests queued thousands of
    /// them, which were served one after another, without letting other connections' requests
    /// in, long after the client had gone (issue 31 r5 F1).
    public static let maximumPipelined = 16

    /// The hard ceiling of open connections, where the listener stops accepting: a little above
    /// ``total`` (1/16 more, at least 4), for connections admitted while the ones shed for them
    /// finish. The descriptor limit must hold it.
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
/// flight, a body in progress, or idle since when; requests served; opened when), shared by the
/// connections' handlers (which run on several event loops). It applies the per-address cap and,
/// over the total, chooses the connection to shed, in this order:
/// 0. a connection that never sent a request head, for ``minimumIdle`` at least: closed;
/// 1. a keep-alive connection idle between requests for ``minimumIdle`` at least: closed (the one
///    idle longest; the peer holding the most connections breaks ties);
/// 2. a connection that has served more than one request, with no body in progress, busy or idle
///    an instant (a keep-alive connection that polls; the one served most first, open longest
///    breaks ties): retired, never
///    cut: the answer to its request in flight, or to its next request, carries
///    `Connection: close` and the connection closes once it is written; one that stays idle for
///    ``minimumIdle`` is closed (issue 31 r5 F3: connections active every 0.9 s were never idle
///    long enough to be shed, and held every slot);
/// 3. a request whose body has been in progress for ``minimumIdle`` at least (the oldest body
///    first): its body is refused, answered 408, and the connection closes (issue 31 r5 F2: bodies
///    that met the minimum body rate held every slot for the body timeout), but never while a
///    polling connection (rank 2) is held back by the cap (issue 31 r7 F1: pollers ranked after
///    bodies had every honest upload longer than 1 s cut);
/// 4. a connection served once, with no body in progress: retired as rank 2.
/// A connection idle only for an instant is never closed (a keep-alive connection between two
/// requests, or a fresh one whose first request head is on its way: issue 31 r4 F2: shed then,
/// the client's next request met EOF), and nothing accepted is ever dropped. Ranks 2 to 4 are
/// chosen only while no connection that sent nothing yet is pending (younger than
/// ``minimumIdle``): a churn of silent connections makes room as they reach rank 0. Ranks 1, 2 and
/// 4 are shed ``shedsPerSecond`` a second at most, whatever the churn of new connections (r4 F3); 0
/// and 3 are not (r5 F6). While the listener is over its total with too few connections chosen (none
/// was sheddable yet, or the cap was reached), a tick every ``tickInterval`` chooses again: at the
/// hard ceiling the listener accepts nothing, and without the tick nothing would choose.
package final class ConnectionRegistry: Sendable {
    /// How a connection chosen over the total is shed (``ConnectionGuardHandler``).
    package enum Shed: Sendable {
        /// Closed if it is still idle on its event loop (ranks 0 and 1).
        case idle
        /// Its body in progress refused with 408 (rank 3).
        case body
        /// Its request in flight, or its next one, answered with `Connection: close` (ranks 2 and 4).
        case retire
    }

    /// What ``admit(_:now:shed:)`` decided.
    package enum Admission {
        /// Over the per-address cap: close the new connection.
        case refused
        /// Admitted, under the total.
        case admitted(id: Int)
        /// Admitted over the total: the connection chosen is to be shed (its closure sheds it on
        /// its event loop); `nil` when none could be chosen yet (the tick chooses later).
        case admittedShedding(id: Int, victim: (@Sendable () -> Void)?)
    }

    private struct Entry {
        var peer: String
        /// A request's head arrived and its answer is not yet written.
        var busy: Bool
        var idleSince: NIODeadline
        let opened: NIODeadline
        /// Request heads that arrived on it.
        var requests = 0
        /// When the body of the request in flight began, while it is in progress.
        var bodySince: NIODeadline?
        /// How it is being shed, once chosen.
        var shedding: Shed?
        let shed: @Sendable (Shed) -> Void

        /// Its rank (lower: shed first) and the key ordering a rank's connections (lower: first),
        /// or nil when it is not to be shed now.
        func shedRank(before: NIODeadline) -> (rank: Int, key: (Int64, Int64))? {
            guard self.shedding == nil else { return nil }
            if !self.busy && self.idleSince <= before {
                return (self.requests == 0 ? 0 : 1, (self.idleSince.uptimeNanoseconds.clamped, 0))
            }
            if self.busy, let since = self.bodySince, since <= before {
                return (3, (since.uptimeNanoseconds.clamped, 0))
            }
            // Ranks 2 and 4 (retired): with no body in progress (a body is shed by rank 3 once it
            // has been in progress long enough; retired, it would be answered only when it
            // arrives). Rank 2, served more than one request: a keep-alive connection that polls,
            // retired before any body is cut (issue 31 r7 F1: connections polling every 0.5 s,
            // ranked after bodies, had every honest upload longer than 1 s refused 408); rank 4,
            // served once.
            guard self.requests > 0, self.bodySince == nil else { return nil }
            return (self.requests >= 2 ? 2 : 4, (-Int64(self.requests), self.opened.uptimeNanoseconds.clamped))
        }
    }

    private struct State {
        var entries: [Int: Entry] = [:]
        var perPeer: [String: Int] = [:]
        /// Entries chosen to be shed (they close soon).
        var shedding = 0
        var nextID = 0
        /// The capped sheds (ranks 1, 2 and 4) in the current second, from `windowStart`.
        var sheds = 0
        var windowStart = NIODeadline.uptimeNanoseconds(0)
        var tickScheduled = false
    }

    private let state = NIOLockedValueBox(State())
    /// The shedding's log line, at most one a second.
    let shedLog = RateLimitedLog()
    /// The busy connections' shedding's log line (ranks 2 to 4), at most one a second.
    let busyShedLog = RateLimitedLog()
    /// The write deadline's log line, at most one a second.
    let writeTimeoutLog = RateLimitedLog()
    /// The pipelining bound's log line, at most one a second.
    let pipelinedLog = RateLimitedLog()
    /// The per-address cap; `nil` behind trusted proxies.
    let perAddress: Int?
    let total: Int
    /// A connection is sheddable only after this long idle (or, fresh, without a request head),
    /// and a body after this long in progress.
    let minimumIdle: TimeAmount
    /// Capped sheds a second at most: 1/16 of the total, at least 4 (as the ceiling's slack).
    let shedsPerSecond: Int
    /// How often the listener, over its total with too few connections chosen, chooses again.
    let tickInterval: TimeAmount

    package init(total: Int, perAddress: Int?, minimumIdle: TimeAmount = .seconds(1), tickInterval: TimeAmount = .milliseconds(250)) {
        self.total = total
        self.perAddress = perAddress
        self.minimumIdle = minimumIdle
        self.shedsPerSecond = max(4, total / 16)
        self.tickInterval = tickInterval
    }

    /// Registers a new connection of `peer` (idle until its first request head).
    package func admit(_ peer: String, now: NIODeadline, shed: @escaping @Sendable (Shed) -> Void) -> Admission {
        self.state.withLockedValue { state in
            let open = state.perPeer[peer, default: 0]
            if let limit = self.perAddress, open >= limit { return .refused }
            let id = state.nextID
            state.nextID += 1
            state.perPeer[peer] = open + 1
            state.entries[id] = Entry(peer: peer, busy: false, idleSince: now, opened: now, shed: shed)
            guard state.entries.count - state.shedding > self.total else { return .admitted(id: id) }
            return .admittedShedding(id: id, victim: self.chooseVictim(&state, now: now))
        }
    }

    /// Chooses the connection to shed (marked so), by rank and key (``ConnectionRegistry``).
    private func chooseVictim(_ state: inout State, now: NIODeadline) -> (@Sendable () -> Void)? {
        if now - state.windowStart >= .seconds(1) {
            state.windowStart = now
            state.sheds = 0
        }
        let capped = state.sheds >= self.shedsPerSecond
        let before = now - self.minimumIdle
        // Held back while a connection that has sent nothing yet is pending (younger than
        // `minimumIdle`: it will be shed at rank 0, or it is a newcomer whose request is on its
        // way): every busy shed (ranks 2 to 4): a churn of silent connections makes room itself
        // and never costs a busy client its body or its connection. And while a polling
        // connection is held back by the cap, no body is cut in its place (r7 F1).
        var silentPending = false
        var pollerCapped = false
        for entry in state.entries.values where entry.shedding == nil {
            if entry.requests == 0 && !entry.busy && entry.idleSince > before { silentPending = true }
            if capped, entry.shedRank(before: before)?.rank == 2 { pollerCapped = true }
        }
        var chosen: (id: Int, rank: Int, key: (Int64, Int64), peerOpen: Int)?
        for (candidate, entry) in state.entries {
            guard let (rank, key) = entry.shedRank(before: before) else { continue }
            if capped && (rank == 1 || rank == 2 || rank == 4) { continue }
            if rank >= 2 && silentPending { continue }
            if rank == 3 && pollerCapped { continue }
            let peerOpen = state.perPeer[entry.peer, default: 0]
            if let best = chosen, (rank, key.0, key.1, -peerOpen) >= (best.rank, best.key.0, best.key.1, -best.peerOpen) { continue }
            chosen = (candidate, rank, key, peerOpen)
        }
        guard let victim = chosen, let shed = state.entries[victim.id]?.shed else { return nil }
        let how: Shed = victim.rank <= 1 ? .idle : victim.rank == 3 ? .body : .retire
        state.entries[victim.id]?.shedding = how
        state.shedding += 1
        if victim.rank != 0 && victim.rank != 3 { state.sheds += 1 }
        return { shed(how) }
    }

    /// Whether the listener is over its total with too few connections chosen to be shed, and no
    /// tick is scheduled yet: the caller schedules one (``tick(on:)``), now marked as scheduled.
    func claimTick() -> Bool {
        self.state.withLockedValue { state in
            guard !state.tickScheduled, state.entries.count > self.total else { return false }
            state.tickScheduled = true
            return true
        }
    }

    /// Chooses again while the listener is over its total with too few connections chosen, then
    /// schedules the next tick on `loop` while it is still over its total.
    func tick(on loop: any EventLoop) {
        for victim in self.chooseAgain(now: .now()) { victim() }
        let again = self.state.withLockedValue { state in
            state.tickScheduled = state.entries.count > self.total
            return state.tickScheduled
        }
        if again {
            _ = loop.scheduleTask(in: self.tickInterval) { self.tick(on: loop) }
        }
    }

    /// The connections chosen now (each closure sheds one), while the listener is over its total
    /// with too few chosen.
    package func chooseAgain(now: NIODeadline) -> [@Sendable () -> Void] {
        self.state.withLockedValue { state in
            var victims: [@Sendable () -> Void] = []
            while state.entries.count - state.shedding > self.total, let victim = self.chooseVictim(&state, now: now) {
                victims.append(victim)
            }
            return victims
        }
    }

    /// A request head arrived (`busy`, with a body to come or not), or the last answer was
    /// written (`false`). A request arriving on a connection chosen to be shed while idle keeps
    /// it: that shedding is cancelled.
    package func mark(_ id: Int, busy: Bool, body: Bool = false, now: NIODeadline) {
        self.state.withLockedValue { state in
            guard var entry = state.entries[id] else { return }
            entry.busy = busy
            if busy {
                entry.requests += 1
                entry.bodySince = body ? now : nil
            } else {
                entry.idleSince = now
                entry.bodySince = nil
            }
            if busy && entry.shedding == .idle {
                entry.shedding = nil
                state.shedding -= 1
            }
            state.entries[id] = entry
        }
    }

    /// The body of the request in flight arrived whole.
    package func bodyEnded(_ id: Int) {
        self.state.withLockedValue { state in state.entries[id]?.bodySince = nil }
    }

    /// The connection chosen to be shed is kept after all (found busy on its event loop).
    func keep(_ id: Int) {
        self.state.withLockedValue { state in
            guard state.entries[id]?.shedding != nil else { return }
            state.entries[id]?.shedding = nil
            state.shedding -= 1
        }
    }

    /// Whether the connection is still to be shed while idle (checked on its own event loop
    /// before closing).
    func stillShedding(_ id: Int) -> Bool {
        self.state.withLockedValue { state in state.entries[id].map { $0.shedding == .idle && !$0.busy } ?? false }
    }

    package func release(_ id: Int) {
        self.state.withLockedValue { state in
            guard let entry = state.entries.removeValue(forKey: id) else { return }
            if entry.shedding != nil { state.shedding -= 1 }
            let open = state.perPeer[entry.peer, default: 1] - 1
            state.perPeer[entry.peer] = open > 0 ? open : nil
        }
    }

    var openCount: Int { self.state.withLockedValue { $0.entries.count } }
}

extension UInt64 {
    /// As an `Int64`, the largest one when it does not fit.
    fileprivate var clamped: Int64 { Int64(exactly: self) ?? .max }
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
/// shedding over the total (``ConnectionRegistry``: an idle connection chosen is closed on its
/// event loop if it is still idle there, `reason="shed_idle"`; a body in progress chosen is
/// refused with 408, `reason="shed_body"`; a busy connection chosen is retired, its answer
/// carrying `Connection: close`, `reason="shed_busy"`; logged at most once a second each); and
/// the header deadline (a connection that has not sent a complete request head within
/// `headerTimeout` of opening, or of its last answer, is closed:
/// `formattest_connections_refused_total{reason="header_timeout"}`); and the write deadline (an
/// answer part not written to the socket within `writeTimeout`, the body timeout, closes it:
/// `reason="write_timeout"`); and the pipelining bound (a request head arriving while
/// ``ConnectionLimits/maximumPipelined`` requests are unanswered is passed on with
/// `Connection: close`, nothing after it is read or passed on, and the connection closes once
/// its answers are written: `reason="pipelined"`); and the connection's request and age caps
/// (``ConnectionLimits/maximumRequests``, ``ConnectionLimits/maximumAge``: the request that
/// reaches one is the connection's last, the same way: `reason="max_requests"`, `"max_age"`).
/// A connection that sends nothing thus holds its descriptor for the header deadline, not the
/// idle timeout, one that never reads its answers for the write deadline, one that pipelines
/// requests gets at most that many served, and one that keeps busy is served for its caps, or
/// until a newcomer needs its slot.
///
/// A request head with `Expect: 100-continue` (and a body within the size limit) is answered
/// `100 Continue` at once when nothing else is unanswered on the connection: its client then
/// sends its body without waiting, and the body gets the same grace as any other (r5 F2).
final class ConnectionGuardHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let registry: ConnectionRegistry
    private let ipv6Prefix: Int
    private let headerTimeout: TimeAmount
    private let maximumRequests: Int
    private let maximumAge: TimeAmount
    private let logger: Logger
    private var id: Int?
    private var started = false
    private var opened = NIODeadline.now()
    private var deadline: Scheduled<Void>?
    /// Requests whose head arrived and whose answer is not yet complete.
    private var requestsInFlight = 0
    /// Request heads that arrived.
    private var requests = 0
    /// Between the head of a request with a body and the body's end.
    private var bodyInProgress = false
    /// Answer parts passed to the socket and not yet written to it.
    private var unwritten = 0
    private let writeTimeout: TimeAmount
    private var writeDeadline: Scheduled<Void>?
    /// Set once a request was passed on as the connection's last (the pipelining bound, the
    /// caps, or its retirement): nothing after it is read or passed on, and the connection closes
    /// once its answers are written.
    private var lastRequestPassed = false
    private var discarding = false
    /// Chosen to be retired over the total: the answer to the request in flight, or to the next
    /// one, is the last; idle for the minimum idle time, it is closed.
    private var retiring = false
    private var idleCheck: Scheduled<Void>?
    /// When each request passed on and not yet answered had its head read, oldest first.
    private var headsRead: [NIODeadline] = []
    /// From a request's head read off the connection to its answer's head written
    /// (`formattest_time_to_answer_seconds{listener}`): the wait a client sees, the time queued
    /// behind other connections' requests included, which `http_server_request_duration` (timed
    /// from when the handler runs) leaves out (red team r8 F4: newcomers waited 2.5–6.5 s behind
    /// pipelining connections and no metric showed it). `nil`: not measured.
    private let timeToAnswer: Metrics.Timer?

    init(
        registry: ConnectionRegistry, ipv6Prefix: Int, headerTimeout: Duration, writeTimeout: Duration, maximumRequests: Int = 1000,
        maximumAge: Duration = .seconds(300), timeToAnswer: Metrics.Timer? = nil, logger: Logger
    ) {
        self.timeToAnswer = timeToAnswer
        self.registry = registry
        self.ipv6Prefix = ipv6Prefix
        self.headerTimeout = TimeAmount(headerTimeout)
        self.writeTimeout = TimeAmount(writeTimeout)
        self.maximumRequests = maximumRequests
        self.maximumAge = TimeAmount(maximumAge)
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
        self.opened = .now()
        let peer = context.channel.remoteAddress.flatMap { ClientAddress.key($0, ipv6Prefix: self.ipv6Prefix) } ?? "unknown"
        let loop = context.eventLoop
        let bound = NIOLoopBound((handler: self, context: context), eventLoop: loop)
        let shed: @Sendable (ConnectionRegistry.Shed) -> Void = { how in
            loop.execute { bound.value.handler.shed(how, context: bound.value.context) }
        }
        switch self.registry.admit(peer, now: self.opened, shed: shed) {
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
        // Over the total (even with enough connections chosen: one chosen while idle may be kept
        // if a request arrives), the tick runs until the listener is back at its total.
        if self.registry.claimTick() {
            let registry = self.registry
            _ = loop.scheduleTask(in: registry.tickInterval) { registry.tick(on: loop) }
        }
        self.arm(context: context)
    }

    private func shed(_ how: ConnectionRegistry.Shed, context: ChannelHandlerContext) {
        switch how {
        case .idle: self.shedIfIdle(context: context)
        case .body: self.shedBody(context: context)
        case .retire: self.retire(context: context)
        }
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
                metadata: [
                    "shed": "\(count)", "limit": "\(self.registry.total)",
                    "metric": "formattest_connections_refused_total{reason=\"shed_idle\"}",
                ]
            )
        }
        context.close(promise: nil)
    }

    /// Refuses the body in progress (408, and the connection closes: ``BodyDeadlineHandler``);
    /// retires the connection instead if the body arrived whole meanwhile.
    private func shedBody(context: ChannelHandlerContext) {
        guard self.id != nil else { return }
        guard self.bodyInProgress else {
            self.retire(context: context)
            return
        }
        let (registry, logger) = (self.registry, self.logger)
        // Counted only if the body is refused for it (not already refused for its rate).
        context.fireUserInboundEventTriggered(
            ShedRequestBody {
                Counter(label: "formattest_connections_refused_total", dimensions: [("reason", "shed_body")]).increment()
                if let count = registry.busyShedLog.due() {
                    logger.warning(
                        "request body refused (408): the listener is at its connection limit, nothing is idle, and its body was the oldest in progress",
                        metadata: [
                            "shed": "\(count)", "limit": "\(registry.total)",
                            "metric": "formattest_connections_refused_total{reason=\"shed_body\"}",
                        ]
                    )
                }
            })
    }

    /// This connection's request in flight, or its next one, is its last; if it stays idle for
    /// the minimum idle time, it is closed.
    private func retire(context: ChannelHandlerContext) {
        guard self.id != nil, !self.retiring else { return }
        self.retiring = true
        Counter(label: "formattest_connections_refused_total", dimensions: [("reason", "shed_busy")]).increment()
        if let count = self.registry.busyShedLog.due() {
            self.logger.warning(
                "connection retired: the listener is at its connection limit and nothing is idle; its answer in flight or next carries Connection: close",
                metadata: [
                    "shed": "\(count)", "limit": "\(self.registry.total)",
                    "metric": "formattest_connections_refused_total{reason=\"shed_busy\"}",
                ]
            )
        }
        if self.requestsInFlight == 0 && self.unwritten == 0 { self.closeIfStillIdle(context: context) }
    }

    /// A retired connection with nothing in flight is closed if nothing arrives for the minimum
    /// idle time.
    private func closeIfStillIdle(context: ChannelHandlerContext) {
        self.idleCheck?.cancel()
        let loopBound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
        self.idleCheck = context.eventLoop.assumeIsolated().scheduleTask(in: self.registry.minimumIdle) {
            let (handler, context) = loopBound.value
            handler.idleCheck = nil
            if handler.requestsInFlight == 0 && handler.unwritten == 0 { context.close(promise: nil) }
        }
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
        let head: HTTPRequest
        switch Self.unwrapInboundIn(data) {
        case .head(let request):
            head = request
        case .body:
            context.fireChannelRead(data)
            return
        case .end:
            if self.bodyInProgress, let id = self.id { self.registry.bodyEnded(id) }
            self.bodyInProgress = false
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
        self.idleCheck?.cancel()
        self.idleCheck = nil
        self.requestsInFlight += 1
        self.requests += 1
        let declared = head.headerFields[.contentLength]
        let hasBody = (declared.map { $0 != "0" } ?? false) || head.headerFields[.transferEncoding] != nil
        self.bodyInProgress = hasBody
        let now = NIODeadline.now()
        if let id = self.id { self.registry.mark(id, busy: true, body: hasBody, now: now) }
        let tooLarge = declared.map { BodyDeadlineHandler.declaresMoreThan(AppRequestContext.maximumBodySize, contentLength: $0) } ?? false
        if hasBody, !tooLarge, let expect = head.headerFields[.expect], expect.lowercased().contains("100-continue"), self.requestsInFlight == 1,
            self.unwritten == 0
        {
            context.writeAndFlush(Self.wrapOutboundOut(.head(HTTPResponse(status: .continue))), promise: nil)
        }
        let last: String?
        if self.requestsInFlight > ConnectionLimits.maximumPipelined {
            last = "pipelined"
        } else if self.retiring {
            last = "retired"
        } else if self.requests >= self.maximumRequests {
            last = "max_requests"
        } else if now - self.opened >= self.maximumAge {
            last = "max_age"
        } else {
            last = nil
        }
        self.headsRead.append(now)
        guard let last else {
            context.fireChannelRead(data)
            return
        }
        // This request is the connection's last.
        self.lastRequestPassed = true
        var closing = head
        closing.headerFields[.connection] = "close"
        switch last {
        case "pipelined":
            Counter(label: "formattest_connections_refused_total", dimensions: [("reason", "pipelined")]).increment()
            if let count = self.registry.pipelinedLog.due() {
                self.logger.warning(
                    "connection closing: its client pipelined more requests than are served unanswered; the rest are not read",
                    metadata: [
                        "limit": "\(ConnectionLimits.maximumPipelined)", "closed": "\(count)",
                        "metric": "formattest_connections_refused_total{reason=\"pipelined\"}",
                    ])
            }
        case "max_requests", "max_age":
            // Routine (as nginx's keepalive_requests and keepalive_time): counted, not logged.
            Counter(label: "formattest_connections_refused_total", dimensions: [("reason", last)]).increment()
        default:
            break
        }
        context.fireChannelRead(Self.wrapInboundOut(.head(closing)))
    }

    /// Nothing more is read from a connection past its last request.
    func read(context: ChannelHandlerContext) {
        guard !self.lastRequestPassed else { return }
        context.read()
    }

    /// Every answer part is watched until it is written to the socket: a connection is idle
    /// (sheddable) only with no request in flight and nothing unwritten, and a part that stays
    /// unwritten for `writeTimeout` (a client that sends requests and never reads the answers)
    /// closes the connection (`formattest_connections_refused_total{reason="write_timeout"}`).
    /// The answer to a connection's last request (or, retired, to the request in flight when no
    /// other is unanswered) carries `Connection: close`.
    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        var data = data
        if case .head(let response) = Self.unwrapOutboundIn(data), response.status.kind != .informational, !self.headsRead.isEmpty {
            let read = self.headsRead.removeFirst()
            self.timeToAnswer?.recordNanoseconds((NIODeadline.now() - read).nanoseconds)
        }
        switch Self.unwrapOutboundIn(data) {
        case .head(var response) where self.requestsInFlight == 1 && (self.lastRequestPassed || self.retiring):
            self.lastRequestPassed = true
            response.headerFields[.connection] = "close"
            data = Self.wrapOutboundOut(.head(response))
        case .end:
            self.requestsInFlight = max(0, self.requestsInFlight - 1)
            if self.requestsInFlight == 0 { self.arm(context: context) }
        default:
            break
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
                if self.retiring { self.closeIfStillIdle(context: context) }
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
        self.idleCheck?.cancel()
        self.idleCheck = nil
        if let id = self.id {
            self.id = nil
            self.registry.release(id)
        }
    }
}

/// Sent by ``ConnectionGuardHandler`` to ``BodyDeadlineHandler``: the body in progress is
/// refused (408), the connection chosen to be shed over the total; `refused` counts and logs it,
/// called only when the body was still being read.
struct ShedRequestBody {
    let refused: () -> Void
}

@available(*, unavailable)
extension ConnectionGuardHandler: Sendable {}
