import ArgumentParser
import Kafka

/// Bug reports need both versions: trackpipe's own and the librdkafka it actually loaded.
struct VersionCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "version", abstract: "Print the trackpipe and librdkafka versions.")

    /// Also what `trackpipe --version` prints, so that either spelling gives a bug report both.
    static var text: String {
        "trackpipe \(TrackpipeVersion.current)\nlibrdkafka \(Librdkafka.version)"
    }

    func run() {
        print(Self.text)
    }
}

public enum TrackpipeVersion {
    public static let current = "0.1.0"
}
