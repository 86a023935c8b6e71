import ArgumentParser
import Foundation
import Kafka
import Logging

/// A Kafka cluster for trying trackpipe (or any Kafka client: kcat, another worker) with
/// nothing installed: it runs in the foreground until SIGINT or SIGTERM.
struct EmbeddedBrokerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "embedded-broker",
        abstract: "Run an in-process Kafka cluster (librdkafka's mock cluster) on loopback until interrupted.",
        discussion: """
            Prints the bootstrap address, then serves until SIGINT or SIGTERM. Data lives in memory only, and each partition keeps only its newest few megabytes: use enough partitions.

            Unlike a real cluster, with librdkafka 2.0.2 (Debian 12's) it creates every topic a client asks about, with 4 partitions, and it cannot be told not to: librdkafka 2.0.2's mock cluster has no setting for it (its test.mock.* properties only set the number of brokers and their latency), and it answers metadata requests in a protocol version too old to carry a client's allow.auto.create.topics=false. A typo in trackpipe run --input-topic therefore goes unnoticed here: the worker reads a new, empty topic. A newer librdkafka's mock cluster (2.16, say) creates no topic on use and answers no CreateTopics: there, create every topic a worker uses with --topic, internal ones (<group>-repartition, <group>-state) included. Compare the names with the topics this cluster holds (kcat -b ADDRESS -L lists them without creating any).

            Consumer groups rebalance slowly here: librdkafka 2.0.2's mock coordinator waits about session.timeout.ms (45 s by default) in every rebalance round, and a cooperative rebalance takes two rounds or more. A second trackpipe run joining a first got its partitions after 133 s (measured); with -X session.timeout.ms=6000 given to every worker, after 16 s. Do that when trying scale-out here, not on a real cluster.

            Example: trackpipe embedded-broker --topic tracking-hits --topic tracking-aggregates --partitions 8
            """)

    @Option(help: "Number of brokers in the cluster.") var brokerCount = 1
    /// The old name of --broker-count, kept hidden to explain the rename: on run and generate,
    /// --brokers takes bootstrap addresses, and a number there would be a confusing mistake.
    @Option(name: .customLong("brokers"), help: .hidden) var renamedBrokers: String?
    @Option(name: .customLong("topic"), help: "A topic to create (repeatable). The defaults include trackpipe-repartition and trackpipe-state, the internal topics of run's default group.")
    var topics: [String] = ["tracking-hits", "tracking-aggregates", "tracking-hits-dlq", "trackpipe-repartition", "trackpipe-state"]
    @Option(help: "Partitions of each topic.") var partitions = 8
    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.") var logLevel: Logger.Level = .warning

    func validate() throws {
        if let renamedBrokers {
            throw ValidationError(
                "embedded-broker --brokers \(renamedBrokers): the number of brokers is now --broker-count (--brokers, on run and generate, takes bootstrap addresses)")
        }
        guard brokerCount >= 1 else { throw ValidationError("--broker-count must be at least 1") }
        guard partitions >= 1 else { throw ValidationError("--partitions must be at least 1") }
    }

    func run() throws {
        LogSetup.bootstrap(level: logLevel, format: .text)
        let broker = try EmbeddedBroker(brokers: brokerCount)
        for topic in topics { try broker.createTopic(topic, partitions: partitions) }
        // Written straight to the descriptor so that a script reading the address gets it at once.
        FileHandle.standardOutput.write(
            Data(
                """
                bootstrap: \(broker.bootstrapServers)
                topics: \(topics.joined(separator: ", ")) (\(partitions) partitions each)
                try: kcat -b \(broker.bootstrapServers) -L
                several workers: give each -X session.timeout.ms=6000 (here every rebalance round waits that long; the default is 45 s)

                """.utf8))
        let signal = ShutdownSignal.wait()
        FileHandle.standardError.write(Data("embedded-broker: \(signal), stopping\n".utf8))
        withExtendedLifetime(broker) {}
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}
