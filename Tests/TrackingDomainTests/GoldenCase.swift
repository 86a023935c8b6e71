import Foundation
import Testing
import TrackingDomain

/// One golden case: `Golden/<topic>/<name>.json` holds the raw message bytes exactly as they
/// would arrive on the topic, `<name>.expected.json` the verdict line `trackpipe normalize`
/// must print for it, and the optional `<name>.kafka-timestamp` the Kafka timestamp (epoch ms).
struct GoldenCase: Sendable, CustomTestStringConvertible {
    let topic: String
    let name: String
    let input: [UInt8]
    let kafkaTimestamp: Int64?
    let expectedLine: String?

    var testDescription: String { "\(topic)/\(name)" }
    var relativePath: String { "\(topic)/\(name)" }

    static let goldenDirectory: URL = Bundle.module.resourceURL!.appendingPathComponent("Golden")

    /// The source-tree copy, written when regenerating with `TRACKPIPE_UPDATE_GOLDEN=1`.
    static let sourceGoldenDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Golden")

    static let all: [GoldenCase] = load()

    private static func load() -> [GoldenCase] {
        let fm = FileManager.default
        var cases: [GoldenCase] = []
        let topics = (try? fm.contentsOfDirectory(atPath: goldenDirectory.path)) ?? []
        for topic in topics.sorted() {
            let dir = goldenDirectory.appendingPathComponent(topic)
            var isDir: ObjCBool = false
            guard fm.fileExists(atPath: dir.path, isDirectory: &isDir), isDir.boolValue else { continue }
            let files = (try? fm.contentsOfDirectory(atPath: dir.path)) ?? []
            for file in files.sorted() where file.hasSuffix(".json") && !file.hasSuffix(".expected.json") {
                let name = String(file.dropLast(".json".count))
                let input = (try? Data(contentsOf: dir.appendingPathComponent(file))).map { [UInt8]($0) } ?? []
                let kafka = (try? String(contentsOf: dir.appendingPathComponent(name + ".kafka-timestamp"), encoding: .utf8))
                    .flatMap { Int64($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
                let expected = (try? String(contentsOf: dir.appendingPathComponent(name + ".expected.json"), encoding: .utf8))
                    .map { $0.hasSuffix("\n") ? String($0.dropLast()) : $0 }
                cases.append(GoldenCase(topic: topic, name: name, input: input, kafkaTimestamp: kafka, expectedLine: expected))
            }
        }
        return cases
    }

    /// The expected verdict line as a JSON object (for schema checks).
    var expectedObject: [String: Any]? {
        guard let line = expectedLine, let data = line.data(using: .utf8) else { return nil }
        return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
    }
}

extension Verdict {
    /// The line `trackpipe normalize` prints for this verdict, without the newline, written as
    /// the command writes it.
    var jsonLine: String {
        var writer = JSONWriter()
        writeJSONLine(into: &writer)
        return writer.string
    }
}
