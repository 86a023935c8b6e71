import Foundation
import Testing
import TrackingDomain
@testable import TrackpipeCLI

@Suite("trackpipe normalize")
struct NormalizeCommandTests {
    static let ok1 = #"{"deliveryId":"d57fd6","broadlogId":"h1685a5","action":"7","channel":"push","platform":"android","timestamp":1795300000000}"#
    static let ok2 = #"{"action":"2","timestamp":1795300001000,"NOTIFICATION_USER_INFO":{"deliveryId":"d57fd6","broadlogId":"h16aa01"}}"#
    static let off = #"{"action":"7","message":{"data":{"_dId":"d57fd6","_mId":"h1685a5","_acsDeliveryTracking":"off"}}}"#
    static let badAction = #"{"deliveryId":"d57fd6","broadlogId":"h1685a5","action":"9"}"#
    static let noTime = #"{"deliveryId":"d57fd6","broadlogId":"h1685a5","action":"1"}"#

    /// Runs `NormalizeRun` in-process over `input`, delivering it `chunkSize` bytes per read.
    func runInProcess(_ input: [UInt8], chunkSize: Int = 64 * 1024, normalizer: Normalizer = Normalizer()) throws -> (lines: [String], summary: NormalizeSummary) {
        var offset = 0
        var written: [UInt8] = []
        let summary = try NormalizeRun(normalizer: normalizer, chunkSize: chunkSize).run(
            read: { buffer in
                let n = min(buffer.count, input.count - offset)
                for i in 0..<n { buffer[i] = input[offset + i] }
                offset += n
                return n
            },
            write: { written.append(contentsOf: $0) })
        let text = String(decoding: written, as: UTF8.self)
        #expect(text.isEmpty || text.hasSuffix("\n"), "every output line ends with a newline")
        return (text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init), summary)
    }

    // MARK: In-process

    @Test("one verdict line per input line, in order, whatever the read boundaries", arguments: [1, 2, 7, 64, 65_536])
    func linesInOrder(chunkSize: Int) throws {
        let input = [Self.ok1, "", Self.off, Self.badAction, "not json", Self.ok2].joined(separator: "\n") + "\n"
        let (lines, summary) = try runInProcess(Array(input.utf8), chunkSize: chunkSize)
        #expect(lines.count == 6)
        #expect(lines[0] == #"{"status":"ok","event":{"deliveryId":"d57fd6","broadlogId":"h1685a5","action":"impression","channel":"push","platform":"android","eventTime":1795300000000,"shape":"sdk_context_data"}}"#)
        #expect(lines[1].hasPrefix(#"{"status":"rejected","reason":"malformed_json","detail":"malformed_json: the message is empty"#))
        #expect(lines[2] == #"{"status":"filtered","reason":"tracking_off"}"#)
        #expect(lines[3].hasPrefix(#"{"status":"rejected","reason":"unknown_action","detail":"unknown_action: "#))
        #expect(lines[4].hasPrefix(#"{"status":"rejected","reason":"malformed_json""#))
        #expect(lines[5].contains(#""shape":"android_local""#))
        #expect(summary.line == "normalize: 6 lines: 2 accepted, 1 filtered, 3 rejected (malformed_json 2, unknown_action 1)")
    }

    @Test("a last line without newline counts; a trailing newline adds no message; empty input has none")
    func lineEndings() throws {
        #expect(try runInProcess(Array((Self.ok1 + "\n" + Self.ok2).utf8)).lines.count == 2)
        #expect(try runInProcess(Array((Self.ok1 + "\n" + Self.ok2 + "\n").utf8)).lines.count == 2)
        #expect(try runInProcess(Array("\n".utf8)).summary.line == "normalize: 1 line: 0 accepted, 0 filtered, 1 rejected (malformed_json 1)")
        #expect(try runInProcess([]).summary.line == "normalize: 0 lines: 0 accepted, 0 filtered, 0 rejected")
        let crlf = try runInProcess(Array((Self.ok1 + "\r\n" + Self.ok2 + "\r\n").utf8), chunkSize: 5)
        #expect(crlf.summary.accepted == 2 && crlf.lines.count == 2)
    }

    @Test("eventTime is null without a Kafka timestamp")
    func noKafkaTimestamp() throws {
        let (lines, _) = try runInProcess(Array(Self.noTime.utf8))
        #expect(lines == [#"{"status":"ok","event":{"deliveryId":"d57fd6","broadlogId":"h1685a5","action":"open","channel":"unknown","platform":"unknown","eventTime":null,"shape":"sdk_context_data"}}"#])
    }

    @Test("a line longer than the limit is too_large with its full size, and the next line is unaffected", arguments: [3, 100, 65_536])
    func overlongLine(chunkSize: Int) throws {
        let normalizer = Normalizer(limits: NormalizerLimits(maxMessageBytes: 200))
        let long = #"{"pad":""# + String(repeating: "x", count: 1000) + #""}"#
        let prefix = #"{"deliveryId":"d","broadlogId":"b","action":"7","pad":""#
        let atLimit = prefix + String(repeating: "y", count: 200 - prefix.utf8.count - 2) + #""}"#
        #expect(atLimit.utf8.count == 200)
        let input = [long, atLimit, long].joined(separator: "\n")
        let (lines, summary) = try runInProcess(Array(input.utf8), chunkSize: chunkSize, normalizer: normalizer)
        #expect(lines.count == 3)
        #expect(lines[0].contains("too_large: the message is \(long.utf8.count) bytes"))
        #expect(lines[1].hasPrefix(#"{"status":"ok""#))
        #expect(lines[2].contains("too_large: the message is \(long.utf8.count) bytes"))
        #expect(summary.rejected == [.tooLarge: 2])
    }

    @Test("a write failure stops the run with the error")
    func writeFailure() {
        let input = Array((Self.ok1 + "\n").utf8)
        #expect(throws: NormalizeIOError.write(errno: 32)) {
            var done = false
            _ = try NormalizeRun().run(
                read: { buffer in
                    if done { return 0 }
                    done = true
                    for i in 0..<input.count { buffer[i] = input[i] }
                    return input.count
                },
                write: { _ in throw NormalizeIOError.write(errno: 32) })
        }
    }

    // MARK: End to end

    @Test("the binary normalizes a file: lines, order, summary on stderr, exit 0")
    func binaryOnFile() throws {
        let binary = try TrackpipeBinary.locate()
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("hits-\(UUID().uuidString).jsonl")
        defer { try? FileManager.default.removeItem(at: file) }
        try Data(([Self.ok1, Self.off, "[1]", Self.ok2, Self.badAction].joined(separator: "\n")).utf8).write(to: file)
        let result = try binary.run(["normalize", file.path])
        #expect(result.exitCode == 0)
        let lines = result.stdoutLines
        #expect(lines.count == 5)
        #expect(lines.first?.contains(#""shape":"sdk_context_data""#) == true)
        #expect(lines[1] == #"{"status":"filtered","reason":"tracking_off"}"#)
        #expect(lines[2].contains(#""reason":"not_an_object""#))
        #expect(lines[3].contains(#""shape":"android_local""#))
        #expect(lines[4].contains(#""reason":"unknown_action""#))
        #expect(result.stderr == "normalize: 5 lines: 2 accepted, 1 filtered, 2 rejected (not_an_object 1, unknown_action 1)\n")
    }

    @Test(
        "a postback url with a second id spelt another way (percent-encoded name, bare id, PHP's leading space, a ';' piece) is malformed_tracking_url, as the readers of the tracking server see two ids; ID and a fragment's id are other parameters"
    )
    func binaryOnSecondIds() throws {
        func hit(_ query: String) -> String { #"{"url":"https://t.example.com/r/\#(query)","timestamp":1795341633000}"# }
        let twoIds = [
            "?%69%64=h1,d1,2&id=h2,d2,7", "?id=h1,d1,2&%69d=h2,d2,7", "?id=h1,d1,2&id", "?id=h1,d1,2&+id=h2,d2,7",
            "?x=1;id=h2,d2,7&id=h1,d1,2", "?id=h1,d1,2&id%00=h2,d2,7", "?id=h1,d1,2&id[]=h2,d2,7",
        ]
        let oneId = ["?ID=h2,d2,7&id=h1,d1,2", "?id=h1,d1,2#&id=h2,d2,7", "?id=h1,d1,2&%6id=h2,d2,7", "?i%64=h1,d1,2"]
        let input = (twoIds + oneId).map(hit).joined(separator: "\n") + "\n"
        let result = try TrackpipeBinary.locate().run(["normalize"], stdin: Array(input.utf8))
        #expect(result.exitCode == 0, "\(result.stderr)")
        let lines = result.stdoutLines
        try #require(lines.count == twoIds.count + oneId.count, "\(result.stdout)")
        for (query, line) in zip(twoIds, lines) {
            #expect(line.contains(#""reason":"malformed_tracking_url""#) && line.contains("more than one \\\"id\\\" parameter"), "\(query): \(line)")
        }
        for (query, line) in zip(oneId, lines.dropFirst(twoIds.count)) {
            #expect(line.contains(#""status":"ok""#) && line.contains(#""broadlogId":"h1""#) && line.contains(#""deliveryId":"d1""#), "\(query): \(line)")
        }
        #expect(result.stderr == "normalize: 11 lines: 4 accepted, 0 filtered, 7 rejected (malformed_tracking_url 7)\n")
    }

    @Test("the binary reads standard input when no file is given")
    func binaryOnStdin() throws {
        let binary = try TrackpipeBinary.locate()
        let many = (0..<5000).map { i in #"{"deliveryId":"d\#(i)","broadlogId":"b\#(i)","action":"2"}"# }
        let result = try binary.run(["normalize"], stdin: Array((many.joined(separator: "\n") + "\n\n").utf8))
        #expect(result.exitCode == 0)
        let lines = result.stdoutLines
        #expect(lines.count == 5001)
        #expect(lines[4999].contains(#""deliveryId":"d4999""#), "order is kept across buffer flushes")
        #expect(lines[5000].contains(#""reason":"malformed_json""#))
        #expect(result.stderr == "normalize: 5001 lines: 5000 accepted, 0 filtered, 1 rejected (malformed_json 1)\n")
    }

    @Test("'-' means standard input, as in other pipeline tools")
    func dashIsStdin() throws {
        let result = try TrackpipeBinary.locate().run(["normalize", "-"], stdin: Array((Self.ok1 + "\n" + Self.off + "\n").utf8))
        #expect(result.exitCode == 0, "\(result.stderr)")
        #expect(result.stdoutLines.count == 2)
        #expect(result.stderr == "normalize: 2 lines: 1 accepted, 1 filtered, 0 rejected\n")
    }

    @Test("--help lists the exit codes the command uses")
    func helpListsExitCodes() {
        let help = NormalizeCommand.helpMessage(columns: 10_000)
        #expect(help.contains("Exit codes: 0 once all input is read, whatever the verdicts; 64 for a wrong argument; 66 if FILE cannot be opened; 74 if reading the input or writing the output fails."))
    }

    @Test("a missing file exits 66 and names the file")
    func binaryMissingFile() throws {
        let binary = try TrackpipeBinary.locate()
        let missing = "/nonexistent/trackpipe-\(UUID().uuidString).jsonl"
        let result = try binary.run(["normalize", missing])
        #expect(result.exitCode == 66)
        #expect(result.stderr.contains(missing))
        #expect(result.stderr.contains("No such file"))
        #expect(result.stdout.isEmpty)
    }

    @Test("an unreadable path (a directory) exits 74 and names it")
    func binaryUnreadable() throws {
        let binary = try TrackpipeBinary.locate()
        let dir = FileManager.default.temporaryDirectory.path
        let result = try binary.run(["normalize", dir])
        #expect(result.exitCode == 74)
        #expect(result.stderr.contains(dir))
    }
}
