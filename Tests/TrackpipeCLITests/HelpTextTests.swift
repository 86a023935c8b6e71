import Foundation
import Testing

@Suite("--help texts")
struct HelpTextTests {
    /// `run` is exempt until its discussion is rewritten (RunCommand.swift has another owner);
    /// drop it from this list then.
    static let exempt: Set<String> = []

    /// ArgumentParser keeps a newline inside a discussion as a line break, and wraps the text
    /// around it to the terminal: a sentence broken in the source comes out broken mid-line. So
    /// each paragraph is written on one line, and paragraphs are separated by a blank line.
    @Test("abstracts and discussions break lines only between paragraphs")
    func noMidSentenceBreaks() throws {
        let result = try TrackpipeBinary.locate().run(["--experimental-dump-help"])
        #expect(result.exitCode == 0, "\(result.stderr)")
        let root = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        var problems: [String] = []
        var commands = 0
        func check(_ text: Any?, _ place: String) {
            guard let text = text as? String else { return }
            if text.replacingOccurrences(of: "\n\n", with: "").trimmingCharacters(in: .newlines).contains("\n") {
                problems.append("\(place): \(text.prefix(60))…")
            }
        }
        func walk(_ command: [String: Any], _ path: String) {
            commands += 1
            if !Self.exempt.contains(path) {
                check(command["abstract"], "\(path) abstract")
                check(command["discussion"], "\(path) discussion")
                for argument in command["arguments"] as? [[String: Any]] ?? [] {
                    let name = (argument["names"] as? [[String: Any]])?.first?["name"] as? String ?? "argument"
                    check(argument["abstract"], "\(path) \(name)")
                    check(argument["discussion"], "\(path) \(name) discussion")
                }
            }
            for sub in command["subcommands"] as? [[String: Any]] ?? [] {
                walk(sub, "\(path) \(sub["commandName"] as? String ?? "?")")
            }
        }
        walk(try #require(root["command"] as? [String: Any]), "trackpipe")
        #expect(commands >= 7, "the dump lists every subcommand")
        #expect(problems.isEmpty, "\(problems)")
    }
}
