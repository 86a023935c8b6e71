import ArgumentParser

/// The `trackpipe` command: one subcommand per thing a user does.
public struct Trackpipe: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "trackpipe",
        abstract: "Normalize mobile-notification tracking hits from Kafka and count them per delivery in event-time windows.",
        version: VersionCommand.text,
        subcommands: [
            VersionCommand.self,
            RunCommand.self,
            ReplayCommand.self,
            GenerateCommand.self,
            DemoCommand.self,
            EmbeddedBrokerCommand.self,
            NormalizeCommand.self,
        ]
    )

    public init() {}
}
