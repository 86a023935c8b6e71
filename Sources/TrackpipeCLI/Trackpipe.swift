import ArgumentParser
import Foundation
import Kafka

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
            StatusCommand.self,
            GenerateCommand.self,
            DemoCommand.self,
            EmbeddedBrokerCommand.self,
            NormalizeCommand.self,
        ]
    )

    public init() {}

    /// ArgumentParser's own `main`, with every message it prints (usage errors, validation
    /// errors, a failure thrown by a command) scrubbed of the secret values found on the command
    /// line and in `TRACKPIPE_X*`. ArgumentParser quotes arguments it cannot place, so a
    /// forgotten `-X` before `sasl.password=…` would otherwise print the password.
    public static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        let redactor = SecretRedactor(
            values: KafkaPropertyArguments.secretValues(arguments: arguments, environment: ProcessInfo.processInfo.environment))
        do {
            var command = try parseAsRoot(arguments)
            try command.run()
        } catch {
            let code = exitCode(for: error)
            let text = redactor.redact(fullMessage(for: error))
            if !text.isEmpty {
                if code == .success {
                    print(text)
                } else {
                    FileHandle.standardError.write(Data((text + "\n").utf8))
                }
            }
            Foundation.exit(code.rawValue)
        }
    }
}
