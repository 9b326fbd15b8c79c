//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Logging
import Metrics
import NIOCore

/// First in a listener's server-channel pipeline: every error of `accept(2)` (EMFILE or ENFILE at
/// the descriptor limit, ENOBUFS, ENOMEM) is counted (`formattest_accept_errors_total`) and
/// logged, at most one line a second with the count since the last line, then passed on to NIO's
/// accept backoff (which pauses accepting for a second). Without it, a listener at the
/// descriptor limit stops accepting without a word.
final class AcceptErrorObserver: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = any Channel

    static let counter = Counter(label: "formattest_accept_errors_total")

    private let logger: Logger
    private let interval: TimeAmount
    private var lastLine: NIODeadline?
    private var unlogged = 0

    init(logger: Logger, interval: TimeAmount = .seconds(1)) {
        self.logger = logger
        self.interval = interval
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        Self.counter.increment()
        self.unlogged += 1
        let now = NIODeadline.now()
        if self.lastLine.map({ now - $0 >= self.interval }) ?? true {
            self.logger.error(
                "accept failed: the listener cannot take new connections (at the descriptor limit?); NIO retries in 1 s",
                metadata: ["error": "\(error)", "errors": "\(self.unlogged)", "metric": "formattest_accept_errors_total"]
            )
            self.unlogged = 0
            self.lastLine = now
        }
        context.fireErrorCaught(error)
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
