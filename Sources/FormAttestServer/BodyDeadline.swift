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
/// It also closes the connection's input when the service refuses a body (``StopReading``): the
/// HTTP decoder then reports the unfinished body as a parse error, which Hummingbird would answer
/// with a second, unasked 400 after the service's own 413 or 408. That error is the service's
/// doing, so it is dropped here; the connection closes once the answer is written.
final class BodyDeadlineHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    /// The outbound event that closes the connection's input (``AppRequestContext/stopReading()``).
    struct StopReading: Sendable {}

    private let timeout: TimeAmount
    private var deadline: Scheduled<Void>?
    /// Set once the service closed the input: the decoder's complaint about the unread rest of
    /// the body is then expected, not the client's error.
    private var inputClosedByService = false

    init(timeout: Duration) {
        self.timeout = TimeAmount(timeout)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch Self.unwrapInboundIn(data) {
        case .head:
            self.deadline?.cancel()
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            self.deadline = context.eventLoop.assumeIsolated().scheduleTask(in: self.timeout) {
                loopBound.value.fireErrorCaught(BodyDeadlineExceeded())
            }
        case .end:
            self.deadline?.cancel()
            self.deadline = nil
        case .body:
            break
        }
        context.fireChannelRead(data)
    }

    func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        guard event is StopReading else {
            context.triggerUserOutboundEvent(event, promise: promise)
            return
        }
        self.inputClosedByService = true
        context.close(mode: .input, promise: promise)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if self.inputClosedByService, error is HTTPParserError {
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
        if let declared = request.headers[.contentLength], let length = Int(declared), length > limit {
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
