//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Logging
import Metrics
import NIOCore

/// First in a listener's server-channel pipeline: every error of `accept(2)` (EMFILE or ENFILE at
/// the descriptor limit, ENOBUFS, ENOMEM) is counted (`formattest_accept_errors_total`) and
/// logged, at most one line a second with the count since the last line, and stops accepting for
/// a back-off (100 ms, doubling to 1 s while accepts keep failing; back to 100 ms after a
/// connection is accepted).
///
/// Why NIO's own `AcceptBackoffHandler` (which `ServerBootstrap` puts in every server channel,
/// 1 s) did not stop the spin: it delays the channel's next `read()`, but NIO's server channel
/// clears its pending read only when `accept(2)` succeeds. After EMFILE the read stays pending,
/// the listener stays registered for readability, and the connection waiting in the backlog keeps
/// it readable (level-triggered epoll): `accept(2)` ran again at once, tens of thousands of times
/// a second, without a `read()` for the back-off handler to delay. Configuring that handler cannot
/// help; what unregisters the interest is the `autoRead` option: off, NIO takes the listener off
/// the selector for readability; on again, it registers it and reads. Accepting resumes by that
/// read directly (not through the pipeline's `read()`), so one accept round after a back-off is
/// not gated by the connection cap: at most `maxMessagesPerRead` (4) connections more.
final class AcceptErrorObserver: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = any Channel
    typealias InboundOut = any Channel

    static let counter = Counter(label: "formattest_accept_errors_total")
    static let firstBackoff = TimeAmount.milliseconds(100)
    static let longestBackoff = TimeAmount.seconds(1)

    private let logger: Logger
    private let interval: TimeAmount
    private var lastLine: NIODeadline?
    private var unlogged = 0
    private var nextBackoff = AcceptErrorObserver.firstBackoff
    private var resume: Scheduled<Void>?

    init(logger: Logger, interval: TimeAmount = .seconds(1)) {
        self.logger = logger
        self.interval = interval
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.nextBackoff = Self.firstBackoff
        context.fireChannelRead(data)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        Self.counter.increment()
        self.unlogged += 1
        let now = NIODeadline.now()
        if self.lastLine.map({ now - $0 >= self.interval }) ?? true {
            self.logger.error(
                "accept failed: the listener cannot take new connections (at the descriptor limit?); accepting pauses, then retries",
                metadata: [
                    "error": "\(error)", "errors": "\(self.unlogged)", "backoff": "\(self.nextBackoff.nanoseconds / 1_000_000) ms",
                    "metric": "formattest_accept_errors_total",
                ]
            )
            self.unlogged = 0
            self.lastLine = now
        }
        self.pause(context: context)
        context.fireErrorCaught(error)
    }

    /// Stops accepting (off the selector for readability) for the back-off, then accepts again.
    private func pause(context: ChannelHandlerContext) {
        guard self.resume == nil, context.channel.isActive else { return }
        let delay = self.nextBackoff
        self.nextBackoff = min(delay * 2, Self.longestBackoff)
        Self.setAutoRead(false, on: context.channel)
        let channel = context.channel
        self.resume = context.eventLoop.assumeIsolated().scheduleTask(in: delay) {
            self.resume = nil
            if channel.isActive { Self.setAutoRead(true, on: channel) }
        }
    }

    private static func setAutoRead(_ enabled: Bool, on channel: any Channel) {
        if let options = channel.syncOptions {
            try? options.setOption(.autoRead, value: enabled)
        } else {
            channel.setOption(.autoRead, value: enabled).whenFailure { _ in }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.resume?.cancel()
        self.resume = nil
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        if let resume = self.resume {
            resume.cancel()
            self.resume = nil
            Self.setAutoRead(true, on: context.channel)
        }
    }

    /// Puts an observer first in `channel`'s pipeline (a listener's server channel), on its event loop.
    static func install(on channel: any Channel, logger: Logger) async {
        do {
            try await channel.eventLoop.submit {
                try channel.pipeline.syncOperations.addHandler(AcceptErrorObserver(logger: logger), position: .first)
            }.get()
        } catch {
            logger.warning("accept errors will not be logged: the observer could not be installed", metadata: ["error": "\(error)"])
        }
    }
}
