import Foundation
import Kafka
import Testing
import TrackpipeTestSupport

/// What docs/reliability.md, deploy/k8s/README.md and `run --help` say a missing input topic
/// does, checked against the binary: it exits 1 at start-up with the message they quote, and
/// does not wait for the topic. The embedded broker would create the topic on request, so it is
/// told to answer as a real cluster does for a missing one.
@Suite("trackpipe run: a missing input topic")
struct MissingInputTopicCommandTests {
    @Test("exits 1 at once, naming the topic and what to check")
    func exitsWithTheDocumentedMessage() throws {
        let broker = try EmbeddedBroker()
        broker.setTopicError("tracking-hits", code: KafkaErrorCode.unknownTopicOrPartition)
        let result = try TrackpipeBinary.locate().run(["run", "--brokers", broker.bootstrapServers, "--log-level", "error"])
        #expect(result.exitCode == 1, "\(result.stderr)")
        #expect(
            result.stderr.contains(
                "trackpipe run: the input topic tracking-hits does not exist on the cluster: create it (or check --brokers and --input-topic)"),
            "\(result.stderr)")
        // Quoted as printed in the documents that describe it.
        for path in ["docs/reliability.md", "deploy/k8s/README.md"] {
            let text = try String(contentsOf: DocumentationTests.root.appendingPathComponent(path), encoding: .utf8)
                .replacingOccurrences(of: "\n", with: " ").replacingOccurrences(of: #" +"#, with: " ", options: .regularExpression)
            #expect(text.contains("the input topic tracking-hits does not exist on the cluster: create it (or check --brokers and --input-topic)"), "\(path)")
        }
    }
}
