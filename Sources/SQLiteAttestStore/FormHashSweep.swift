//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation

/// Where the purge's sweep of the form hashes stands: the last hash a step examined, for the pass
/// identified by its `now`.
///
/// The form hashes live in one B-tree in hash order (migration v9), so a step that deletes the
/// expired records among a run of adjacent hashes rewrites a few adjacent pages, where deleting in
/// expiry order rewrote about one page for every record (the hashes are random: two records that
/// expire together sit on different pages). A pass sweeps the table from the first hash to the
/// last; a step with another `now` starts a new sweep from the first hash, so that a pass that
/// reports itself complete has examined every record as of its own `now`.
final class FormHashSweep: @unchecked Sendable {
    /// Guards the state below: steps run one at a time on the writer, but the type does not rely
    /// on it.
    private let lock = NSLock()
    /// The `now` of the sweep under way, `nil` before the first step.
    private var pass: Date?
    /// The last hash examined by the sweep under way (the next step starts after it); empty at
    /// the start, before every hash.
    private var cursor = Data()
    /// Whether the sweep of the pass at ``pass`` reached the end of the table.
    private var done = false

    /// Where a step of the pass at `now` starts: after the last hash this pass examined, or at the
    /// first hash for a new pass; `nil` when this pass's sweep is over.
    func start(for now: Date) -> Data? {
        self.lock.withLock {
            if self.pass != now {
                self.pass = now
                self.cursor = Data()
                self.done = false
            }
            return self.done ? nil : self.cursor
        }
    }

    /// Records what a committed step of the pass at `now` examined: up to `cursor`, or, for
    /// `nil`, to the end of the table (the pass's sweep is over).
    func advance(to cursor: Data?, for now: Date) {
        self.lock.withLock {
            guard self.pass == now else { return }
            if let cursor {
                self.cursor = cursor
            } else {
                self.done = true
            }
        }
    }
}
