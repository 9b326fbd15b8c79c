// swift-tools-version:6.2
//
// FormAttest: server-side Apple App Attest for signed forms.
// Layout: pure libraries (no IO; time and randomness injected) under adapters (stores, HTTP, CLI).

import PackageDescription

// Settings shared by every target.
// - ExistentialAny (SE-0335): spell out `any` for existentials.
// - MemberImportVisibility (SE-0444): a member is visible only where its module is imported.
// - InternalImportsByDefault (SE-0409): imports are internal unless marked `public import`.
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

// The pure verification libraries additionally surface every `unsafe` construct (SE-0458).
let pureLibrarySettings: [SwiftSetting] = swiftSettings + [.strictMemorySafety()]

let package = Package(
    name: "FormAttest",
    platforms: [.macOS(.v14), .iOS(.v17)],
    products: [
        .library(name: "AppAttest", targets: ["AppAttest"]),
        .library(name: "WebAuthn", targets: ["WebAuthn"]),
        .library(name: "TransparencyLog", targets: ["TransparencyLog"]),
        .library(name: "TransparencyLogFiles", targets: ["TransparencyLogFiles"]),
        .library(name: "CanonicalJSON", targets: ["CanonicalJSON"]),
        .library(name: "RFC3339", targets: ["RFC3339"]),
        .library(name: "FormAttestForm", targets: ["FormAttestForm"]),
        .library(name: "FormAttestClient", targets: ["FormAttestClient"]),
        .library(name: "FormAttestFlows", targets: ["FormAttestFlows"]),
        .library(name: "SQLiteAttestStore", targets: ["SQLiteAttestStore"]),
        .library(name: "MongoAttestStore", targets: ["MongoAttestStore"]),
        .library(name: "FormAttestTokens", targets: ["FormAttestTokens"]),
        .library(name: "FormAttestEvidence", targets: ["FormAttestEvidence"]),
        .library(name: "AppAttestSimulator", targets: ["AppAttestSimulator"]),
        .library(name: "AppleReceiptExchange", targets: ["AppleReceiptExchange"]),
        .library(name: "AppAttestInspector", targets: ["AppAttestInspector"]),
        .library(name: "FormAttestResponses", targets: ["FormAttestResponses"]),
        .library(name: "FormAttestServer", targets: ["FormAttestServer"]),
        .executable(name: "formattest", targets: ["formattest"]),
        .executable(name: "formattest-dev", targets: ["formattest-dev"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        // serve's settings: flags, environment variables and a JSON file through one provider chain.
        .package(url: "https://github.com/apple/swift-configuration.git", from: "1.4.0"),
        // NIOHTTPTypes: the request parts the body deadline's channel handler sees (Hummingbird's own pipeline types).
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.34.1"),
        // Traces: the span API (FormAttestServer) and the OTLP exporter (serve, when enabled). OTLP/HTTP
        // only: the OTLPHTTP trait alone keeps gRPC out of the build.
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0", traits: ["OTLPHTTP"]),
        // `swift package generate-documentation --target X`: the DocC catalogs (Sources/*/Documentation.docc).
        // A command plugin only; it adds no code to the products.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // The one strict RFC 3339 UTC reader (and writer) for every untrusted time. Pure.
        .target(
            name: "RFC3339",
            swiftSettings: pureLibrarySettings
        ),
        // Strict RFC 8949 decoding (byte ranges kept) and deterministic encoding. Pure, no dependencies.
        .target(
            name: "CBOR",
            swiftSettings: pureLibrarySettings
        ),
        // The verifier: authenticator data, attestation and assertion rules. Pure.
        .target(
            name: "AppAttest",
            dependencies: [
                "CBOR",
                "RFC3339",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: pureLibrarySettings
        ),
        // The passkey verifier: W3C WebAuthn Level 3 registration and authentication, attestation
        // formats none, packed, fido-u2f and apple. Pure, beside AppAttest.
        .target(
            name: "WebAuthn",
            dependencies: [
                "CBOR",
                "CanonicalJSON",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: pureLibrarySettings
        ),
        // The evidence log's Merkle tree (RFC 9162 §2.1): hashes, proofs, C2SP checkpoints and
        // signed notes. Pure.
        .target(
            name: "TransparencyLog",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto")
            ],
            swiftSettings: pureLibrarySettings
        ),
        // The evidence log on disk: tlog-tiles in a directory, crash-safe appends. An adapter.
        .target(
            name: "TransparencyLogFiles",
            dependencies: [
                "TransparencyLog",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // The inspector: semantic, forensic and lossless views of attestations, assertions and receipts. Pure.
        .target(
            name: "AppAttestInspector",
            dependencies: [
                "CBOR",
                "RFC3339",
                "AppAttest",
                "CanonicalJSON",
                "FormAttestForm",
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: pureLibrarySettings
        ),
        // RFC 8785 JSON Canonicalization: its own strict parser, no JSONSerialization. Pure.
        .target(
            name: "CanonicalJSON",
            swiftSettings: pureLibrarySettings
        ),
        // The signed form, shared by the app and the server: form -> RFC 8785 bytes -> clientDataHash,
        // the form policy, client data, base64url. Pure.
        .target(
            name: "FormAttestForm",
            dependencies: [
                "CanonicalJSON",
                "RFC3339",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: pureLibrarySettings
        ),
        // The app's side only: the App Attest client over DeviceCheck and the key pool.
        .target(
            name: "FormAttestClient",
            dependencies: [
                "FormAttestForm",
                "RFC3339",
            ],
            swiftSettings: swiftSettings
        ),
        // The flows (local challenge, server challenge, assertion, pooled keys) and the store protocol.
        .target(
            name: "FormAttestFlows",
            dependencies: [
                "RFC3339",
                "AppAttest",
                "CanonicalJSON",
                "FormAttestForm",
                "WebAuthn",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // The embedded default store: SQLite through GRDB (needs the system's libsqlite3).
        .target(
            name: "SQLiteAttestStore",
            dependencies: [
                "AppAttest",
                "FormAttestFlows",
                .product(name: "GRDB", package: "GRDB.swift"),
                // SQLite's C API, for reading keys in place (KeyRows).
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                // The housekeeping's timings (debug level): checkpoints, slow transactions.
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // libmongoc from the system (Debian: libmongoc-dev), imported only by MongoAttestStore.
        .systemLibrary(
            name: "CLibMongoC",
            pkgConfig: "libmongoc-1.0",
            providers: [.apt(["libmongoc-dev"]), .brew(["mongo-c-driver"])]
        ),
        // The shared store for many verifier instances: MongoDB through libmongoc.
        .target(
            name: "MongoAttestStore",
            dependencies: [
                "AppAttest",
                "CLibMongoC",
                "FormAttestFlows",
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            resources: [.copy("schemas")],
            swiftSettings: swiftSettings
        ),
        // The formatter: FIDO2 wrapper, server-signed JWS (jwt-kit), test-only packed-like.
        .target(
            name: "FormAttestTokens",
            dependencies: [
                "CBOR",
                "RFC3339",
                "AppAttest",
                "CanonicalJSON",
                "FormAttestForm",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: swiftSettings
        ),
        // Evidence records: each accepted form with the device's signatures and the key's
        // attestation, signed by the server, re-verifiable offline years later. No IO.
        .target(
            name: "FormAttestEvidence",
            dependencies: [
                "RFC3339",
                "AppAttest",
                "CanonicalJSON",
                "FormAttestForm",
                "FormAttestTokens",
                "TransparencyLog",
                "WebAuthn",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: swiftSettings
        ),
        // The typed answers of the HTTP API and the CLI's `--json` (Encodable, serialized with
        // RFC 8785), each named after its schema in schemas/openapi.yaml. No IO.
        .target(
            name: "FormAttestResponses",
            dependencies: [
                "RFC3339",
                "AppAttest",
                "CanonicalJSON",
                "FormAttestForm",
                "FormAttestFlows",
                "WebAuthn",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
            ],
            swiftSettings: swiftSettings
        ),
        // The HTTP service (Hummingbird 2): routes, error mapping, metrics, the demo page's files.
        .target(
            name: "FormAttestServer",
            dependencies: [
                "TransparencyLog",
                "TransparencyLogFiles",
                "RFC3339",
                "AppAttest",
                "AppAttestInspector",
                "CanonicalJSON",
                "FormAttestForm",
                "FormAttestFlows",
                "FormAttestTokens",
                "FormAttestEvidence",
                "FormAttestResponses",
                "WebAuthn",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            swiftSettings: swiftSettings
        ),
        // The simulator as the service's development device (`POST /api/dev/simulate`): wired in by
        // the executable only, so that the HTTP module never links a CA that mints attestations.
        .target(
            name: "FormAttestDevSimulator",
            dependencies: [
                "AppAttest",
                "AppAttestSimulator",
                "CanonicalJSON",
                "FormAttestClient",
                "FormAttestForm",
                "FormAttestServer",
                .product(name: "X509", package: "swift-certificates"),
            ],
            swiftSettings: swiftSettings
        ),
        // The adapter to Apple's receipt exchange (risk metric): AsyncHTTPClient + an ES256 JWT.
        .target(
            name: "AppleReceiptExchange",
            dependencies: [
                "AppAttest",
                "FormAttestFlows",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // A software device that plays Apple's part, for tests, the demo and benchmarks.
        .target(
            name: "AppAttestSimulator",
            dependencies: [
                "CBOR",
                "RFC3339",
                "AppAttest",
                "CanonicalJSON",
                "FormAttestClient",
                "FormAttestForm",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: swiftSettings
        ),
        // The product's commands (flag parsing, files, exit codes) over the libraries, shared by
        // the two executables. Never the simulator.
        .target(
            name: "FormattestCommands",
            dependencies: [
                "TransparencyLog",
                "TransparencyLogFiles",
                "RFC3339",
                "AppAttest",
                "WebAuthn",
                "AppAttestInspector",
                "AppleReceiptExchange",
                "CanonicalJSON",
                "FormAttestForm",
                "FormAttestFlows",
                "FormAttestTokens",
                "FormAttestEvidence",
                "FormAttestServer",
                "FormAttestResponses",
                "MongoAttestStore",
                "SQLiteAttestStore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "OTel", package: "swift-otel"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "X509", package: "swift-certificates"),
            ],
            swiftSettings: swiftSettings
        ),
        // The product's executable: `main` over FormattestCommands. It contains no simulator.
        .executableTarget(
            name: "formattest",
            dependencies: ["FormattestCommands"],
            swiftSettings: swiftSettings
        ),
        // The developer tools: bench, simulate (prepare-load), pool, serve --dev-simulator.
        .executableTarget(
            name: "formattest-dev",
            dependencies: [
                "FormattestCommands",
                "WebAuthn",
                "FormAttestDevSimulator",
                "RFC3339",
                "AppAttest",
                "AppAttestSimulator",
                "CanonicalJSON",
                "FormAttestClient",
                "FormAttestForm",
                "FormAttestFlows",
                "FormAttestTokens",
                "FormAttestEvidence",
                "FormAttestServer",
                // `simulate backlog`: each store's bulk path (insertBacklog).
                "SQLiteAttestStore",
                "MongoAttestStore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "X509", package: "swift-certificates"),
                // `load`: benchmarks/http/run.sh's generator.
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // Shared by the test targets: loads the real Apple recordings in Tests/Fixtures.
        .target(
            name: "FormAttestTestSupport",
            dependencies: [
                "AppAttest", "FormAttestForm", "CBOR", "WebAuthn", "TransparencyLog",
                .product(name: "Crypto", package: "swift-crypto"), .product(name: "_CryptoExtras", package: "swift-crypto"),
            ],
            path: "Tests/FormAttestTestSupport",
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "AppAttestTests",
            dependencies: [
                "AppAttest",
                "CBOR",
                "AppAttestSimulator",
                "FormAttestTestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "TransparencyLogTests",
            dependencies: [
                "TransparencyLog",
                "TransparencyLogFiles",
                "FormAttestTestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "WebAuthnTests",
            dependencies: [
                "WebAuthn",
                "CBOR",
                "FormAttestTestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "FormAttestFormTests",
            dependencies: ["FormAttestForm", "CanonicalJSON", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "TransparencyLogFilesTests",
            dependencies: ["TransparencyLog", "TransparencyLogFiles", "FormAttestTestSupport", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "FormAttestResponsesTests",
            dependencies: [
                "FormAttestResponses", "AppAttest", "AppAttestSimulator", "CanonicalJSON", "FormAttestFlows", "FormAttestForm",
                "FormAttestTestSupport", .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CBORTests",
            dependencies: ["CBOR", "FormAttestTestSupport"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "AppAttestInspectorTests",
            dependencies: ["AppAttestInspector", "AppAttest", "AppAttestSimulator", "CanonicalJSON", "FormAttestTestSupport"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "RFC3339Tests",
            dependencies: ["RFC3339"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "CanonicalJSONTests",
            dependencies: [
                "CanonicalJSON",
                "FormAttestTestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "FormAttestClientTests",
            dependencies: [
                "FormAttestClient", "FormAttestForm", "CanonicalJSON", "AppAttest", "AppAttestSimulator",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // The contract every store passes (memory, SQLite, MongoDB), shared by their test targets.
        .target(
            name: "AttestationStoreContract",
            dependencies: ["AppAttest", "FormAttestFlows"],
            path: "Tests/StoreContract",
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "FormAttestFlowsTests",
            dependencies: [
                "FormAttestFlows", "SQLiteAttestStore", "AttestationStoreContract", "AppAttest", "AppAttestSimulator",
                "FormAttestForm", "CanonicalJSON", "WebAuthn", "FormAttestTestSupport", .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SQLiteAttestStoreTests",
            dependencies: [
                "SQLiteAttestStore", "FormAttestFlows", "AttestationStoreContract", "AppAttest",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "MongoAttestStoreTests",
            dependencies: ["AppAttest", "MongoAttestStore", "FormAttestFlows", "AttestationStoreContract", "FormAttestTestSupport"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "FormAttestTokensTests",
            dependencies: [
                "FormAttestTokens", "AppAttest", "CBOR", "CanonicalJSON", "FormAttestForm", "FormAttestTestSupport",
                .product(name: "Crypto", package: "swift-crypto"), .product(name: "JWTKit", package: "jwt-kit"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "FormAttestEvidenceTests",
            dependencies: [
                "FormAttestEvidence", "FormAttestFlows", "FormAttestTokens", "FormAttestForm", "CanonicalJSON", "AppAttest",
                "AppAttestSimulator", "FormAttestTestSupport", "RFC3339", "TransparencyLog", "WebAuthn",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "FormAttestServerTests",
            dependencies: [
                "FormAttestServer", "FormAttestFlows", "FormAttestTokens", "FormAttestForm", "CanonicalJSON", "AppAttest",
                "AppAttestSimulator", "FormAttestTestSupport", "RFC3339", "FormAttestEvidence", "FormAttestResponses",
                "FormAttestDevSimulator", "WebAuthn", "TransparencyLog", "SQLiteAttestStore",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            swiftSettings: swiftSettings
        ),
        // A local stand-in for Apple's receipt exchange endpoint (the HTTP boundary), for tests.
        .target(
            name: "ReceiptExchangeFake",
            dependencies: [
                "AppAttest", "AppAttestSimulator",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Tests/ReceiptExchangeFake",
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "AppleReceiptExchangeTests",
            dependencies: [
                "AppleReceiptExchange", "ReceiptExchangeFake", "AppAttest", "AppAttestSimulator", "FormAttestFlows",
                "FormAttestForm",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "FormattestCommandsTests",
            dependencies: [
                "FormattestCommands", "FormAttestFlows", "AppAttest", "FormAttestServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "FormattestCLITests",
            dependencies: [
                "formattest", "formattest-dev", "AppAttest", "AppAttestSimulator", "FormAttestTestSupport", "ReceiptExchangeFake",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // System tests: the built binaries under faults (kill -9, outages, full disk), hostile
        // clients, a real browser on the demo page, and schemathesis over the OpenAPI document.
        .testTarget(
            name: "SystemTests",
            dependencies: ["formattest", "formattest-dev", "FormAttestTestSupport", "FormAttestForm"],
            swiftSettings: swiftSettings
        ),
    ]
)

// libFuzzer targets, each over the package's own modules: the CBOR decoder, authenticator data and
// assertions; the RFC 8785 parser; the parsers that need swift-certificates (the attestation object
// with its certificates, the receipt) and the inspector; and the request pipeline (body bytes,
// strict JSON, form policy, the flows on the memory store with the simulator). Only `scripts/fuzz`
// adds them (FORMATTEST_FUZZ=1), and builds them with -sanitize=fuzzer, which supplies the driver.
if Context.environment["FORMATTEST_FUZZ"] == "1" {
    // The entry point the four targets share (libFuzzer's driver behind SwiftPM's `<module>_main`).
    package.targets.append(
        .target(
            name: "FuzzDriver",
            path: "fuzz/FuzzDriver",
            swiftSettings: swiftSettings
        )
    )
    package.targets.append(
        .executableTarget(
            name: "AppAttestFuzz",
            dependencies: ["AppAttest", "CBOR", "FuzzDriver", "WebAuthn"],
            path: "fuzz/AppAttestFuzz",
            swiftSettings: swiftSettings
        )
    )
    package.targets.append(
        .executableTarget(
            name: "JCSFuzz",
            dependencies: ["CanonicalJSON", "FuzzDriver"],
            path: "fuzz/JCSFuzz",
            swiftSettings: swiftSettings
        )
    )
    package.targets.append(
        .executableTarget(
            name: "FormAttestFuzz",
            dependencies: ["AppAttest", "AppAttestInspector", "FuzzDriver"],
            path: "fuzz/FormAttestFuzz",
            swiftSettings: swiftSettings
        )
    )
    package.targets.append(
        .executableTarget(
            name: "FormAttestRequestFuzz",
            dependencies: ["AppAttest", "AppAttestSimulator", "CanonicalJSON", "FormAttestForm", "FormAttestFlows", "FuzzDriver", "RFC3339"],
            path: "fuzz/RequestFuzz",
            swiftSettings: swiftSettings
        )
    )
}
