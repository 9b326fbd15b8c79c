//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import Foundation

/// Reads back the records an earlier `wrap --batch` run wrote (``BatchRecord``), one at a time and
/// in order, so that a rerun walks them in step with its input (memory: one record).
///
/// A record counts only when its line is complete (ends with a newline) and parses. The last line
/// of the file may be torn (the run was killed mid-write, or the machine lost power before the
/// bytes reached the disk): it is not a record, and ``validEnd`` stays before it so that the
/// writer cuts it off and the line is done again. A bad line followed by more records is not a
/// torn write but a damaged file: the run stops rather than resume over it.
struct BatchRecordReader {
    /// A record's line may hold the tokens of a line of up to 1 MiB (`--max-line-bytes`'s
    /// default) several times over; 64 MiB bounds it without refusing any record this writes.
    static let maximumRecordBytes = 64 << 20

    private let handle: FileHandle
    private let path: String
    private var buffer: [UInt8] = []
    private var start = 0
    private var atEnd = false
    private var recordNumber = 0
    /// The offset just after the last complete record returned.
    private(set) var validEnd: UInt64 = 0
    /// Bytes after ``validEnd`` that are not a record (a torn last line), once ``next()`` returned `nil`.
    private(set) var tornBytes = 0
    /// Whether those bytes begin as a record does (`{"`): a tail that does not is no torn write
    /// of this command's, and is never cut off.
    private(set) var tornLooksLikeRecord = true

    /// `nil` when there is no file at `path` (a first run).
    init?(path: String) throws {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        guard let handle = FileHandle(forReadingAtPath: path) else { throw UsageError("cannot read \(path) to resume from it") }
        self.handle = handle
        self.path = path
    }

    /// The next complete record, or `nil` after the last one (a torn tail is then in ``tornBytes``).
    mutating func next() throws -> BatchRecord? {
        while true {
            if let newline = self.buffer[self.start...].firstIndex(of: 0x0A) {
                let content = Array(self.buffer[self.start..<newline])
                self.start = newline + 1
                self.recordNumber += 1
                if let record = BatchRecord(parsing: content) {
                    self.validEnd += UInt64(content.count + 1)
                    return record
                }
                // A bad complete line: torn only if nothing follows it.
                try self.fill()
                guard self.start >= self.buffer.count else {
                    throw UsageError(
                        "\(self.path): line \(self.recordNumber) is not a batch record and more follow it; not resuming over a damaged file")
                }
                self.tornBytes = content.count + 1
                self.tornLooksLikeRecord = content.starts(with: [0x7B, 0x22])
                return nil
            }
            if self.atEnd {
                self.tornBytes = self.buffer.count - self.start
                self.tornLooksLikeRecord = self.buffer[self.start...].starts(with: [0x7B, 0x22])
                self.start = self.buffer.count
                try? self.handle.close()
                return nil
            }
            if self.buffer.count - self.start > Self.maximumRecordBytes {
                throw UsageError("\(self.path): line \(self.recordNumber + 1) is longer than any batch record; not resuming over it")
            }
            try self.read()
        }
    }

    /// Reads until the buffer holds more bytes or the file ends.
    private mutating func fill() throws {
        while self.start >= self.buffer.count && !self.atEnd { try self.read() }
    }

    private mutating func read() throws {
        if self.start > 0 {
            self.buffer.removeFirst(self.start)
            self.start = 0
        }
        let chunk: Data?
        do {
            chunk = try self.handle.read(upToCount: 256 * 1024)
        } catch {
            throw UsageError("cannot read \(self.path) to resume from it")
        }
        guard let chunk, !chunk.isEmpty else {
            self.atEnd = true
            return
        }
        self.buffer += chunk
    }
}
