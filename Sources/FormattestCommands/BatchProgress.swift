//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// One status line on a terminal's stderr, redrawn at most five times a second: lines done (and
/// resumed), the rate, errors and, for a file, the share read and the time left. Nothing at all
/// when stderr is not a terminal.
final class BatchProgress {
    private let totalBytes: Int?
    private let enabled: Bool
    private let clock = ContinuousClock()
    private let start: ContinuousClock.Instant
    private var lastDraw: ContinuousClock.Instant
    /// Input bytes already read when the first new line was done (lines resumed are not work).
    private var baselineBytes: Int?

    init(totalBytes: Int?, enabled: Bool = isatty(STDERR_FILENO) == 1) {
        self.totalBytes = totalBytes
        self.enabled = enabled
        let now = ContinuousClock.now
        self.start = now
        self.lastDraw = now
    }

    /// - Parameters:
    ///   - done: lines done by this run; `resumed`: lines an earlier run did; `errors`: failed lines.
    ///   - bytes: input bytes read so far.
    func update(done: Int, resumed: Int, errors: Int, bytes: Int, force: Bool = false) {
        guard self.enabled else { return }
        let now = self.clock.now
        if self.baselineBytes == nil && done > 0 {
            self.baselineBytes = bytes
        }
        guard force || now - self.lastDraw >= .milliseconds(200) else { return }
        self.lastDraw = now
        let elapsed = Self.seconds(now - self.start)
        let rate = elapsed > 0 ? Double(done) / elapsed : 0
        var text = "\r\(done) lines"
        if resumed > 0 { text += " (+\(resumed) resumed)" }
        text += ", \(Int(rate.rounded()))/s, \(errors) error\(errors == 1 ? "" : "s")"
        if let total = self.totalBytes, total > 0 {
            let read = min(bytes, total)
            text += ", \(read * 100 / total)%"
            if let baseline = self.baselineBytes, read > baseline, elapsed > 1 {
                let left = Double(total - read) / (Double(read - baseline) / elapsed)
                text += ", \(Self.clockText(left)) left"
            }
        }
        FileHandle.standardError.write(Data((text + "\u{1B}[K").utf8))
    }

    func finish() {
        if self.enabled { FileHandle.standardError.write(Data("\n".utf8)) }
    }

    static func clockText(_ seconds: Double) -> String {
        let total = Int(seconds.rounded())
        let (hours, minutes, rest) = (total / 3600, total / 60 % 60, total % 60)
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return hours > 0 ? "\(hours):\(two(minutes)):\(two(rest))" : "\(minutes):\(two(rest))"
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
