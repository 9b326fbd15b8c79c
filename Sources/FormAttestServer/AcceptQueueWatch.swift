//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

package import Logging
import Metrics
import NIOConcurrencyHelpers
package import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// Watches a listener's accept queue: the connections the kernel has completed and the service
/// has not yet accepted, read every second from the listening socket's `TCP_INFO` (on Linux,
/// `tcpi_unacked` of a listening socket is its accept queue's length, `tcpi_sacked` the backlog).
///
/// A connection waits there when the listener is at its hard ceiling (``ConnectionCap``), and
/// also, under the ceiling, when the service is saturated: the accept loop then gets its turn
/// only between the open connections' requests, and accepts a few connections a turn (red team
/// r7 F7: with 1,000 connections polling, newcomers waited 24–29 s with 99–245 connections queued,
/// and nothing said so). The length is the gauge `formattest_listener_accept_queue{listener}`;
/// every reading that finds the queue non-empty counts a second in
/// `formattest_listener_accept_waiting_seconds_total{listener}`, which the alert
/// `FormAttestNewcomersWaiting` watches over 5 minutes (so a queue that empties now and then
/// between readings is still counted: red team r8); a queue still non-empty after ``patience``
/// consecutive readings is logged (a warning, at most one line every ``logInterval``).
///
/// What it reports is the kernel's own count, so a queue the service cannot see (it has not
/// accepted those connections) is still seen. Elsewhere than Linux nothing is read.
package enum AcceptQueueWatch {
    /// Consecutive readings with a non-empty queue before it is logged: a burst of connections
    /// accepted within a second or two is routine.
    static let patience = 3
    static let logInterval = TimeAmount.seconds(10)

    private struct State {
        var waiting = 0
        var lastLine: NIODeadline?
    }

    /// Starts watching `channel` (a listener's server channel) until it closes.
    package static func install(on channel: any Channel, listener: String, logger: Logger, interval: TimeAmount = .seconds(1)) {
        #if os(Linux)
            guard let provider = channel as? any SocketOptionProvider else {
                logger.warning("the accept queue will not be watched: the listener gives no socket options", metadata: ["listener": "\(listener)"])
                return
            }
            let gauge = Gauge(label: "formattest_listener_accept_queue", dimensions: [("listener", listener)])
            let waitingSeconds = Counter(label: "formattest_listener_accept_waiting_seconds_total", dimensions: [("listener", listener)])
            let state = NIOLockedValueBox(State())
            let task = channel.eventLoop.scheduleRepeatedAsyncTask(initialDelay: interval, delay: interval) { _ in
                provider.getTCPInfo().map { info in
                    let queued = Int(info.tcpi_unacked)
                    gauge.record(queued)
                    let line: (seconds: Int, backlog: Int)? = state.withLockedValue { state in
                        guard queued > 0 else {
                            state.waiting = 0
                            return nil
                        }
                        state.waiting += 1
                        waitingSeconds.increment()
                        guard state.waiting >= Self.patience else { return nil }
                        let now = NIODeadline.now()
                        guard state.lastLine.map({ now - $0 >= Self.logInterval }) ?? true else { return nil }
                        state.lastLine = now
                        return (state.waiting, Int(info.tcpi_sacked))
                    }
                    if let line {
                        logger.warning(
                            "new connections are waiting to be accepted: the service is saturated or at its connection ceiling, and newcomers wait in the kernel's queue",
                            metadata: [
                                "listener": "\(listener)", "queued": "\(queued)", "backlog": "\(line.backlog)", "seconds": "\(line.seconds)",
                                "metric": "formattest_listener_accept_queue",
                            ])
                    }
                }.recover { _ in () }
            }
            channel.closeFuture.whenComplete { _ in task.cancel() }
        #endif
    }
}
