import Foundation
import Testing
@testable import TrackpipeCLI

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

    /// The variables each command reads (what an unknown `TRACKPIPE_*` variable is checked
    /// against) are those its `--help` names, plus `TRACKPIPE_X` for `-X`.
    @Test("each command's list of TRACKPIPE_* variables is what its --help names")
    func environmentListsMatchHelp() throws {
        let result = try TrackpipeBinary.locate().run(["--experimental-dump-help"])
        let root = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        let commands = try #require((root["command"] as? [String: Any])?["subcommands"] as? [[String: Any]])
        for (name, listed, unflagged) in [
            ("run", RunCommand.environmentFlags, ["x"]), ("replay", ReplayCommand.environmentFlags, ["x"]),
            ("status", StatusCommand.environmentFlags, ["x", "log-format"]),
        ] {
            let command = try #require(commands.first { $0["commandName"] as? String == name })
            var named: Set<String> = []
            for argument in command["arguments"] as? [[String: Any]] ?? [] {
                guard let abstract = argument["abstract"] as? String,
                    let variable = abstract.firstMatch(of: /\(env (TRACKPIPE_[A-Z_]+)/)?.output.1,
                    let flag = (argument["preferredName"] as? [String: Any])?["name"] as? String
                else { continue }
                #expect(Environment.variableName(forFlag: flag) == String(variable), "\(name) --\(flag) names \(variable)")
                named.insert(flag)
            }
            #expect(Set(listed) == named.union(unflagged), "\(name): listed \(Set(listed).subtracting(named.union(unflagged))), help only \(named.subtracting(listed))")
        }
    }

    /// `--shards` means one thing, said in the same words by run, replay, the flag table of
    /// docs/configuration.md and the glossary.
    @Test("--shards is described the same way in run --help, replay --help, docs/configuration.md and docs/glossary.md")
    func shardsDescribedOnce() throws {
        let text = RunCommand.shardsHelp
        for command in ["run", "replay"] {
            let help = try TrackpipeBinary.locate().run([command, "--help"]).stdout
                .replacingOccurrences(of: #"\s+"#, with: " ", options: .regularExpression)
            #expect(help.contains(text), "\(command) --help")
        }
        for document in ["docs/configuration.md", "docs/glossary.md"] {
            let prose = try String(contentsOf: DocumentationTests.root.appendingPathComponent(document), encoding: .utf8)
            #expect(prose.contains(text), "\(document) does not describe --shards as --help does")
        }
    }

    /// The table of `run`'s flags in docs/configuration.md is what `run --help` offers: the same
    /// flags, each with the variable it reads, and the same defaults where help states one.
    @Test("the flag table for run in docs/configuration.md matches run --help: flags, variables and defaults")
    func configurationFlagTable() throws {
        let result = try TrackpipeBinary.locate().run(["--experimental-dump-help"])
        let root = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        let commands = try #require((root["command"] as? [String: Any])?["subcommands"] as? [[String: Any]])
        let run = try #require(commands.first { $0["commandName"] as? String == "run" })
        var help: [String: String] = [:]  // flag as written in the table -> its abstract
        for argument in run["arguments"] as? [[String: Any]] ?? [] where argument["shouldDisplay"] as? Bool != false {
            guard let preferred = argument["preferredName"] as? [String: Any], let name = preferred["name"] as? String else { continue }
            if name == "help" || name == "version" { continue }
            let flag = preferred["kind"] as? String == "short" ? "-\(name) key=value" : "--\(name)"
            help[flag] = argument["abstract"] as? String ?? ""
        }

        let document = try String(contentsOf: DocumentationTests.root.appendingPathComponent("docs/configuration.md"), encoding: .utf8)
        let section = try #require(document.range(of: "## `trackpipe run`: every flag"))
        var table: [String: (variable: String, defaultValue: String)] = [:]
        for line in document[section.upperBound...].split(separator: "\n").drop(while: { !$0.hasPrefix("|") }).prefix(while: { $0.hasPrefix("|") }) {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count > 4, cells[1].hasPrefix("`-") else { continue }
            table[cells[1].trimmingCharacters(in: CharacterSet(charactersIn: "`"))] = (cells[2], cells[3])
        }
        #expect(Set(table.keys) == Set(help.keys), "only in docs/configuration.md: \(Set(table.keys).subtracting(help.keys)); only in --help: \(Set(help.keys).subtracting(table.keys))")
        for (flag, row) in table {
            guard let abstract = help[flag], flag.hasPrefix("--") else { continue }
            let variable = Environment.variableName(forFlag: String(flag.dropFirst(2)))
            if abstract.contains("(env ") {
                #expect(row.variable.contains("`\(variable)`"), "\(flag): docs/configuration.md names \(row.variable), help \(variable)")
                if let stated = abstract.firstMatch(of: /default ([^)]+)\)/)?.output.1, row.defaultValue.hasPrefix("`") {
                    #expect(row.defaultValue.contains("`\(stated)`"), "\(flag): docs/configuration.md's default \(row.defaultValue), help's \(stated)")
                }
            } else {
                #expect(!row.variable.contains("TRACKPIPE_"), "\(flag): docs/configuration.md names a variable help does not")
            }
        }
    }
}
