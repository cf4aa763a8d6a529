// swift-tools-version:6.0
import PackageDescription

/// Herald's package graph.
///
/// - `HeraldCore` owns the model, configuration, protocols and the dispatcher; it imports no C.
/// - Each C library sits behind one system-library target (`C*`) with typed shims, imported by
///   as few Swift modules as possible; no C type appears in a public API.
/// - Transport adapters live under `Plugins/<Name>/`, depend on the core (and, where they need
///   crypto or TLS, on `HeraldCrypto`), never on each other, the store or the daemon.
///
/// Herald builds on Linux only (Glibc, epoll, /proc), and `HeraldCore` stops a build elsewhere
/// with an error that says so. The exception is `HeraldClient`, the app-side library (Foundation
/// only, no other Herald module), which also builds for iOS 16 and macOS 13: the platforms below
/// are its minimums.
let package = Package(
    name: "Herald",
    platforms: [.iOS(.v16), .macOS(.v13)],
    products: [
        .executable(name: "herald", targets: ["herald"]),
        .executable(name: "herald-bench", targets: ["herald-bench"]),
        .library(name: "HeraldCore", targets: ["HeraldCore"]),
        .library(name: "HeraldTestKit", targets: ["HeraldTestKit"]),
        .library(name: "HeraldClient", targets: ["HeraldClient"]),
    ],
    targets: [
        // MARK: C libraries (system-library targets with typed shims)
        .systemLibrary(name: "CSQLite", path: "Sources/CSQLite", pkgConfig: "sqlite3",
                       providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "COpenSSL", path: "Sources/COpenSSL", pkgConfig: "openssl",
                       providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CCurl", path: "Sources/CCurl", pkgConfig: "libcurl",
                       providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", path: "Sources/CMicroHTTPD", pkgConfig: "libmicrohttpd",
                       providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(name: "CNGHTTP2", path: "Sources/CNGHTTP2", pkgConfig: "libnghttp2",
                       providers: [.apt(["libnghttp2-dev"])]),
        .systemLibrary(name: "CPostgres", path: "Sources/CPostgres", pkgConfig: "libpq",
                       providers: [.apt(["libpq-dev"])]),
        // epoll and eventfd (Glibc's module does not export them): no library to link.
        .systemLibrary(name: "CLinux", path: "Sources/CLinux"),

        // MARK: Core, store, crypto
        .target(name: "HeraldCore", path: "Sources/HeraldCore"),
        .target(name: "HeraldSQLite", dependencies: ["HeraldCore", "CSQLite"], path: "Sources/HeraldSQLite"),
        .target(name: "HeraldPostgres", dependencies: ["HeraldCore", "CPostgres", "CLinux"], path: "Sources/HeraldPostgres"),
        .target(name: "HeraldCrypto", dependencies: ["HeraldCore", "COpenSSL"], path: "Sources/HeraldCrypto"),
        .target(name: "APNsBinaryProtocol", path: "Sources/APNsBinaryProtocol"),
        .target(name: "HeraldHTTP2", dependencies: ["HeraldCore", "HeraldCrypto", "CNGHTTP2", "CCurl", "CLinux"], path: "Sources/HeraldHTTP2"),
        // Delivery events out (issue 38): the `webhooks` and `events` sections, signing, the webhook senders.
        .target(name: "HeraldEvents", dependencies: ["HeraldCore", "HeraldCrypto", "HeraldHTTP2"], path: "Sources/HeraldEvents"),

        // MARK: APNs simulators and the daemon
        .target(name: "HeraldSimulator", dependencies: ["HeraldCore", "HeraldAPNs", "HeraldCrypto", "APNsBinaryProtocol", "CNGHTTP2"],
                path: "Sources/HeraldSimulator"),
        .target(name: "HeraldServer", dependencies: ["HeraldCore", "HeraldCrypto", "HeraldEvents", "CMicroHTTPD", "CLinux"],
                path: "Sources/HeraldServer"),
        .target(name: "HeraldMatrix", dependencies: ["HeraldCore", "HeraldAPNs", "HeraldServer"], path: "Sources/HeraldMatrix"),
        .target(name: "HeraldGorush", dependencies: ["HeraldCore", "HeraldServer"], path: "Sources/HeraldGorush"),

        // MARK: Transport plugins
        .target(name: "HeraldAPNs", dependencies: ["HeraldCore", "HeraldCrypto"], path: "Plugins/APNsShared"),
        .target(name: "HeraldLogTransport", dependencies: ["HeraldCore", "HeraldAPNs"], path: "Plugins/LogTransport"),
        .target(name: "HeraldLocalTransport", dependencies: ["HeraldCore"], path: "Plugins/Local"),
        .target(name: "HeraldAPNsHTTP2", dependencies: ["HeraldCore", "HeraldAPNs", "HeraldCrypto", "HeraldHTTP2"], path: "Plugins/APNsHTTP2"),
        .target(name: "HeraldWebPush", dependencies: ["HeraldCore", "HeraldCrypto", "HeraldHTTP2"], path: "Plugins/WebPush"),
        .target(name: "HeraldFCM", dependencies: ["HeraldCore", "HeraldCrypto", "HeraldHTTP2"], path: "Plugins/FCM"),
        .target(name: "HeraldAPNsBinary", dependencies: ["HeraldCore", "HeraldAPNs", "HeraldCrypto", "APNsBinaryProtocol"], path: "Plugins/APNsBinary"),
        // China's Android vendors: what they share (form posts, access tokens, quota days, batch answers), then one plugin each.
        .target(name: "HeraldChinaPush", dependencies: ["HeraldCore", "HeraldHTTP2"], path: "Plugins/ChinaPush"),
        .target(name: "HeraldHMS", dependencies: ["HeraldCore", "HeraldChinaPush", "HeraldHTTP2"], path: "Plugins/HMS"),
        .target(name: "HeraldXiaomi", dependencies: ["HeraldCore", "HeraldChinaPush", "HeraldHTTP2"], path: "Plugins/Xiaomi"),
        .target(name: "HeraldOPPO", dependencies: ["HeraldCore", "HeraldChinaPush", "HeraldCrypto", "HeraldHTTP2"], path: "Plugins/OPPO"),
        .target(name: "HeraldVivo", dependencies: ["HeraldCore", "HeraldChinaPush", "HeraldCrypto", "HeraldHTTP2"], path: "Plugins/Vivo"),

        // MARK: CLI and executable
        .target(name: "HeraldCLI",
                dependencies: ["HeraldCore", "HeraldAPNs", "HeraldMatrix", "HeraldGorush", "HeraldSQLite", "HeraldCrypto", "HeraldServer", "HeraldEvents", "HeraldSimulator", "APNsBinaryProtocol"],
                path: "Sources/HeraldCLI"),
        .executableTarget(name: "herald",
                          dependencies: ["HeraldCLI", "HeraldCore", "HeraldServer", "HeraldEvents", "HeraldMatrix", "HeraldSQLite", "HeraldPostgres", "HeraldLogTransport", "HeraldLocalTransport", "HeraldAPNsHTTP2",
                                         "HeraldAPNsBinary", "HeraldWebPush", "HeraldFCM", "HeraldGorush",
                                         "HeraldHMS", "HeraldXiaomi", "HeraldOPPO", "HeraldVivo"],
                          path: "Sources/herald"),

        // MARK: Benchmarks and load clients (`herald-bench`, not part of `herald`)
        .target(name: "HeraldBench",
                dependencies: ["HeraldCLI", "HeraldCore", "HeraldAPNs", "HeraldCrypto", "HeraldServer", "HeraldTestKit", "APNsBinaryProtocol", "CLinux",
                               "HeraldLogTransport", "HeraldLocalTransport", "HeraldAPNsHTTP2", "HeraldAPNsBinary", "HeraldWebPush", "HeraldFCM",
                               "HeraldChinaPush", "HeraldHMS", "HeraldXiaomi", "HeraldOPPO", "HeraldVivo"],
                path: "Sources/HeraldBench"),
        .executableTarget(name: "herald-bench", dependencies: ["HeraldBench"], path: "Sources/herald-bench"),

        // MARK: The app side (iOS, macOS, Linux): Foundation only, no Herald module
        .target(name: "HeraldClient", path: "Sources/HeraldClient"),

        // MARK: Test kit (doubles and in-process servers for tests)
        .target(name: "HeraldTestKit", dependencies: ["HeraldCore", "HeraldAPNs", "HeraldSimulator", "APNsBinaryProtocol", "HeraldServer", "HeraldEvents"],
                path: "Sources/HeraldTestKit"),

        // MARK: Tests (mirror the modules)
        .testTarget(name: "HeraldCoreTests", dependencies: ["HeraldAPNs", "HeraldCore", "HeraldSQLite", "HeraldLogTransport", "HeraldLocalTransport", "HeraldTestKit"],
                    path: "Tests/HeraldCoreTests"),
        .testTarget(name: "HeraldAPNsTests", dependencies: ["HeraldAPNs", "HeraldCore", "HeraldTestKit"], path: "Tests/HeraldAPNsTests"),
        .testTarget(name: "HeraldMatrixTests", dependencies: ["HeraldMatrix", "HeraldAPNs", "HeraldCore", "HeraldLogTransport", "HeraldTestKit"], path: "Tests/HeraldMatrixTests"),
        .testTarget(name: "HeraldGorushTests", dependencies: ["HeraldGorush", "HeraldCore"], path: "Tests/HeraldGorushTests"),
        .testTarget(name: "HeraldSQLiteTests", dependencies: ["HeraldAPNs", "HeraldSQLite", "HeraldCore", "HeraldLogTransport", "HeraldTestKit"],
                    path: "Tests/HeraldSQLiteTests"),
        .testTarget(name: "HeraldPostgresTests", dependencies: ["HeraldAPNs", "HeraldPostgres", "HeraldSQLite", "HeraldCore", "HeraldLogTransport", "HeraldTestKit"],
                    path: "Tests/HeraldPostgresTests"),
        .testTarget(name: "StorageContractTests", dependencies: ["HeraldAPNs", "HeraldSQLite", "HeraldPostgres", "HeraldCore", "HeraldLogTransport", "HeraldTestKit"],
                    path: "Tests/StorageContractTests"),
        .testTarget(name: "HeraldCryptoTests", dependencies: ["HeraldAPNs", "HeraldCrypto", "HeraldTestKit"],
                    path: "Tests/HeraldCryptoTests"),
        .testTarget(name: "LogTransportTests", dependencies: ["HeraldAPNs", "HeraldLogTransport", "HeraldCore", "HeraldTestKit"],
                    path: "Tests/LogTransportTests"),
        .testTarget(name: "HeraldCLITests", dependencies: ["HeraldAPNs", "HeraldMatrix", "herald", "HeraldCLI", "HeraldCrypto", "HeraldServer", "HeraldTestKit", "HeraldSimulator"],
                    path: "Tests/HeraldCLITests"),
        .testTarget(name: "HeraldBenchTests", dependencies: ["HeraldBench", "HeraldCore", "HeraldServer", "HeraldTestKit", "herald", "herald-bench"],
                    path: "Tests/HeraldBenchTests"),
        .testTarget(name: "HeraldSimulatorTests", dependencies: ["HeraldAPNs", "HeraldSimulator", "HeraldCrypto", "HeraldTestKit"],
                    path: "Tests/HeraldSimulatorTests"),
        .testTarget(name: "HeraldServerTests", dependencies: ["HeraldAPNs", "HeraldMatrix", "HeraldServer", "HeraldEvents", "HeraldSQLite", "HeraldPostgres", "HeraldCore", "HeraldSimulator", "HeraldTestKit",
                                                           "HeraldAPNsHTTP2", "HeraldAPNsBinary", "HeraldLocalTransport", "HeraldCrypto", "HeraldWebPush", "HeraldFCM", "HeraldGorush",
                                                           "HeraldHMS", "HeraldXiaomi"],
                    path: "Tests/HeraldServerTests"),
        .testTarget(name: "APNsHTTP2Tests", dependencies: ["HeraldAPNsHTTP2", "HeraldHTTP2", "HeraldCore", "HeraldCrypto", "HeraldSQLite",
                                                        "HeraldSimulator", "HeraldTestKit"],
                    path: "Tests/APNsHTTP2Tests"),
        .testTarget(name: "HeraldHTTP2Tests", dependencies: ["HeraldHTTP2", "HeraldCore", "HeraldCrypto", "HeraldSimulator", "HeraldTestKit", "CCurl"],
                    path: "Tests/HeraldHTTP2Tests"),
        .testTarget(name: "HeraldWebPushTests", dependencies: ["HeraldWebPush", "HeraldCore", "HeraldCrypto", "HeraldHTTP2", "HeraldSimulator", "HeraldTestKit"],
                    path: "Tests/HeraldWebPushTests"),
        .testTarget(name: "APNsBinaryProtocolTests", dependencies: ["HeraldAPNs", "APNsBinaryProtocol", "HeraldTestKit"],
                    path: "Tests/APNsBinaryProtocolTests"),
        .testTarget(name: "APNsBinaryTests", dependencies: ["HeraldAPNs", "HeraldAPNsBinary", "APNsBinaryProtocol", "HeraldCore", "HeraldCrypto",
                                                         "HeraldSQLite", "HeraldSimulator", "HeraldTestKit"],
                    path: "Tests/APNsBinaryTests"),
        .testTarget(name: "HeraldFCMTests", dependencies: ["HeraldFCM", "HeraldCore", "HeraldCrypto", "HeraldHTTP2", "HeraldSimulator", "HeraldTestKit"],
                    path: "Tests/HeraldFCMTests"),
        .testTarget(name: "HeraldChinaPushTests", dependencies: ["HeraldChinaPush", "HeraldHMS", "HeraldXiaomi", "HeraldOPPO", "HeraldVivo", "HeraldCore", "HeraldCrypto", "HeraldHTTP2",
                                                              "HeraldSimulator", "HeraldTestKit"],
                    path: "Tests/HeraldChinaPushTests"),
        .testTarget(name: "HeraldEventsTests", dependencies: ["HeraldEvents", "HeraldCore", "HeraldCrypto", "HeraldSQLite", "HeraldServer", "HeraldLogTransport", "HeraldTestKit"],
                    path: "Tests/HeraldEventsTests"),
        .testTarget(name: "HeraldClientTests", dependencies: ["HeraldClient", "HeraldServer", "HeraldSQLite", "HeraldCore", "HeraldCrypto",
                                                           "HeraldLocalTransport", "HeraldTestKit"],
                    path: "Tests/HeraldClientTests"),
    ]
)
