//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Hummingbird
import HummingbirdCore
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
/// cost 25-30 µs of the server's CPU per request under load (alternating runs, docs/performance.md);
/// this timer is set and cancelled on the event loop that reads the request, and costs nothing
/// measurable.
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
    /// Between a request's head and its end.
    private var bodyInProgress = false
    /// The current request's body bytes passed on so far.
    private var bodyBytes = 0
    /// Set when a body was refused (over the limit, or past its deadline): nothing more is passed on.
    private var refused = false

    init(timeout: Duration) {
        self.timeout = TimeAmount(timeout)
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
            self.bodyInProgress = false
        }
        context.fireChannelRead(data)
    }

    /// From now on nothing more is passed on, and no deadline is pending.
    private func refuse() {
        self.refused = true
        self.deadline?.cancel()
        self.deadline = nil
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
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.deadline?.cancel()
        self.deadline = nil
    }
}

/// The HTTP decoder found a request's body malformed or cut short, or something after a refused
/// body it no longer reads (``BodyDeadlineHandler``).
struct BrokenRequestBody: Error, CustomStringConvertible {
    let parserError: HTTPParserError
    var description: String { "the request's body is malformed or cut short: \(self.parserError)" }
}

/// A request's body did not arrive within the body timeout (``BodyDeadlineHandler``).
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
