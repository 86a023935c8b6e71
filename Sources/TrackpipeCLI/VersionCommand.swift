import ArgumentParser
import Kafka

/// Bug reports need both versions: trackpipe's own and the librdkafka it actually loaded.
struct VersionCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "version", abstract: "Print the trackpipe and librdkafka versions.")

    func run() {
        print("trackpipe \(TrackpipeVersion.current)")
        print("librdkafka \(Librdkafka.version)")
    }
}

public enum TrackpipeVersion {
    public static let current = "0.1.0"
}
