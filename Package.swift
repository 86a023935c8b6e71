// swift-tools-version:6.1
import PackageDescription

// Layers, bottom up: CRdKafka (the C library) -> Kafka (thin Swift client behind the narrow
// protocols the runner uses, so that the simulator can stand in for it; the embedded broker)
// TrackingDomain (pure: hit shapes, tracking rule, normalized event) -> Windowing (pure: one
// engine value driven by its caller with the clock passed in; no I/O, no thread, queue or lock)
// -> RecordFormats (pure: the bytes of trackpipe's own topics) -> Runner (the stage contract and
// the loop that drives one stage against Kafka) -> Pipeline (the stages and their composition;
// its lanes, on Dispatch, are the one place window work runs in parallel) -> TrackpipeCLI
// (commands) -> trackpipe (executable).
// Beside them: HitGenerator (pure: synthetic hits for tests, `demo` and the bench). Under
// Benchmarks/, and linked by no product: trackpipe-bench (the benchmarks, docs/performance.md)
// and Benchmarking (the processes and measures the benchmarks share). Under Tests/, and linked by no product: TrackpipeTestSupport
// (the reference model), TrackpipeSimulation (the deterministic simulator, which runs Pipeline's
// real runners and stages against a simulated cluster standing in for Kafka's protocols,
// docs/simulation.md) and trackpipe-check (their long runs, the soak and the state benchmark,
// whose outputs the reference model checks).
/// The data path crosses RecordFormats, Runner and Pipeline for every record: their bodies are
/// offered to the modules above for inlining, as when they were one module (without it, one
/// stage cost 1.11x the CPU of the single module in `trackpipe-bench pipeline`).
let crossModule: [SwiftSetting] = [.unsafeFlags(["-cross-module-optimization"], .when(configuration: .release))]

