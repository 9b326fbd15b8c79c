// swift-tools-version:6.2
//
// An integrator's own Hummingbird application with FormAttest's routes mounted in it
// (FormAttestServer's FormAttestService). Depends on the FormAttest package by path, as a
// checkout of it beside the integrator's code would; `scripts/test` builds it.

import PackageDescription

let package = Package(
    name: "EmbeddedHummingbird",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(name: "FormAttest", path: "../.."),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
    ],
    targets: [
        .executableTarget(
            name: "EmbeddedHummingbird",
            dependencies: [
                .product(name: "AppAttest", package: "FormAttest"),
                .product(name: "FormAttestServer", package: "FormAttest"),
                .product(name: "FormAttestTokens", package: "FormAttest"),
                .product(name: "SQLiteAttestStore", package: "FormAttest"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
            ]
        )
    ]
)
