//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import CanonicalJSON
public import Foundation
public import Logging
import NIOConcurrencyHelpers
import RFC3339

/// A swift-log handler that writes one JSON object a line (`serve --log-format json`), for log
/// shippers: `time` (RFC 3339 UTC, milliseconds), `level`, `message`, `logger` (the label), then
/// every metadata entry as a member of its own.
///
/// The object is built as a `JSONValue` and serialized by the project's RFC 8785 writer, so
/// every string, whatever it holds (quotes, control characters, lone surrogates), is escaped by
/// the one JSON writer and a line is always one valid object. Two names are renamed for readers:
/// Hummingbird's `hb.request.id` is `requestId`, and a metadata entry named like one of the four
/// fields above is kept under `metadata.<name>` rather than overwriting it.
///
/// What is logged is decided where it is logged: the service's call sites log route templates,
/// statuses, durations and error codes, never a username, a key id or a form's content; this
/// handler adds nothing of a request's own.
public struct JSONLogHandler: LogHandler {
    /// Where the lines go: each call receives one whole line, its newline included.
    public typealias Sink = @Sendable ([UInt8]) -> Void

    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String
    private let sink: Sink
    private let now: @Sendable () -> Date

    /// - Parameters:
    ///   - label: the logger's label (`logger` in each line).
    ///   - metadataProvider: metadata added to every line (the trace id, when tracing is on).
    ///   - now: the clock of the `time` field.
    ///   - sink: receives each line; ``standardError`` by default.
    public init(
        label: String,
        metadataProvider: Logger.MetadataProvider? = nil,
        now: @escaping @Sendable () -> Date = { Date() },
        sink: @escaping Sink = JSONLogHandler.standardError
    ) {
        self.label = label
        self.metadataProvider = metadataProvider
        self.now = now
        self.sink = sink
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = self.metadata
        if let provided = self.metadataProvider?.get() {
            merged.merge(provided) { $1 }
        }
        if let explicit = event.metadata {
            merged.merge(explicit) { $1 }
        }
        self.sink(Self.line(time: self.now(), level: event.level, message: "\(event.message)", label: self.label, metadata: merged))
    }

    /// One line: the object's canonical bytes and a newline.
    static func line(time: Date, level: Logger.Level, message: String, label: String, metadata: Logger.Metadata) -> [UInt8] {
        let fixed: [(name: String, value: JSONValue)] = [
            ("time", .string(JSONString(RFC3339UTC.format(time)))),
            ("level", .string(JSONString(level.rawValue))),
            ("message", .string(JSONString(message))),
            ("logger", .string(JSONString(label))),
        ]
        let reserved = Set(fixed.map(\.name))
        var members = fixed
        for (key, value) in metadata {
            let name: String
            switch key {
            case "hb.request.id": name = "requestId"
            case _ where reserved.contains(key): name = "metadata.\(key)"
            default: name = key
            }
            members.append((name, Self.json(value)))
        }
        // Names are unique: metadata keys are unique, the renamed ones get a prefix no fixed field
        // has, and `requestId` is taken only from `hb.request.id`. Should both `requestId` and
        // `hb.request.id` be set, the later one is dropped rather than trapping.
        var seen = Set<String>()
        members = members.filter { seen.insert($0.name).inserted }
        var bytes = JSONValue.object(JSONObject(constantMembers: members)).canonicalBytes
        bytes.append(UInt8(ascii: "\n"))
        return bytes
    }

    /// A metadata value as JSON: integers and finite numbers as numbers, the rest as strings,
    /// dictionaries and arrays as objects and arrays.
    static func json(_ value: Logger.Metadata.Value) -> JSONValue {
        switch value {
        case .string(let text):
            return .string(JSONString(text))
        case .stringConvertible(let convertible):
            if let integer = convertible as? any BinaryInteger, let double = Double(exactly: integer) {
                return .number(double)
            }
            if let double = convertible as? Double, double.isFinite {
                return .number(double)
            }
            return .string(JSONString(convertible.description))
        case .dictionary(let dictionary):
            return .object(JSONObject(constantMembers: dictionary.map { ($0.key, Self.json($0.value)) }))
        case .array(let values):
            return .array(values.map(Self.json))
        }
    }

    /// Writes each line to the standard error with one `write` under a lock, so that lines of
    /// concurrent requests never interleave.
    public static let standardError: Sink = { line in
        standardErrorLock.withLock {
            line.withUnsafeBytes { buffer in
                guard let base = buffer.baseAddress else { return }
                var offset = 0
                while offset < buffer.count {
                    let written = write(STDERR_FILENO, base + offset, buffer.count - offset)
                    if written <= 0 {
                        if written < 0 && errno == EINTR { continue }
                        return
                    }
                    offset += written
                }
            }
        }
    }
}

private let standardErrorLock = NIOLock()
