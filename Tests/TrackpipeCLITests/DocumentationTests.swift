import Foundation
import Pipeline
import Runner
import Testing
import TrackingDomain
@testable import TrackpipeCLI

/// The repository must stand alone: its documents may link only to files it contains, and
/// what they promise (the dead-letter reasons, the input shapes) must match the program.
@Suite("documentation")
struct DocumentationTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().standardizedFileURL

    /// README.md, docs/*.md and schemas/README.md, as paths relative to the repository root.
    static func documents() throws -> [String] {
        let docs = try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("docs").path)
            .filter { $0.hasSuffix(".md") }.sorted().map { "docs/\($0)" }
        return ["README.md"] + docs + ["schemas/README.md"]
    }

    static func read(_ path: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    /// The text outside fenced code blocks, with inline code spans removed: markdown renders
    /// no links there, and `[.frac](Z|±hh:mm)` in a code span is not one.
    static func prose(_ markdown: String) -> String {
        var inFence = false
        var lines: [String] = []
        for line in markdown.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.trimmingCharacters(in: .whitespaces).hasPrefix("```") {
                inFence.toggle()
                continue
            }
            if !inFence { lines.append(String(line)) }
        }
        return lines.joined(separator: "\n").replacingOccurrences(of: "`[^`\n]*`", with: "", options: .regularExpression)
    }

    /// Targets of inline links `[text](target)` and reference definitions `[name]: target`.
    static func linkTargets(_ markdown: String) -> [String] {
        let text = prose(markdown)
        var targets: [String] = []
        for pattern in [#"\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)"#, #"(?m)^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)"#] {
            let regex = try! NSRegularExpression(pattern: pattern)
            for match in regex.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
                if let range = Range(match.range(at: 1), in: text) { targets.append(String(text[range])) }
            }
        }
        return targets
    }

    /// GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens, and
    /// `-1`, `-2`… for repeated headings.
    static func anchors(_ markdown: String) -> Set<String> {
        var seen: [String: Int] = [:]
        var result = Set<String>()
        var inFence = false
        for line in markdown.split(separator: "\n") {
            if line.trimmingCharacters(in: .whitespaces).hasPrefix("```") { inFence.toggle() }
            guard !inFence, line.hasPrefix("#") else { continue }
            let title = line.drop(while: { $0 == "#" }).trimmingCharacters(in: .whitespaces)
            let slug = String(
                title.lowercased().unicodeScalars.filter { $0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == " " || $0 == "-" || $0 == "_" }
                    .map { $0 == " " ? "-" : Character($0) })
            let count = seen[slug, default: 0]
            seen[slug] = count + 1
            result.insert(count == 0 ? slug : "\(slug)-\(count)")
        }
        return result
    }

    /// What is wrong with one link target of the document at `path`, or nil.
    static func problem(target: String, in path: String) throws -> String? {
        let lowered = target.lowercased()
        if lowered.hasPrefix("http://") || lowered.hasPrefix("https://") || lowered.hasPrefix("mailto:") { return nil }
        if target.contains("://") { return "\(target): an unexpected scheme" }
        let parts = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)
        let file = String(parts[0]).removingPercentEncoding ?? String(parts[0])
        let fragment = parts.count > 1 ? String(parts[1]) : nil
        let base = root.appendingPathComponent(path).deletingLastPathComponent()
        let resolved = file.isEmpty ? root.appendingPathComponent(path) : base.appendingPathComponent(file).standardizedFileURL
        guard file.hasPrefix("/") == false, resolved.path == root.path || resolved.path.hasPrefix(root.path + "/") else {
            return "\(target): points outside the repository"
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: resolved.path, isDirectory: &isDirectory) else {
            return "\(target): no such file in the repository"
        }
        if let fragment, !fragment.isEmpty, !isDirectory.boolValue, resolved.pathExtension == "md" {
            let text = try String(contentsOf: resolved, encoding: .utf8)
            guard anchors(text).contains(fragment) else { return "\(target): no heading #\(fragment) there" }
        }
        return nil
    }

    @Test("every relative link in README.md, docs/*.md and schemas/README.md points at a file inside the repository")
    func linksStayInsideTheRepository() throws {
        var checked = 0
        for path in try Self.documents() {
            for target in Self.linkTargets(try Self.read(path)) {
                checked += 1
                if let problem = try Self.problem(target: target, in: path) {
                    Issue.record("\(path): \(problem)")
                }
            }
        }
        #expect(checked > 10, "the link scanner found almost no links: it is broken")
    }

    @Test("the link checker catches links out of the repository, to missing files and to missing headings")
    func linkCheckerCatchesBadLinks() throws {
        let sample = """
            [contract](../shared/spec/tracking-hits.md) [missing](spec/tracking-hits.md)
            [ok](docs/tracking-hits.md#5-aggregates) [bad anchor](docs/tracking-hits.md#6-nothing)
            [web](https://example.com/x) `[code](../elsewhere.md)` [up](../README.md)
            ```
            [fenced](../../etc/passwd)
            ```
            [ref]: ../outside.md
            """
        let targets = Self.linkTargets(sample)
        #expect(
            targets == [
                "../shared/spec/tracking-hits.md", "spec/tracking-hits.md", "docs/tracking-hits.md#5-aggregates",
                "docs/tracking-hits.md#6-nothing", "https://example.com/x", "../README.md", "../outside.md",
            ])
        let problems = try targets.map { try Self.problem(target: $0, in: "README.md") }
        #expect(problems.map { $0 == nil } == [false, false, true, false, true, false, false])
        #expect(Self.anchors("# `trackpipe run`: every flag\n## 5. Aggregates\n## 5. Aggregates") == ["trackpipe-run-every-flag", "5-aggregates", "5-aggregates-1"])
    }

    @Test("every dead-letter reason is listed in docs/output.md, schemas/README.md and the contract")
    func everyDeadLetterReasonIsDocumented() throws {
        let reasons = RejectReason.allCases.map(\.rawValue)
        for path in ["docs/output.md", "schemas/README.md", "docs/tracking-hits.md"] {
            let text = try Self.read(path)
            for reason in reasons {
                #expect(text.contains("`\(reason)`"), "\(path) does not list \(reason)")
            }
        }
    }

    @Test("each example of the contract's shapes A–G normalizes to the shape it illustrates")
    func contractExamplesAreRead() throws {
        let expected: [Character: HitShape] = [
            "A": .sdkContextData, "B": .trackActionEnvelope, "C": .iosPush, "D": .androidPush, "E": .androidLocal,
            "F": .iosLocal, "G": .postbackURL,
        ]
        var heading: Character?
        var seen: [Character] = []
        var lines = try Self.read("docs/tracking-hits.md").split(separator: "\n", omittingEmptySubsequences: false)[...]
        while let line = lines.popFirst() {
            if line.hasPrefix("### "), let letter = line.dropFirst(4).first, line.dropFirst(5).hasPrefix(".") {
                heading = letter
            } else if line == "```json", let letter = heading, let example = lines.popFirst() {
                heading = nil
                seen.append(letter)
                let verdict = Normalizer().normalize(Array(example.utf8), kafkaTimestamp: 1_795_341_600_000)
                guard case .accepted(let event) = verdict else {
                    Issue.record("shape \(letter): \(verdict)")
                    continue
                }
                #expect(event.shape == expected[letter], "shape \(letter)")
            }
        }
        #expect(seen == ["A", "B", "C", "D", "E", "F", "G"])
    }

    // MARK: Command output quoted in the documents

    /// The `trackpipe status` example in docs/operations.md (the first ```text block after its
    /// heading).
    static func statusExample() throws -> String {
        let text = try read("docs/operations.md")
        let section = try #require(text.range(of: "## Where a group stands: `trackpipe status`"), "the status section")
        let rest = text[section.upperBound...]
        let open = try #require(rest.range(of: "```text\n"), "a text block in the status section")
        let close = try #require(rest[open.upperBound...].range(of: "```"), "the block's end")
        return String(rest[open.upperBound..<close.lowerBound])
    }

    /// What a `status` text looks like, without its values: the title line's form, then per
    /// group its stage and whether it counts unprocessed messages, its column headers, and how
    /// many cells each row has. Two texts with equal shapes differ only in names and numbers.
    static func statusShape(_ text: String) -> [String] {
        var shape: [String] = []
        for line in text.split(separator: "\n").map(String.init) {
            if line.wholeMatch(of: /trackpipe status of \S+ at \d{4}-\d\d-\d\dT[0-9:.]+Z/) != nil {
                shape.append("title")
            } else if let group = line.wholeMatch(of: /group \S+ \((\w+) stage\) on \S+: lag \d+ over \d+ partitions(, \d+ unprocessed)?(, windows [0-9a-z,]+)?/) {
                shape.append("group \(group.output.1)\(group.output.2 == nil ? "" : " unprocessed")\(group.output.3 == nil ? "" : " windows")")
            } else if line.hasPrefix("partition ") {
                shape.append("columns " + line.split(separator: #/ {2,}/#).joined(separator: "|"))
            } else if line.first == " " {
                let cells = "row cells \(line.split(separator: " ").count)"
                if shape.last != cells { shape.append(cells) }
            } else {
                shape.append("unrecognised: \(line)")
            }
        }
        return shape
    }

    @Test("the status example in docs/operations.md has the shape the binary prints (the binary's side: StatusCommandTests)")
    func statusExampleShape() throws {
        let shape = Self.statusShape(try Self.statusExample())
        #expect(
            shape == [
                "title", "group normalize windows", "columns partition|committed|end|lag|epoch|event time", "row cells 6",
                "group aggregate unprocessed windows",
                "columns partition|committed|end|lag|checkpoint|evicted before|processed|unprocessed|duplicate floors|inputs|changelog",
                "row cells 11",
            ], "\(shape)")
        // The columns, as the binary defines them, in the order it prints them.
        let columns = (StatusCommand.offsetColumns + StatusCommand.checkpointColumns).map(\.header).joined(separator: "|")
        #expect(shape.contains("columns \(columns)"))
        #expect(shape.contains("columns " + (StatusCommand.offsetColumns + StatusCommand.sourceColumns).map(\.header).joined(separator: "|")))
    }

    /// Sentences of the story the documents told before the state topic, each untrue of the
    /// binary now (issue 30): the aggregate group commits what it processed, a restart reads
    /// state back, the repartition topic need not cover --retention, a missing input topic
    /// exits 1, and revision is the hit count.
    static let retiredClaims = [
        "trail by up to", "trail **by up to", "trails by up to", "rebuild their window state by replay", "replays up to `--retention`",
        "well beyond", "only waited for", "rev > 1", "rebuilds its windows from there",
        // Marks go out every 100 ms, repartition records start anew at 250,000 bytes, and -X is
        // refused for idempotence and group.instance.id as well as for auto-commit.
        "half second (sooner", "past 256 KiB", "Auto-commit cannot be turned", "except the commit settings",
        // A window's state is a head and segments of what changed, no longer rewritten whole.
        "one record per retained window", "one state record per retained", "chunks alternate", "one state record per changed window",
    ]

    @Test("no document, manifest comment or --help text repeats a retired claim")
    func retiredClaimsAreGone() throws {
        var places: [(String, String)] = try Self.documents().map { ($0, try Self.read($0)) }
        let deploy = Self.root.appendingPathComponent("deploy")
        for case let url as URL in FileManager.default.enumerator(at: deploy, includingPropertiesForKeys: nil) ?? .init()
        where ["yaml", "yml", "md", "json", ""].contains(url.pathExtension) || url.lastPathComponent == "Dockerfile" {
            if let text = try? String(contentsOf: url, encoding: .utf8) { places.append((url.path, text)) }
        }
        let help = try TrackpipeBinary.locate().run(["--experimental-dump-help"])
        places.append(("--help", help.stdout))
        #expect(places.count > 10)
        for (place, text) in places {
            for claim in Self.retiredClaims {
                #expect(!text.contains(claim), "\(place) says \"\(claim)\"")
            }
        }
    }
}
