//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation
import Logging
import Metrics

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The low-space guard's settings (``ServerConfiguration/storageGuard``): the directories whose
/// filesystems must keep `minimumFreeBytes` free for a new form to be taken.
public struct StorageGuardConfiguration: Sendable, Hashable {
    /// Directories on the filesystems to watch: the SQLite store's, the evidence archive's.
    public var paths: [String]
    /// Below this many bytes available to the service on any of them, new forms are refused
    /// (507 `insufficient_storage`) and `/healthz` answers 503 saying so.
    public var minimumFreeBytes: UInt64
    /// How long one look at the filesystems stands for (callers in between share it).
    public var interval: Duration

    public init(paths: [String], minimumFreeBytes: UInt64, interval: Duration = .seconds(1)) {
        self.paths = paths
        self.minimumFreeBytes = minimumFreeBytes
        self.interval = interval
    }
}

/// Refuses new forms before the disk is full, so that the store never fails for lack of space:
/// one user signing in a loop (every accepted form writes a replay record and, with evidence on,
/// a record of about 9 KB) fills the disk only down to the threshold, and every user keeps the
/// service's reads, `/healthz` and the operators' API.
///
/// `statvfs` on each path: the bytes available to an unprivileged writer (`f_bavail`, not
/// counting the blocks reserved for root). A path that cannot be examined counts as low: the
/// guard fails closed, and logs why.
actor StorageGuard {
    /// What the guard saw: `nil` when every filesystem has room.
    struct Shortage: Sendable, Hashable {
        var path: String
        /// `nil` when the filesystem could not be examined.
        var availableBytes: UInt64?
    }

    let configuration: StorageGuardConfiguration
    private var last: (at: ContinuousClock.Instant, shortage: Shortage?)?

    init(_ configuration: StorageGuardConfiguration) {
        self.configuration = configuration
    }

    /// The first filesystem below the threshold, or nil; looked at once an interval.
    func shortage(logger: Logger) -> Shortage? {
        if let last = self.last, ContinuousClock.now - last.at < self.configuration.interval {
            return last.shortage
        }
        var found: Shortage?
        for path in self.configuration.paths {
            let available = Self.availableBytes(path)
            if available.map({ $0 < self.configuration.minimumFreeBytes }) ?? true {
                found = Shortage(path: path, availableBytes: available)
                break
            }
        }
        if found != self.last?.shortage {
            if let found {
                logger.error(
                    "storage low: new forms are refused (507 insufficient_storage)",
                    metadata: [
                        "path": .string(found.path), "availableBytes": .string(found.availableBytes.map(String.init) ?? "unknown"),
                        "minimumFreeBytes": .stringConvertible(self.configuration.minimumFreeBytes),
                    ]
                )
            } else if self.last != nil {
                logger.notice("storage: room again; new forms are taken")
            }
        }
        Gauge(label: "formattest_storage_low").record(found == nil ? 0 : 1)
        self.last = (ContinuousClock.now, found)
        return found
    }

    /// The bytes available to an unprivileged writer on `path`'s filesystem; nil when `statvfs`
    /// fails.
    static func availableBytes(_ path: String) -> UInt64? {
        var stats = statvfs()
        guard statvfs(path, &stats) == 0 else { return nil }
        let (bytes, overflow) = UInt64(stats.f_bavail).multipliedReportingOverflow(by: UInt64(stats.f_frsize))
        return overflow ? UInt64.max : bytes
    }
}
