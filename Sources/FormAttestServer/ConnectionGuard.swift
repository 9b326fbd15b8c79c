//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import HummingbirdCore
import Logging
import Metrics
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTPTypes

/// The connection limits of one listener: in total, per peer address, and the time a connection
/// may take to send a request's head.
public struct ConnectionLimits: Sendable, Hashable {
    /// Open connections in total: at the limit the listener stops accepting (new connections wait
    /// in the kernel's backlog) until one closes.
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
}

/// The total cap, as Hummingbird's accept gate: counts open connections and stops reading the
/// server channel (accepting) at the cap. The transitions are logged and counted
/// (`formattest_connections_saturated_total`), so that a full listener is never silent.
struct ConnectionCap: AvailableConnectionsDelegate {
    let maximum: Int
    let logger: Logger
    var open = 0

    mutating func connectionOpened() {
        self.open += 1
        if self.open == self.maximum {
            Counter(label: "formattest_connections_saturated_total").increment()
            self.logger.warning(
                "connection limit reached: new connections wait in the backlog until one closes",
                metadata: ["open": "\(self.open)", "limit": "\(self.maximum)"]
            )
        }
    }

    mutating func connectionClosed() {
        self.open -= 1
    }

    func isAcceptingNewConnections() -> Bool { self.open < self.maximum }
}

/// The open connections of one listener by peer address (shared by its connections' handlers,
/// which run on several event loops).
final class PeerConnections: Sendable {
    private let counts = NIOLockedValueBox([String: Int]())
    let limit: Int

    init(limit: Int) {
        self.limit = limit
    }

    /// Counts one more connection of `peer`; false (and not counted) when it is at the limit.
    func admit(_ peer: String) -> Bool {
        self.counts.withLockedValue { counts in
            let open = counts[peer, default: 0]
            guard open < self.limit else { return false }
            counts[peer] = open + 1
            return true
        }
    }

    func release(_ peer: String) {
        self.counts.withLockedValue { counts in
            let open = counts[peer, default: 1] - 1
            counts[peer] = open > 0 ? open : nil
        }
    }

    var openCount: Int { self.counts.withLockedValue { $0.values.reduce(0, +) } }
}

/// In each connection's pipeline, after HTTP decoding: the per-peer cap (a connection over it is
/// closed at once, logged and counted `formattest_connections_refused_total{reason="per_address"}`)
/// and the header deadline (a connection that has not sent a complete request head within
/// `headerTimeout` of opening, or of its last answer, is closed:
/// `formattest_connections_refused_total{reason="header_timeout"}`). A connection that sends nothing
/// thus holds its descriptor for the header deadline, not the idle timeout.
final class ConnectionGuardHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let peers: PeerConnections?
    private let ipv6Prefix: Int
    private let headerTimeout: TimeAmount
    private let logger: Logger
    private var admittedPeer: String?
    private var started = false
    private var deadline: Scheduled<Void>?
    /// Requests whose head arrived and whose answer is not yet complete.
    private var requestsInFlight = 0

    init(peers: PeerConnections?, ipv6Prefix: Int, headerTimeout: Duration, logger: Logger) {
        self.peers = peers
        self.ipv6Prefix = ipv6Prefix
        self.headerTimeout = TimeAmount(headerTimeout)
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
        if let peers = self.peers, let address = context.channel.remoteAddress {
            let peer = ClientAddress.key(address, ipv6Prefix: self.ipv6Prefix) ?? "unknown"
            guard peers.admit(peer) else {
                Counter(label: "formattest_connections_refused_total", dimensions: [("reason", "per_address")]).increment()
                self.logger.warning("connection closed: its address is at the per-address connection limit", metadata: ["limit": "\(peers.limit)"])
                context.close(promise: nil)
                return
            }
            self.admittedPeer = peer
        }
        self.arm(context: context)
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
        if case .head = Self.unwrapInboundIn(data) {
            self.deadline?.cancel()
            self.deadline = nil
            self.requestsInFlight += 1
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = Self.unwrapOutboundIn(data) {
            self.requestsInFlight = max(0, self.requestsInFlight - 1)
            if self.requestsInFlight == 0 { self.arm(context: context) }
        }
        context.write(data, promise: promise)
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
        if let peer = self.admittedPeer {
            self.admittedPeer = nil
            self.peers?.release(peer)
        }
    }
}

@available(*, unavailable)
extension ConnectionGuardHandler: Sendable {}
