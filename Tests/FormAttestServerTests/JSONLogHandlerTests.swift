//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import FormAttestServer
import Foundation
import Logging
import Testing

/// `serve --log-format json`'s handler, in process: one object a line, escaped by the project's
/// JSON writer whatever the text holds.
struct JSONLogHandlerTests {
    /// A logger whose lines are kept, and the lines.
    final class Captured: @unchecked Sendable {
        private let lock = NSLock()
        private var kept: [[UInt8]] = []

        /// The lines written so far.
        var lines: [[UInt8]] { self.lock.withLock { self.kept } }

        func append(_ line: [UInt8]) { self.lock.withLock { self.kept.append(line) } }

        func logger(level: Logger.Level = .info, provider: Logger.MetadataProvider? = nil) -> Logger {
            // An instant given as a number, not today's date: the `time` field's format is checked.
            let instant = Date(timeIntervalSince1970: 1_767_323_045.678)
            var logger = Logger(label: "formattest.test") { label in
                JSONLogHandler(label: label, metadataProvider: provider, now: { instant }, sink: { line in self.append(line) })
            }
            logger.logLevel = level
            return logger
        }

        var objects: [[String: Any]] {
            self.lines.compactMap { (try? JSONSerialization.jsonObject(with: Data($0))) as? [String: Any] }
        }
    }

    @Test("one object a line: time (RFC 3339 UTC, milliseconds), level, message, logger, and each metadata entry")
    func fields() throws {
        let captured = Captured()
        captured.logger().info("request", metadata: ["route": "/api/appattest/assert", "status": .stringConvertible(409), "code": "replay"])
        let line = try #require(captured.lines.first)
        #expect(line.last == UInt8(ascii: "\n") && line.filter { $0 == UInt8(ascii: "\n") }.count == 1)
        let object = try #require(captured.objects.first)
        #expect(object["time"] as? String == "2026-01-02T03:04:05.678Z")
        #expect(object["level"] as? String == "info")
        #expect(object["message"] as? String == "request")
        #expect(object["logger"] as? String == "formattest.test")
        #expect(object["route"] as? String == "/api/appattest/assert")
        #expect(object["code"] as? String == "replay")
        // An integer is a JSON number; the same digits given as text stay text.
        #expect((object["status"] as? NSNumber)?.intValue == 409 && !(object["status"] is String))
        captured.logger().info("request", metadata: ["status": "409"])
        #expect(captured.objects.last?["status"] as? String == "409")
    }

    @Test(
        "quotes, backslashes, newlines, control characters and non-ASCII text come back exactly, on one line",
        arguments: [
            "say \"hi\"", "back\\slash", "two\nlines", "tab\tand \u{01} and \u{1F}", "é e\u{301} 日本 🙂", "</script>",
        ])
    func escaping(text: String) throws {
        let captured = Captured()
        captured.logger().warning("\(text)", metadata: ["reason": .string(text)])
        let line = try #require(captured.lines.first)
        #expect(line.dropLast().allSatisfy { $0 != UInt8(ascii: "\n") && $0 >= 0x20 })
        let object = try #require(captured.objects.first)
        #expect(object["message"] as? String == text)
        #expect(object["reason"] as? String == text)
    }

    @Test("Hummingbird's hb.request.id is requestId; a metadata entry named like a fixed field is kept beside it, not over it")
    func names() throws {
        let captured = Captured()
        captured.logger().info("request", metadata: ["hb.request.id": "abc123", "time": "not the time", "level": "not the level"])
        let object = try #require(captured.objects.first)
        #expect(object["requestId"] as? String == "abc123")
        #expect(object["hb.request.id"] == nil)
        #expect(object["time"] as? String == "2026-01-02T03:04:05.678Z")
        #expect(object["metadata.time"] as? String == "not the time")
        #expect(object["level"] as? String == "info")
        #expect(object["metadata.level"] as? String == "not the level")
    }

    @Test("the metadata provider's entries (the trace id) are on every line; a line's own metadata wins over them")
    func provider() throws {
        let captured = Captured()
        let logger = captured.logger(provider: Logger.MetadataProvider { ["traceId": "0af7651916cd43dd8448eb211c80319c", "route": "provided"] })
        logger.info("one")
        logger.info("two", metadata: ["route": "/healthz"])
        let objects = captured.objects
        #expect(objects.count == 2)
        #expect(objects.allSatisfy { $0["traceId"] as? String == "0af7651916cd43dd8448eb211c80319c" })
        #expect(objects.first?["route"] as? String == "provided")
        #expect(objects.last?["route"] as? String == "/healthz")
    }

    @Test("nested metadata: a dictionary is an object, an array an array")
    func nested() throws {
        let captured = Captured()
        captured.logger().info(
            "nested", metadata: ["limits": ["total": .stringConvertible(1024), "name": "x"], "list": ["a", .stringConvertible(2)]])
        let object = try #require(captured.objects.first)
        let limits = try #require(object["limits"] as? [String: Any])
        #expect((limits["total"] as? NSNumber)?.intValue == 1024 && limits["name"] as? String == "x")
        let list = try #require(object["list"] as? [Any])
        #expect(list.count == 2 && list.first as? String == "a" && (list.last as? NSNumber)?.intValue == 2)
    }

    @Test("below the logger's level nothing is written")
    func level() {
        let captured = Captured()
        let logger = captured.logger(level: .warning)
        logger.info("quiet")
        #expect(captured.lines.isEmpty)
        logger.warning("loud")
        #expect(captured.objects.map { $0["message"] as? String } == ["loud"])
    }
}
