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
/// Two more rules about a request whose body the service will not read whole:
/// - A head that declares a body over ``AppRequestContext/maximumBodySize`` is passed on with
///   `Connection: close`: the service answers it 413 without reading the body, and the connection
///   must end with that answer. Without it, Hummingbird went on to serve requests pipelined behind
///   the refused body (RFC 9112 §9.6: after `close`, no further request is processed).
/// - The HTTP decoder's error for a body cut short (the client closed its side, or the service
///   closed the input after refusing a body) is passed on as ``IncompleteRequestBody``, this
///   request's error: its body reader answers 400, and when the service has already answered,
///   the connection just ends. As an `HTTPParserError`, Hummingbird would answer it again with a
///   second, unasked 400; dropped, a cut-off body would read as complete.
final class BodyDeadlineHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    private let timeout: TimeAmount
    private var deadline: Scheduled<Void>?
    /// Between a request's head and its end.
    private var bodyInProgress = false

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
        switch Self.unwrapInboundIn(data) {
        case .head(var head):
            self.deadline?.cancel()
            self.bodyInProgress = true
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            self.deadline = context.eventLoop.assumeIsolated().scheduleTask(in: self.timeout) {
                loopBound.value.fireErrorCaught(BodyDeadlineExceeded())
            }
            if let declared = head.headerFields[.contentLength],
                Self.declaresMoreThan(AppRequestContext.maximumBodySize, contentLength: declared)
            {
                head.headerFields[.connection] = "close"
                context.fireChannelRead(Self.wrapInboundOut(.head(head)))
                return
            }
        case .end:
            self.deadline?.cancel()
            self.deadline = nil
            self.bodyInProgress = false
        case .body:
            break
        }
        context.fireChannelRead(data)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if self.bodyInProgress, let error = error as? HTTPParserError {
            self.bodyInProgress = false
            context.fireErrorCaught(IncompleteRequestBody(parserError: error))
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

/// The HTTP decoder found a request's body cut short (``BodyDeadlineHandler``).
struct IncompleteRequestBody: Error, CustomStringConvertible {
    let parserError: HTTPParserError
    var description: String { "the request's body ended early: \(self.parserError)" }
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
        } catch let error as IncompleteRequestBody {
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