let package = Package(
    name: "trackpipe",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "trackpipe", targets: ["trackpipe"]),
        .executable(name: "trackpipe-bench", targets: ["trackpipe-bench"]),
    ],
    // Exact versions, so that every build (an image build on a fresh machine included) resolves
    // the same code whatever has been released since; Package.resolved is not committed (its
    // pins carry commit ids, which differ between these machines' package mirrors and GitHub).
    // The transitive dependencies of swift-prometheus (swift-atomics, swift-metrics) are pinned
    // here too, as direct dependencies of the target that links Prometheus: SwiftPM applies a
    // root package's requirements to a package wherever it appears in the graph. Updating one
    // is a change to this file: bump the version, build, run the tests.
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", exact: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", exact: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", exact: "2.4.1"),
        .package(url: "https://github.com/apple/swift-metrics.git", exact: "2.13.0"),
        .package(url: "https://github.com/apple/swift-atomics.git", exact: "1.3.0"),
        // Test-only: the deploy-file tests read the compose file and the Kubernetes manifests.
        .package(url: "https://github.com/jpsim/Yams.git", exact: "5.0.1"),
    ],
    targets: [
        .systemLibrary(
            name: "CRdKafka",
            pkgConfig: "rdkafka",
            providers: [.apt(["librdkafka-dev"])]
        ),
        .target(
            name: "Kafka",
            dependencies: ["CRdKafka", .product(name: "Logging", package: "swift-log")]
        ),
        .target(name: "TrackingDomain"),
        .target(name: "Windowing", dependencies: ["TrackingDomain"]),
        .target(name: "HitGenerator", dependencies: ["TrackingDomain"]),
        // The bytes trackpipe writes to its own topics (repartition, state, commits, dead
        // letters) and the group identity they record: pure, no I/O.
        .target(name: "RecordFormats", dependencies: ["Kafka", "TrackingDomain", "Windowing"], swiftSettings: crossModule),
        // The stage contract and the runner that drives one stage against Kafka through the
        // client seam: assignment, commits, loss, bounds, outputs, the stage's metrics.
        .target(
            name: "Runner",
            dependencies: [
                "Kafka", "TrackingDomain", "Windowing", "RecordFormats",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                // Not imported: swift-prometheus's own dependencies, named so that their exact
                // versions above are what Prometheus is built with (they are linked either way).
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Atomics", package: "swift-atomics"),
            ],
            swiftSettings: crossModule
        ),
        // The stages (normalize, window, replay), their composition into a pipeline, and the
        // operations around it (status, health, the metrics endpoint).
        .target(
            name: "Pipeline",
            dependencies: [
                "Kafka", "TrackingDomain", "Windowing", "RecordFormats", "Runner",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        .target(
            name: "TrackpipeCLI",
            dependencies: [
                "Pipeline", "RecordFormats", "Runner", "Kafka", "TrackingDomain", "Windowing", "HitGenerator",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(name: "trackpipe", dependencies: ["TrackpipeCLI"]),
        // What the benchmarks and trackpipe-check's state benchmark share: the broker and workers
        // in processes of their own, their CPU and memory, the builds compared, medians.
        .target(
            name: "Benchmarking",
            dependencies: ["Kafka", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Benchmarks/Benchmarking"
        ),
        .executableTarget(
            name: "trackpipe-bench",
            dependencies: [
                "Kafka", "TrackingDomain", "Windowing", "Pipeline", "RecordFormats", "Runner", "HitGenerator", "Benchmarking",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/trackpipe-bench"
        ),
        .testTarget(name: "KafkaTests", dependencies: ["Kafka", "TrackpipeTestSupport"]),
        .testTarget(
            name: "TrackingDomainTests",
            dependencies: ["TrackingDomain", "HitGenerator"],
            resources: [.copy("Golden")]
        ),
        .testTarget(name: "WindowingTests", dependencies: ["Windowing", "TrackingDomain", "HitGenerator"]),
        // Shared by the end-to-end tests and trackpipe-check: the independent reference model
        // and corpus plumbing.
        // It also holds the embedded broker's fault injection, which only tests use, with the
        // one C call of librdkafka's mock cluster that Swift cannot make itself (CRdKafkaMock).
        .target(
            name: "TrackpipeTestSupport", dependencies: ["HitGenerator", "Kafka", "TrackingDomain", "CRdKafka", "CRdKafkaMock"],
            path: "Tests/TrackpipeTestSupport", exclude: ["CRdKafkaMock"]),
        .systemLibrary(name: "CRdKafkaMock", path: "Tests/TrackpipeTestSupport/CRdKafkaMock"),
        // The deterministic simulators (docs/simulation.md): real stages, and real runners
        // against a simulated cluster, through random schedules, checked against the reference.
        .target(
            name: "TrackpipeSimulation",
            dependencies: ["Pipeline", "RecordFormats", "Runner", "Kafka", "CRdKafka", "Windowing", "TrackingDomain", "HitGenerator", "TrackpipeTestSupport"],
            path: "Tests/TrackpipeSimulation"),
        // The long checks, not part of CI (docs/simulation.md, docs/reliability.md,
        // docs/performance.md): `simulate` and `simulate-runner` run the simulators for as long as
        // asked, `soak` a live stream against the reference model, `state` the state benchmark,
        // whose outputs the reference model checks. A tool, not a product: it links the test modules.
        .executableTarget(
            name: "trackpipe-check",
            dependencies: [
                "Kafka", "HitGenerator", "RecordFormats", "Windowing", "TrackpipeTestSupport", "TrackpipeSimulation", "Benchmarking",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Tests/TrackpipeCheck"),
        .testTarget(name: "RecordFormatsTests", dependencies: ["RecordFormats", "Kafka", "TrackingDomain", "Windowing"]),
        .testTarget(name: "HitGeneratorTests", dependencies: ["HitGenerator", "TrackingDomain"]),
        .testTarget(
            name: "PipelineTests",
            dependencies: [
                "Pipeline", "RecordFormats", "Runner", "Kafka", "TrackingDomain", "Windowing", "HitGenerator", "TrackpipeTestSupport", "TrackpipeSimulation",
            ]),
        .testTarget(
            name: "TrackpipeCLITests",
            dependencies: [
                "TrackpipeCLI", "Pipeline", "RecordFormats", "Runner", "Kafka", "HitGenerator", "TrackpipeTestSupport", "TrackingDomain", "Benchmarking",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Yams", package: "Yams"),
            ]
        ),
        // libFuzzer harnesses for the pure parsers (docs/fuzzing.md). They live under Tests/
        // because the image build copies only Sources/ and Tests/. Built plainly they replay the
        // files given as arguments; scripts/fuzz.sh builds them with -sanitize=fuzzer,address and
        // -D TRACKPIPE_LIBFUZZER, and then their main hands over to libFuzzer (CLibFuzzer).
        .systemLibrary(name: "CLibFuzzer", path: "Tests/Fuzz/CLibFuzzer"),
        .target(name: "FuzzSupport", dependencies: ["CLibFuzzer"], path: "Tests/Fuzz/Support"),
        .executableTarget(name: "fuzz-normalizer", dependencies: ["TrackingDomain", "FuzzSupport"], path: "Tests/Fuzz/Normalizer"),
        .executableTarget(name: "fuzz-rfc3339", dependencies: ["TrackingDomain", "FuzzSupport"], path: "Tests/Fuzz/RFC3339"),
        .executableTarget(name: "fuzz-postback-url", dependencies: ["TrackingDomain", "FuzzSupport"], path: "Tests/Fuzz/PostbackURL"),
    ]
)
