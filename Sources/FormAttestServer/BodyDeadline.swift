//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Hummingbird
import HummingbirdCore
import Logging
import Metrics
import NIOCore
import NIOHTTP1
import NIOHTTPTypes

/// A request's body must arrive whole within `timeout` of its head: a client that trickles its body
/// cannot hold a request (and a connection, and a file descriptor) open. Every method, not only
/// those that carry bodies: HTTP lets a GET or a DELETE have one too.
///
/// In each connection's pipeline, after HTTP decoding: a request's head arms one timer on the
/// connection's event loop and its end cancels it. When the timer fires first, the connection's
/// inbound stream fails with ``BodyDeadlineExceeded``, which ``BodyDeadlineMiddleware`` (reading
/// the body) answers with 408 before the connection closes. The former per-request deadline (a task
/// group with a reading task and a `Task.sleep`, whose Dispatch timer outlives its cancellation)
/// cost measurable server CPU per request under load (alternating runs, docs/performance.md);
/// this timer is set and cancelled on the event loop that reads the request, and costs nothing
/// measurable.
///
/// A body must also keep arriving at ``MinimumBodyRate`` over a sliding window: after its grace
/// (1 s) from the head, and then every second, a body whose bytes in the last
/// ``MinimumBodyRate/window`` (since the head, within the first) are fewer than the rate times
/// that time is refused like one past its deadline (408, the connection ends), counted
/// `formattest_connections_refused_total{reason="slow_body"}` and logged a line a second at most.
/// Without it, a client that trickles a byte a second holds its connection busy (never shed) for
/// the whole body timeout, and a few hundred addresses doing so keep every slot busy (issue 31 r4
/// F1); with the average since the head that the rate was before, bytes sent with the head bought
/// their size over the rate in seconds of sending nothing (r5 F2: 10.5 KB, past the body timeout).
/// `Expect: 100-continue` gets no longer grace: ``ConnectionGuardHandler`` answers `100 Continue`
/// at once, and its client sends its body (before, 2 s of grace for 0 bytes). One timer per body,
/// cancelled when the body ends: an honest body within the grace never sees it fire.
///
/// A ``ShedRequestBody`` event (the listener over its total, this body the oldest in progress:
/// ``ConnectionRegistry``) refuses the body in progress the same way, at once.
///
/// It also enforces what a refused body means for the connection, before Hummingbird sees more:
/// - Once a request's body is over ``AppRequestContext/maximumBodySize`` (declared by its
///   `Content-Length`, or counted as it streams) or past its deadline, nothing more from the
///   connection is passed on: the service answers 413 or 408 and the connection ends. Whatever the
///   client pipelined behind that body (already decoded, in the same read) is never served; before,
///   Hummingbird went on to serve it after the `Connection: close` answer (RFC 9112 §9.6). A head
///   that declares too much also goes on with `Connection: close`, so Hummingbird ends the
///   connection without waiting for the input to close.
/// - The HTTP decoder's error for a body that is malformed or cut short (the client closed its
///   side, or the service closed the input after refusing a body) goes on as
///   ``BrokenRequestBody``, this request's error: its body reader answers 400 `malformed_request`,
///   and when the service has already answered, the connection just ends. As an
///   `HTTPParserError`, Hummingbird would answer it again with a second, unasked 400; dropped, a
///   cut-off body would read as complete.
final class BodyDeadlineHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    private let timeout: TimeAmount
    private var deadline: Scheduled<Void>?
    private let minimumRate: MinimumBodyRate
    /// When the current request's head arrived.
    private var headArrived = NIODeadline.uptimeNanoseconds(0)
    /// The body's bytes at the checks of the rate within its window, oldest first (the head's 0
    /// first).
    private var marks: [(at: NIODeadline, bytes: Int)] = []
    private var rateCheck: Scheduled<Void>?
    /// Between a request's head and its end.
    private var bodyInProgress = false
    /// The current request's body bytes passed on so far.
    private var bodyBytes = 0
    /// Set when a body was refused (over the limit, or past its deadline): nothing more is passed on.
    private var refused = false

    init(timeout: Duration, minimumRate: MinimumBodyRate = .off) {
        self.timeout = TimeAmount(timeout)
        self.minimumRate = minimumRate
    }

    /// Whether a `Content-Length` value declares more than `limit` bytes: a run of digits whose
    /// value is over it, however large (a value beyond `Int` too).
    static func declaresMoreThan(_ limit: Int, contentLength value: String) -> Bool {
        guard !value.isEmpty, value.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return false }
        return Int(value).map { $0 > limit } ?? true
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !self.refused else { return }
        switch Self.unwrapInboundIn(data) {
        case .head(var head):
            self.deadline?.cancel()
            self.bodyInProgress = true
            self.bodyBytes = 0
            if let declared = head.headerFields[.contentLength],
                Self.declaresMoreThan(AppRequestContext.maximumBodySize, contentLength: declared)
            {
                head.headerFields[.connection] = "close"
                self.refuse()
                context.fireChannelRead(Self.wrapInboundOut(.head(head)))
                return
            }
            let loopBound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
            self.deadline = context.eventLoop.assumeIsolated().scheduleTask(in: self.timeout) {
                loopBound.value.handler.refuse()
                loopBound.value.context.fireErrorCaught(BodyDeadlineExceeded())
            }
            self.headArrived = .now()
            self.marks = [(self.headArrived, 0)]
            self.armRateCheck(context: context, at: self.headArrived + self.minimumRate.grace)
        case .body(let buffer):
            self.bodyBytes += buffer.readableBytes
            // This part takes the body over the limit: it goes on, so that the body's reader
            // refuses it (413), and nothing after it does.
            if self.bodyBytes > AppRequestContext.maximumBodySize {
                self.refuse()
            }
        case .end:
            self.deadline?.cancel()
            self.deadline = nil
            self.rateCheck?.cancel()
            self.rateCheck = nil
            self.bodyInProgress = false
        }
        context.fireChannelRead(data)
    }

    /// Sets the rate's check at `due`: the body is refused if its bytes since the oldest mark in
    /// the window are behind the rate, else the check repeats a second later.
    private func armRateCheck(context: ChannelHandlerContext, at due: NIODeadline) {
        guard self.minimumRate.bytesPerSecond > 0 else { return }
        let loopBound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
        self.rateCheck = context.eventLoop.assumeIsolated().scheduleTask(deadline: due) {
            let (handler, context) = loopBound.value
            handler.rateCheck = nil
            guard handler.bodyInProgress, !handler.refused, let oldest = handler.marks.first else { return }
            let now = NIODeadline.now()
            if handler.minimumRate.isBehind(bytes: handler.bodyBytes - oldest.bytes, since: oldest.at, now: now) {
                handler.minimumRate.refused(bytes: handler.bodyBytes, since: handler.headArrived)
                handler.refuse()
                context.fireErrorCaught(BodyDeadlineExceeded())
            } else {
                handler.marks = handler.minimumRate.window(handler.marks, adding: (now, handler.bodyBytes))
                handler.armRateCheck(context: context, at: now + MinimumBodyRate.checkInterval)
            }
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard let shed = event as? ShedRequestBody else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        guard self.bodyInProgress, !self.refused else { return }
        self.refuse()
        shed.refused()
        context.fireErrorCaught(BodyDeadlineExceeded())
    }

    /// From now on nothing more is passed on, and no deadline is pending.
    private func refuse() {
        self.refused = true
        self.deadline?.cancel()
        self.deadline = nil
        self.rateCheck?.cancel()
        self.rateCheck = nil
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let error = error as? HTTPParserError, self.bodyInProgress || self.refused {
            self.bodyInProgress = false
            context.fireErrorCaught(BrokenRequestBody(parserError: error))
            return
        }
        context.fireErrorCaught(error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.deadline?.cancel()
        self.deadline = nil
        self.rateCheck?.cancel()
        self.rateCheck = nil
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.deadline?.cancel()
        self.deadline = nil
        self.rateCheck?.cancel()
        self.rateCheck = nil
    }
}

/// The minimum rate a request body must arrive at (``BodyDeadlineHandler``): after `grace` from
/// the head, and every ``checkInterval`` after, the body's bytes in the last `window` (since the
/// head, within the first) must be at least `bytesPerSecond` times that time. As Apache's
/// `mod_reqtimeout` `body=…,MinRate=…`, but over a sliding window rather than since the head, so
/// that bytes sent early buy no time later. Shared by a listener's connections for its log line
/// (at most one a second).
struct MinimumBodyRate: Sendable {
    /// Bytes a second; 0: no minimum.
    let bytesPerSecond: Int
    let grace: TimeAmount
    /// The sliding window the rate is counted over.
    let window: TimeAmount
    let logger: Logger?
    let log: RateLimitedLog

    /// How often a body in progress is checked after its grace.
    static let checkInterval = TimeAmount.seconds(1)

    static let off = MinimumBodyRate(bytesPerSecond: 0, grace: .seconds(1), logger: nil)

    init(bytesPerSecond: Int, grace: TimeAmount = .seconds(1), window: TimeAmount = .seconds(2), logger: Logger?) {
        self.bytesPerSecond = bytesPerSecond
        self.grace = grace
        self.window = window
        self.logger = logger
        self.log = RateLimitedLog()
    }

    /// Whether `bytes`, arrived since `start`, are fewer than the rate asks for at `now`.
    func isBehind(bytes: Int, since start: NIODeadline, now: NIODeadline) -> Bool {
        guard self.bytesPerSecond > 0 else { return false }
        let elapsed = (now - start).nanoseconds
        return Double(bytes) < Double(self.bytesPerSecond) * Double(elapsed) / 1e9
    }

    /// The marks with `mark` added, less those no longer needed: the oldest kept is the newest
    /// at least `window` before `mark` (the next check, a second later, counts from at most
    /// `window` plus a second back; late timers lengthen the window, never shorten it).
    func window(_ marks: [(at: NIODeadline, bytes: Int)], adding mark: (at: NIODeadline, bytes: Int)) -> [(at: NIODeadline, bytes: Int)] {
        var marks = marks + [mark]
        // The next check is at `mark.at + checkInterval`: it counts from the newest mark at
        // least `window` before it.
        let from = mark.at + Self.checkInterval - self.window
        while marks.count > 1 && marks[1].at <= from { marks.removeFirst() }
        return marks
    }

    /// Counts a body refused for its rate, and logs it (a line a second at most).
    func refused(bytes: Int, since head: NIODeadline) {
        Counter(label: "formattest_connections_refused_total", dimensions: [("reason", "slow_body")]).increment()
        if let logger = self.logger, let count = self.log.due() {
            logger.warning(
                "request body too slow: fewer bytes than the minimum body rate asks for; answered 408 and the connection closed",
                metadata: [
                    "bytes": "\(bytes)", "milliseconds": "\((NIODeadline.now() - head).nanoseconds / 1_000_000)",
                    "min_body_rate": "\(self.bytesPerSecond)", "refused": "\(count)",
                    "metric": "formattest_connections_refused_total{reason=\"slow_body\"}",
                ])
        }
    }
}

/// The HTTP decoder found a request's body malformed or cut short, or something after a refused
/// body it no longer reads (``BodyDeadlineHandler``).
struct BrokenRequestBody: Error, CustomStringConvertible {
    let parserError: HTTPParserError
    var description: String { "the request's body is malformed or cut short: \(self.parserError)" }
}

/// A request's body did not arrive within the body timeout, or fell behind the minimum body rate
/// (``BodyDeadlineHandler``).
struct BodyDeadlineExceeded: Error {}

@available(*, unavailable)
extension BodyDeadlineHandler: Sendable {}

/// Reads the whole request body (up to the context's size limit) before the route runs; routes then
/// read the buffered body. A declared or actual size over the limit is answered 413, a body that
/// missed ``BodyDeadlineHandler``'s deadline 408; after either, the connection is no longer read.
struct BodyDeadlineMiddleware: RouterMiddleware {
    typealias Context = AppRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let limit = context.maxUploadSize
        // A declared length over the limit is refused before a byte of the body is read.
        if let declared = request.headers[.contentLength], BodyDeadlineHandler.declaresMoreThan(limit, contentLength: declared) {
            context.stopReading()
            throw APIError.bodyTooLarge
        }
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: limit)
        } catch is BodyDeadlineExceeded {
            context.stopReading()
            throw APIError.requestTimeout
        } catch is NIOTooManyBytesError {
            context.stopReading()
            throw APIError.bodyTooLarge
        } catch let error as HTTPError where error.status == .contentTooLarge {
            context.stopReading()
            throw APIError.bodyTooLarge
        } catch let error as BrokenRequestBody {
            throw APIError.malformedRequest(error.description)
        } catch let error as IOError {
            // The client reset or broke the connection mid-body: its doing, never a 5xx (nobody is
            // left to read the answer, but the log and the metrics must not count a server error).
            throw APIError.malformedRequest("the connection failed while the body was read (errno \(error.errnoCode))")
        } catch let error as ChannelError {
            throw APIError.malformedRequest("the connection ended while the body was read (\(error))")
        }
        var buffered = request
        buffered.body = .init(buffer: buffer)
        return try await next(buffered, context)
    }
}
