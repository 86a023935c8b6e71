import Kafka
@testable import Pipeline
@testable import RecordFormats
@testable import Runner
import Testing
import TrackingDomain
import Windowing

/// A window task's state in its changelog, without Kafka: written at commits, read back by a
/// new owner, exact whatever the crash point, with older versions compacted away.
@Suite("window state in a changelog")
struct ChangelogTests {
    static let minute: Int64 = 60_000
    static let base: Int64 = 1_795_300_000_000 - 1_795_300_000_000 % 60_000
    static let window = WindowConfig(size: minute, grace: 0, retention: 10 * minute, idleTimeout: 30_000)

    /// A changelog partition and an output topic, as the broker would hold them.
    struct Topics {
        var changelog: [StateRecord] = []
        var output: [(key: String, value: String)] = []
        /// The reasons of the dead letters, in the order sent.
        var deadLetters: [String] = []

        /// The changelog as compaction leaves it: the latest record per key, tombstones gone.
        var compacted: [StateRecord] {
            var latest: [[UInt8]: StateRecord] = [:]
            for record in changelog { latest[record.key] = record }
            return latest.values.filter { $0.value != nil }.sorted { $0.offset < $1.offset }
        }

        mutating func take(_ sink: inout RecordingSink) {
            for sent in sink.take() {
                switch sent.destination {
                case .changelog:
                    changelog.append(StateRecord(offset: Int64(changelog.count), key: sent.key ?? [], value: sent.value))
                case .output:
                    output.append((sent.keyText ?? "", String(decoding: sent.value ?? [], as: UTF8.self)))
                case .deadLetter:
                    deadLetters.append(sent.header[DeadLetter.Header.reason] ?? "")
                default: break
                }
            }
        }

        /// The highest revision seen per key, failing if a key ever steps back.
        func revisions() -> (last: [String: Int], steppedBack: [String]) {
            var last: [String: Int] = [:]
            var steppedBack: [String] = []
            for (key, value) in output {
                let revision = Int(value.split(separator: "\"revision\":").last!.prefix { $0.isNumber })!
                if let previous = last[key], revision < previous { steppedBack.append("\(key): \(previous) then \(revision)") }
                last[key] = revision
            }
            return (last, steppedBack)
        }

        var lastValues: [String: String] {
            var last: [String: String] = [:]
            for (key, value) in output { last[key] = value }
            return last
        }
    }

    func stage() -> AggregateStage<RawHitInput> {
        AggregateStage(
            sourceTopic: "hits", input: RawHitInput(limits: NormalizerLimits(), maxFutureSkew: 3_600_000), window: Self.window,
            shards: 1)
    }

    /// A task's first owner: assigned with no commit, its (empty) state read back.
    func firstOwner() throws -> AggregateStage<RawHitInput> {
        var first = stage()
        try first.assign([PartitionStart(partition: 0)], now: Self.base)
        first.restoreState([], partition: 0)
        try first.stateRestored(partition: 0, now: Self.base)
        return first
    }

    /// The runner's commit, by hand: state written and acknowledged, then the held records, then
    /// the commit point.
    func commit<Input: AggregateInput>(_ stage: inout AggregateStage<Input>, into topics: inout Topics, now: Int64) throws -> CommitPoint? {
        var sink = RecordingSink()
        try stage.prepareCommit(into: &sink)
        topics.take(&sink)
        try stage.completeCommit(changelogEnds: [0: Int64(topics.changelog.count)], now: now, into: &sink)
        topics.take(&sink)
        let point = stage.commitPoints()[0]
        stage.committed([0])
        return point
    }

    /// A new owner: assigned with the commit, its state read back from `records`.
    func takeOver(from point: CommitPoint?, changelog records: [StateRecord], now: Int64) throws -> AggregateStage<RawHitInput> {
        try takeOver(stage(), from: point, changelog: records, now: now)
    }

    func takeOver<Input: AggregateInput>(
        _ next: AggregateStage<Input>, from point: CommitPoint?, changelog records: [StateRecord], now: Int64
    ) throws -> AggregateStage<Input> {
        var next = next
        try next.assign([PartitionStart(partition: 0, committedOffset: point?.offset, metadata: point?.metadata, logStart: 0)], now: now)
        #expect(next.partitionsAwaitingState == [0])
        next.restoreState(records, partition: 0)
        try next.stateRestored(partition: 0, now: now)
        #expect(next.partitionsAwaitingState.isEmpty)
        return next
    }

    /// The rest of a bounded run: `records` in batches of `size`, the end of the run, its commit.
    func runToEnd(
        _ stage: inout AggregateStage<RawHitInput>, _ records: ArraySlice<PolledRecord>, batch size: Int, into topics: inout Topics,
        now: Int64
    ) throws {
        var sink = RecordingSink()
        for start in stride(from: records.startIndex, to: records.endIndex, by: size) {
            try stage.process(Array(records[start..<min(records.endIndex, start + size)]), now: now, into: &sink)
        }
        try stage.finish(now: now + 10_000, into: &sink)
        topics.take(&sink)
        _ = try commit(&stage, into: &topics, now: now + 10_000)
    }

    /// Hits of a few deliveries over a few minutes, some late, each arriving a second after it
    /// happened; offsets 0..<count on partition 0.
    func input(_ arena: RecordArena, count: Int) -> [PolledRecord] {
        (0..<count).map { index in
            let late = index % 7 == 3
            let time = Self.base + Int64(index) * 4_000 - (late ? 90_000 : 0)
            let hit = rawHit("d\(index % 3)", "b\(index % 11)", action: ["7", "2", "1"][index % 3], at: time)
            return arena.record(partition: 0, offset: Int64(index), value: hit, timestamp: time + 1_000)
        }
    }

    /// The last record per key of an uninterrupted run over `records`, cut into batches of `size`.
    func reference(_ records: [PolledRecord], batch size: Int) throws -> [String: String] {
        var only = try firstOwner()
        var topics = Topics()
        var sink = RecordingSink()
        for (number, start) in stride(from: 0, to: records.count, by: size).enumerated() {
            try only.process(Array(records[start..<min(records.count, start + size)]), now: Self.base + Int64(number), into: &sink)
            topics.take(&sink)
            _ = try commit(&only, into: &topics, now: Self.base + Int64(number))
        }
        try only.finish(now: Self.base + 10_000, into: &sink)
        topics.take(&sink)
        _ = try commit(&only, into: &topics, now: Self.base + 10_000)
        #expect(topics.revisions().steppedBack.isEmpty)
        return topics.lastValues
    }

    @Test("a new owner reads the state back and reads only what came after the commit: exact, nothing re-read before it")
    func restartAtTheCommit() throws {
        let arena = RecordArena()
        let records = input(arena, count: 120)
        let expected = try reference(records, batch: 10)

        var first = try firstOwner()
        var topics = Topics()
        var sink = RecordingSink()
        try first.process(Array(records[0..<60]), now: Self.base, into: &sink)
        topics.take(&sink)
        let point = try #require(try commit(&first, into: &topics, now: Self.base))
        #expect(point.offset == 60, "the commit is at the processed mark, not at what the windows hold")
        #expect(Checkpoint(decoding: point.metadata)?.changelog == Int64(topics.changelog.count))

        var next = try takeOver(from: point, changelog: topics.compacted, now: Self.base + 1)
        try runToEnd(&next, records[60...], batch: 60, into: &topics, now: Self.base + 2)
        let a = next.drainReport().accounting
        #expect(a.consumed == 60 && a.reread == 0, "only what came after the commit is read")
        #expect(topics.lastValues == expected)
        #expect(topics.revisions().steppedBack.isEmpty)
    }

    @Test("a crash after the state was written and before the commit: the reread hits the state holds are not counted twice, and no revision steps back", arguments: [1, 3, 7])
    func crashBetweenChangelogAndCommit(batch: Int) throws {
        let arena = RecordArena()
        let records = input(arena, count: 90)
        let expected = try reference(records, batch: 10)

        var first = try firstOwner()
        var topics = Topics()
        var sink = RecordingSink()
        try first.process(Array(records[0..<30]), now: Self.base, into: &sink)
        topics.take(&sink)
        let point = try commit(&first, into: &topics, now: Self.base)
        try first.process(Array(records[30..<50]), now: Self.base + 1, into: &sink)
        topics.take(&sink)
        // The state is written and acknowledged; the process dies before its records go out and
        // before the commit.
        try first.prepareCommit(into: &sink)
        topics.take(&sink)

        var next = try takeOver(from: point, changelog: topics.changelog, now: Self.base + 2)
        try runToEnd(&next, records[30...], batch: batch, into: &topics, now: Self.base + 3)
        #expect(topics.lastValues == expected)
        #expect(topics.revisions().steppedBack.isEmpty, "\(topics.revisions().steppedBack)")
        let a = next.drainReport().accounting
        #expect(a.reread == 20, "the records between the commit and the state were read again, silently")
    }

    @Test("older versions compacted away and evicted windows deleted: the state read back is the same")
    func compaction() throws {
        let arena = RecordArena()
        // Enough event time for the first windows to be evicted (retention 10 min).
        let records = input(arena, count: 400)
        let expected = try reference(records, batch: 25)
        var first = try firstOwner()
        var topics = Topics()
        var sink = RecordingSink()
        var point: CommitPoint?
        for start in stride(from: 0, to: 300, by: 25) {
            try first.process(Array(records[start..<(start + 25)]), now: Self.base, into: &sink)
            topics.take(&sink)
            point = try commit(&first, into: &topics, now: Self.base)
        }
        #expect(topics.changelog.contains { $0.value == nil }, "evicted windows were deleted")
        #expect(topics.compacted.count < topics.changelog.count / 2, "most records are older versions")
        var next = try takeOver(from: point, changelog: topics.compacted, now: Self.base + 1)
        try next.process(Array(records[300...]), now: Self.base + 2, into: &sink)
        try next.finish(now: Self.base + 10_000, into: &sink)
        topics.take(&sink)
        _ = try commit(&next, into: &topics, now: Self.base + 10_000)
        #expect(topics.lastValues == expected)
        #expect(topics.revisions().steppedBack.isEmpty)
    }

    @Test("a window too large for one record is written in segments, and a crash in the middle of a write leaves the previous complete version")
    func largeWindows() throws {
        let arena = RecordArena()
        // One delivery, one window, 60 000 recipients with 12-byte ids: about 900 KB of state.
        let records = (0..<60_000).map { index in
            arena.record(
                partition: 0, offset: Int64(index), value: rawHit("big", "r\(String(100_000_000_000 + index))", at: Self.base + 1_000),
                timestamp: Self.base + 2_000)
        }
        var first = try firstOwner()
        var topics = Topics()
        var sink = RecordingSink()
        try first.process(Array(records[0..<59_000]), now: Self.base, into: &sink)
        let point = try commit(&first, into: &topics, now: Self.base)
        #expect(topics.changelog.allSatisfy { ($0.value?.count ?? 0) < 1_000_000 }, "every record under 1 MB")
        #expect(topics.changelog.count >= 3, "head and segments")
        // More hits, and a write cut short: its segments are written, its head is not.
        try first.process(Array(records[59_000...]), now: Self.base, into: &sink)
        try first.prepareCommit(into: &sink)
        let rewrite = sink.take().filter { $0.destination == .changelog && ChangelogRecord.decodeKey($0.key ?? []).map { if case .segment = $0 { true } else { false } } == true }
        #expect(!rewrite.isEmpty)
        for sent in rewrite { topics.changelog.append(StateRecord(offset: Int64(topics.changelog.count), key: sent.key!, value: sent.value)) }

        var next = try takeOver(from: point, changelog: topics.changelog, now: Self.base + 1)
        try next.process(Array(records[59_000...]), now: Self.base + 2, into: &sink)
        try next.finish(now: Self.base + 10_000, into: &sink)
        topics.take(&sink)
        _ = try commit(&next, into: &topics, now: Self.base + 10_000)
        let big = topics.lastValues.first { $0.key.hasPrefix("big@") }?.value ?? ""
        #expect(big.contains("\"impressions\":60000") && big.contains("\"uniqueImpressions\":60000"), "\(big.prefix(200))")
    }

    @Test("a changelog record of another format version is refused, not guessed at: nothing of it is read back, each is counted as unreadable")
    func refusesRecordsOfAnotherVersion() throws {
        let arena = RecordArena()
        var first = try firstOwner()
        var topics = Topics()
        var sink = RecordingSink()
        try first.process(input(arena, count: 20), now: Self.base, into: &sink)
        topics.take(&sink)
        _ = try commit(&first, into: &topics, now: Self.base)
        let other = topics.changelog.map { record in
            StateRecord(offset: record.offset, key: record.key, value: record.value.map { [ChangelogRecord.version + 1] + $0.dropFirst() })
        }
        #expect(other.contains { ChangelogRecord.decodeKey($0.key) == .task && $0.value != nil })
        for record in other {
            guard let value = record.value, let key = ChangelogRecord.decodeKey(record.key) else { continue }
            do {
                switch key {
                case .task: _ = try ChangelogRecord.decodeTask(value)
                case .head: _ = try ChangelogRecord.decodeHead(value)
                case .segment: _ = try ChangelogRecord.decodeSegment(value)
                }
                Issue.record("a record of format version \(ChangelogRecord.version + 1) was read")
            } catch {
                #expect("\(error)".contains("format version \(ChangelogRecord.version + 1)"), "\(error)")
            }
        }
        var changelog = TaskChangelog()
        changelog.beginRestore(.lastWritten)
        for record in other { changelog.apply(offset: record.offset, key: record.key, value: record.value) }
        let restored = changelog.finishRestore(committedChangelog: nil)
        #expect(restored.windows.isEmpty && restored.task == nil)
        #expect(restored.unreadable == other.filter { $0.value != nil }.count && restored.records == other.count)
    }

    @Test("a changelog behind the last commit (deleted or truncated) is refused with what to do")
    func changelogBehindTheCommit() throws {
        let arena = RecordArena()
        var first = try firstOwner()
        var topics = Topics()
        var sink = RecordingSink()
        try first.process(input(arena, count: 20), now: Self.base, into: &sink)
        let point = try commit(&first, into: &topics, now: Self.base)
        var next = stage()
        try next.assign([PartitionStart(partition: 0, committedOffset: point?.offset, metadata: point?.metadata)], now: Self.base)
        next.restoreState([], partition: 0)
        do {
            try next.stateRestored(partition: 0, now: Self.base)
            Issue.record("an empty changelog was taken for the state the commit recorded")
        } catch {
            #expect("\(error)".contains("--group"), "\(error)")
        }
    }

    @Test("dead letters wait for the commit too: a crash before it leaves the judgement to the next owner, never a hit both dead-lettered and counted")
    func deadLettersWaitForTheCommit() throws {
        let arena = RecordArena()
        var first = try firstOwner()
        var sink = RecordingSink()
        var topics = Topics()
        let far = Self.base + 30 * Self.minute
        try first.process(
            [
                arena.record(partition: 0, offset: 0, value: rawHit("d1", "a", at: far), timestamp: far),
                arena.record(partition: 0, offset: 1, value: Array("{not json".utf8), timestamp: far),
            ], now: Self.base, into: &sink)
        try first.process(
            [arena.record(partition: 0, offset: 2, value: rawHit("d1", "b", at: Self.base), timestamp: far)], now: Self.base, into: &sink)
        #expect(sink.to(.deadLetter).isEmpty, "nothing goes out before the state is written")
        topics.take(&sink)
        _ = try commit(&first, into: &topics, now: Self.base)
        #expect(topics.deadLetters.sorted() == ["malformed_json", "too_late"], "\(topics.deadLetters)")
        _ = try commit(&first, into: &topics, now: Self.base)
        #expect(topics.deadLetters.count == 2, "each sent once")
    }

    @Test("a crash after the state was written and before the records held for it went out: the next owner sends the last record of a window evicted in that interval, and that interval's dead letters")
    func crashBeforeTheHeldRecordsWentOut() throws {
        let arena = RecordArena()
        func hit(_ delivery: String, _ broadlog: String, at time: Int64, arriving: Int64? = nil, _ offset: Int64) -> PolledRecord {
            arena.record(partition: 0, offset: offset, value: rawHit(delivery, broadlog, at: time), timestamp: arriving ?? time + 1_000)
        }
        let far = Self.base + 30 * Self.minute
        let records = [
            hit("d1", "a", at: Self.base + 10_000, 0), hit("d1", "b", at: Self.base + 20_000, 1),
            hit("d2", "x", at: Self.base + 2 * Self.minute, 2),  // d1's window is emitted: revision 2
            hit("d1", "c", at: Self.base + 30_000, arriving: Self.base + 3 * Self.minute, 3),  // a correction: revision 3
            arena.record(partition: 0, offset: 4, value: Array("{not json".utf8), timestamp: Self.base + 3 * Self.minute),
            hit("d2", "y", at: far, 5),  // event time moves past d1's retention: its window is evicted
            hit("d1", "d", at: Self.base + 40_000, arriving: far, 6),  // too late
        ]
        var first = try firstOwner()
        var topics = Topics()
        var sink = RecordingSink()
        try first.process(Array(records[0..<3]), now: Self.base, into: &sink)
        topics.take(&sink)
        let point = try commit(&first, into: &topics, now: Self.base)
        #expect(topics.lastValues.first { $0.key.hasPrefix("d1@") }?.value.contains("\"revision\":2") == true)
        try first.process(Array(records[3..<6]), now: Self.base + 1, into: &sink)
        try first.process(Array(records[6...]), now: Self.base + 2, into: &sink)
        topics.take(&sink)
        // The state is written and acknowledged; the process dies before the records and dead
        // letters held for it go out, and before the commit.
        try first.prepareCommit(into: &sink)
        topics.take(&sink)
        #expect(topics.deadLetters.isEmpty)

        var next = try takeOver(from: point, changelog: topics.changelog, now: Self.base + 3)
        try next.process(Array(records[3...]), now: Self.base + 4, into: &sink)
        topics.take(&sink)
        _ = try commit(&next, into: &topics, now: Self.base + 4)
        let d1 = topics.lastValues.first { $0.key.hasPrefix("d1@") }?.value ?? "none"
        #expect(d1.contains("\"revision\":3"), "the correction of the evicted window went out: \(d1)")
        #expect(topics.deadLetters.sorted() == ["malformed_json", "too_late"], "\(topics.deadLetters)")
        #expect(topics.revisions().steppedBack.isEmpty, "\(topics.revisions().steppedBack)")
        // The evicted window's state goes from the changelog once its record is out.
        _ = try commit(&next, into: &topics, now: Self.base + 5)
        let tombstoned = topics.changelog.filter { $0.value == nil && $0.key.first == UInt8(ascii: "W") }
        #expect(tombstoned.contains { String(decoding: $0.key, as: UTF8.self).hasSuffix("d1") })
    }

    @Test("a new line of owners (a recount after an offset reset, or the other mode) never reads an earlier run's state; an owner whose commit's state another run overwrote is refused")
    func earlierRunsStateIsNotReadBack() throws {
        let arena = RecordArena()
        let records = input(arena, count: 60)
        let expected = try reference(records, batch: 10)
        var first = try firstOwner()
        var topics = Topics()
        var sink = RecordingSink()
        try first.process(Array(records[0..<40]), now: Self.base, into: &sink)
        topics.take(&sink)
        let oldPoint = try commit(&first, into: &topics, now: Self.base)

        // The group's offsets reset to the earliest (a commit at the log's start, without a
        // checkpoint), and the changelog holds the first run's state. The recount counts
        // everything.
        var recount = try takeOver(from: CommitPoint(offset: 0, metadata: nil), changelog: topics.changelog, now: Self.base + 1)
        var output = Topics()
        output.changelog = topics.changelog
        for start in stride(from: 0, to: records.count, by: 10) {
            try recount.process(Array(records[start..<start + 10]), now: Self.base + 2, into: &sink)
            output.take(&sink)
            _ = try commit(&recount, into: &output, now: Self.base + 2)
        }
        try recount.finish(now: Self.base + 10_000, into: &sink)
        output.take(&sink)
        let point = try commit(&recount, into: &output, now: Self.base + 10_000)
        #expect(output.lastValues == expected)
        #expect(recount.drainReport().accounting.reread == 0)
        #expect((Checkpoint(decoding: point?.metadata)?.changelogSince ?? 0) > 0)

        // The new line's own restart reads its state back and skips the earlier run's.
        var again = try takeOver(from: point, changelog: output.changelog, now: Self.base + 10_001)
        let notice = again.drainReport().notices.joined()
        #expect(notice.contains("read back") && !notice.contains("read back 0 windows"), "\(notice)")

        // The first run's commit, with another run's state written over it, is refused.
        var stale = stage()
        try stale.assign([PartitionStart(partition: 0, committedOffset: oldPoint?.offset, metadata: oldPoint?.metadata, logStart: 0)], now: Self.base)
        stale.restoreState(output.changelog, partition: 0)
        do {
            try stale.stateRestored(partition: 0, now: Self.base)
            Issue.record("another run's state was taken for this task's")
        } catch {
            #expect("\(error)".contains("another run of this group") && "\(error)".contains("--group"), "\(error)")
            #expect(PipelineError.exitCode(for: error) == 64, "a refusal, which a restart cannot mend")
        }
    }

    @Test("an owner that died before its first commit is continued by the next owner of the same input: nothing counted twice, no revision steps back")
    func diedBeforeItsFirstCommit() throws {
        let arena = RecordArena()
        let records = input(arena, count: 60)
        let expected = try reference(records, batch: 10)
        var first = try firstOwner()
        var topics = Topics()
        var sink = RecordingSink()
        try first.process(Array(records[0..<30]), now: Self.base, into: &sink)
        topics.take(&sink)
        // State written, records out, then the process dies before committing any offset.
        try first.prepareCommit(into: &sink)
        topics.take(&sink)
        try first.completeCommit(changelogEnds: [0: Int64(topics.changelog.count)], now: Self.base, into: &sink)
        topics.take(&sink)
        #expect(!topics.output.isEmpty)

        var next = try takeOver(from: nil, changelog: topics.changelog, now: Self.base + 1)
        try runToEnd(&next, records[...], batch: 10, into: &topics, now: Self.base + 2)
        #expect(next.drainReport().accounting.reread == 30, "the first 30 records were the dead owner's, reread silently")
        #expect(topics.lastValues == expected)
        #expect(topics.revisions().steppedBack.isEmpty, "\(topics.revisions().steppedBack)")
    }

    @Test("a new owner of a partition that stays quiet goes on from its previous owner's event time: the windows read back close as time passes, without waiting for the next hit")
    func quietPartitionAfterATakeover() throws {
        let arena = RecordArena()
        // A window emitted, then a hit in the next window, which is not ripe when the owner stops.
        let records = [
            arena.record(partition: 0, offset: 0, value: rawHit("d1", "a", at: Self.base + 10_000), timestamp: Self.base + 11_000),
            arena.record(partition: 0, offset: 1, value: rawHit("d1", "b", at: Self.base + 70_000), timestamp: Self.base + 71_000),
        ]
        var first = try firstOwner()
        var topics = Topics()
        var sink = RecordingSink()
        try first.process(records, now: Self.base, into: &sink)
        topics.take(&sink)
        let point = try commit(&first, into: &topics, now: Self.base)
        #expect(topics.output.count == 1, "only the first window was ripe: \(topics.output.map(\.key))")
        let before = topics.output.count

        // The input stays quiet: ticks only, far past the idle timeout and the window's end.
        var next = try takeOver(from: point, changelog: topics.changelog, now: Self.base + 1_000)
        for second in 1...5 {
            try next.tick(now: Self.base + 1_000 + Int64(second) * 60_000, into: &sink)
            topics.take(&sink)
            _ = try commit(&next, into: &topics, now: Self.base + 1_000 + Int64(second) * 60_000)
        }
        let emitted = topics.output[before...].map(\.value)
        #expect(emitted.contains { $0.contains("\"revision\":1") && $0.contains("\"impressions\":1") }, "\(emitted)")
        #expect(topics.output.count == before + 1, "the window read back was emitted once: \(topics.output[before...].map(\.key))")
    }

    @Test("behind the repartition topic, a new owner that takes over after the input went quiet hears only its sources' idle marks: the windows it reads back still close as time passes")
    func quietInputBehindTheShuffle() throws {
        let arena = RecordArena()
        var upstream = NormalizeStage(
            inputTopic: "hits", sourcePartitions: 1, repartitionPartitions: 1, limits: NormalizerLimits(), maxFutureSkew: 3_600_000,
            idleTimeout: Self.window.idleTimeout, markInterval: 500, originals: OriginalRule(window: Self.window))
        try upstream.assign([PartitionStart(partition: 0)], now: Self.base)
        var shuffled = RecordingSink()
        // A window that ripens, then a hit in the next window, not ripe when the owner stops.
        try upstream.process(
            [
                arena.record(partition: 0, offset: 0, value: rawHit("d1", "a", at: Self.base + 10_000), timestamp: Self.base + 11_000),
                arena.record(partition: 0, offset: 1, value: rawHit("d1", "b", at: Self.base + 70_000), timestamp: Self.base + 71_000),
            ], now: Self.base + 72_000, into: &shuffled)
        func stage() -> AggregateStage<RepartitionInput> {
            AggregateStage(
                sourceTopic: "hits", input: RepartitionInput(partitionCount: 1), window: Self.window, shards: 1)
        }
        var first = try takeOver(stage(), from: nil, changelog: [], now: Self.base)
        var topics = Topics()
        var sink = RecordingSink()
        let events = shuffled.to(.repartition).enumerated().map { arena.record($0.element, offset: Int64($0.offset)) }
        try first.process(events, now: Self.base, into: &sink)
        topics.take(&sink)
        let point = try commit(&first, into: &topics, now: Self.base)
        #expect(topics.output.count == 1, "only the first window was ripe: \(topics.output.map(\.key))")
        let before = topics.output.count

        // The input stays quiet: from now on the upstream's marks say its source is idle, and
        // they are all the new owner hears.
        var next = try takeOver(stage(), from: point, changelog: topics.changelog, now: Self.base + 73_000)
        var offset = Int64(events.count)
        for second in 1...5 {
            let now = Self.base + 73_000 + Int64(second) * 60_000
            var marks = RecordingSink()
            try upstream.tick(now: now, into: &marks)
            let records = marks.to(.repartition).map { sent -> PolledRecord in
                defer { offset += 1 }
                return arena.record(sent, offset: offset)
            }
            #expect(!records.isEmpty)
            try next.process(records, now: now, into: &sink)
            try next.tick(now: now, into: &sink)
            topics.take(&sink)
            _ = try commit(&next, into: &topics, now: now)
        }
        let emitted = topics.output[before...].map(\.value)
        #expect(emitted.contains { $0.contains("\"revision\":1") && $0.contains("\"impressions\":1") }, "\(emitted)")
        #expect(topics.output.count == before + 1, "the window read back was emitted once: \(topics.output[before...].map(\.key))")
    }

    // MARK: Writing what changed, and merges

    /// One commit of a recorded run: the changelog records its write added, the output its
    /// commit released, its commit point.
    struct Recorded {
        var write: [StateRecord]
        var output: [(key: String, value: String)]
        var point: CommitPoint?
    }

    /// An uninterrupted first owner over `records`, committing after every `size` of them.
    func recordedRun(_ records: [PolledRecord], batch size: Int) throws -> [Recorded] {
        var first = try firstOwner()
        var topics = Topics()
        var recorded: [Recorded] = []
        var sink = RecordingSink()
        for (number, start) in stride(from: 0, to: records.count, by: size).enumerated() {
            try first.process(Array(records[start..<min(records.count, start + size)]), now: Self.base + Int64(number), into: &sink)
            topics.take(&sink)
            let (changelog, output) = (topics.changelog.count, topics.output.count)
            let point = try commit(&first, into: &topics, now: Self.base + Int64(number))
            recorded.append(Recorded(write: Array(topics.changelog[changelog...]), output: Array(topics.output[output...]), point: point))
        }
        return recorded
    }

    /// Whether a write folds some window's segments into new ones: it deletes segments of a
    /// window whose head it writes.
    static func merges(in write: [StateRecord]) -> [WindowKey] {
        var heads: Set<WindowKey> = []
        var deleted: Set<WindowKey> = []
        for record in write {
            switch ChangelogRecord.decodeKey(record.key) {
            case .head(let window)? where record.value != nil: heads.insert(window)
            case .segment(let window, _)? where record.value == nil: deleted.insert(window)
            default: break
            }
        }
        return Array(heads.intersection(deleted))
    }

    /// A compacted changelog holds only what heads name: every live head's segments, and no
    /// live segment that no live head names.
    static func untidy(_ records: [StateRecord]) -> [String] {
        var named: [WindowKey: Range<UInt32>] = [:]
        var segments: Set<ChangelogRecord.Key> = []
        for record in records where record.value != nil {
            switch ChangelogRecord.decodeKey(record.key) {
            case .head(let window)?: named[window] = try? ChangelogRecord.decodeHead(record.value!).segments
            case .segment?: segments.insert(ChangelogRecord.decodeKey(record.key)!)
            default: break
            }
        }
        var problems: [String] = []
        for (window, range) in named {
            for number in range where !segments.contains(.segment(window, number: number)) { problems.append("\(window) names missing \(number)") }
        }
        for case .segment(let window, let number) in segments where !(named[window]?.contains(number) ?? false) {
            problems.append("\(window) segment \(number) named by no head")
        }
        return problems
    }

    @Test("each commit writes what changed: a window of thousands of recipients that takes a few more hits writes those recipients and its head, not the window")
    func writesWhatChanged() throws {
        let arena = RecordArena()
        let records = (0..<5_010).map { index in
            arena.record(partition: 0, offset: Int64(index), value: rawHit("big", "r\(100_000 + index)", at: Self.base + 1_000), timestamp: Self.base + 2_000)
        }
        var first = try firstOwner()
        var topics = Topics()
        var sink = RecordingSink()
        try first.process(Array(records[0..<5_000]), now: Self.base, into: &sink)
        _ = try commit(&first, into: &topics, now: Self.base)
        let firstWrite = topics.changelog.reduce(0) { $0 + $1.key.count + ($1.value?.count ?? 0) }
        let before = topics.changelog.count
        try first.process(Array(records[5_000...]), now: Self.base, into: &sink)
        let point = try commit(&first, into: &topics, now: Self.base)
        let second = topics.changelog[before...]
        let secondBytes = second.reduce(0) { $0 + $1.key.count + ($1.value?.count ?? 0) }
        #expect(firstWrite > 30_000, "the first write holds 5,000 recipients: \(firstWrite) bytes")
        #expect(secondBytes < 400, "ten more recipients cost \(secondBytes) bytes: a segment of them, the head, the task record")
        #expect(second.count == 3)
        var next = try takeOver(from: point, changelog: topics.compacted, now: Self.base + 1)
        try next.finish(now: Self.base + 10_000, into: &sink)
        topics.take(&sink)
        _ = try commit(&next, into: &topics, now: Self.base + 10_000)
        let big = topics.lastValues.first { $0.key.hasPrefix("big@") }?.value ?? ""
        #expect(big.contains("\"uniqueImpressions\":5010"), "\(big.prefix(200))")
    }

    @Test("a crash at any record of any write, in the middle of a merge too, restores the same counts, compacted or not; the next owner's first write deletes what no head names")
    func crashAtAnyWrite() throws {
        let arena = RecordArena()
        let records = input(arena, count: 90)
        let expected = try reference(records, batch: 10)
        let run = try recordedRun(records, batch: 3)
        #expect(run.contains { !Self.merges(in: $0.write).isEmpty }, "windows are merged along the way")
        var cutMerges = 0
        for (commit, recorded) in run.enumerated() {
            let before = run[..<commit].flatMap(\.write)
            let previous = commit > 0 ? run[commit - 1].point : nil
            let merged = Set(Self.merges(in: recorded.write))
            for cut in 0...recorded.write.count {
                // Inside a merge: after its first record, before its last.
                let touched = recorded.write.enumerated().filter { entry in
                    switch ChangelogRecord.decodeKey(entry.element.key) {
                    case .head(let window)?, .segment(let window, _)?: merged.contains(window)
                    default: false
                    }
                }.map(\.offset)
                if let low = touched.min(), let high = touched.max(), cut > low, cut <= high { cutMerges += 1 }
                for compacted in [false, true] {
                    var topics = Topics()
                    topics.changelog = before + recorded.write.prefix(cut)
                    topics.output = run[..<commit].flatMap(\.output)
                    var next = try takeOver(from: previous, changelog: compacted ? topics.compacted : topics.changelog, now: Self.base + 1_000)
                    let resume = Int(previous?.offset ?? 0)
                    try runToEnd(&next, records[resume...], batch: 7, into: &topics, now: Self.base + 1_001)
                    let differing = Set(topics.lastValues.keys).union(expected.keys).filter { topics.lastValues[$0] != expected[$0] }.sorted()
                    #expect(differing.isEmpty, "commit \(commit), cut after \(cut) of \(recorded.write.count) records, compacted: \(compacted): \(differing.prefix(3))")
                    #expect(topics.revisions().steppedBack.isEmpty, "commit \(commit), cut \(cut): \(topics.revisions().steppedBack)")
                    #expect(Self.untidy(topics.compacted).isEmpty, "commit \(commit), cut \(cut): \(Self.untidy(topics.compacted))")
                }
            }
        }
        #expect(cutMerges > 0, "some crashes fell in the middle of a merge")
    }

    @Test("the merge rule: large changes of new broadlogs are never rewritten; small ones are merged once their records cost more than twice one complete write, as are broadlogs repeated by later actions")
    func mergeRule() {
        let window = WindowKey(size: 60_000, windowStart: 0, deliveryId: "delivery-1")
        func change(_ broadlogs: [BroadlogActions], count: Int) -> WindowChange {
            WindowChange(window: window, counters: WindowCounters(), countedThrough: 0, emittedRevision: 0, broadlogs: broadlogs, broadlogCount: count)
        }
        func ids(_ range: Range<Int>, actions: UInt8 = 1) -> [BroadlogActions] { range.map { BroadlogActions(id: BroadlogID("r\(1_000_000 + $0)"), actions: actions) } }
        func footprint(after changes: [WindowChange]) -> (TaskChangelog.Footprint, merges: Int) {
            var changelog = TaskChangelog()
            var merges = 0
            for change in changes {
                var state = StateChanges()
                state.windows = [change]
                let merging = changelog.merges(for: state)
                merges += merging.count
                // A merge rewrites the window's whole state: every broadlog seen so far.
                let whole = merging.isEmpty ? [] : [WindowState(size: 60_000, deliveryId: window.deliveryId, windowStart: 0, counters: WindowCounters(), broadlogs: ids(0..<change.broadlogCount), countedThrough: 0, emittedRevision: 0)]
                _ = changelog.entries(for: state, complete: whole, task: ChangelogRecord.TaskState(processedMark: 0, evictedBefore: 0))
            }
            return (changelog.footprint(of: window)!, merges)
        }
        // 200 commits of 1,000 new recipients each: one segment per commit, never merged.
        let large = footprint(after: (0..<200).map { change(ids($0 * 1_000..<($0 + 1) * 1_000), count: ($0 + 1) * 1_000) })
        #expect(large.merges == 0 && large.0.named.count == 200)
        // 200 commits of one new recipient each: the records cost mostly their keys and overhead.
        let small = footprint(after: (0..<200).map { change(ids($0..<$0 + 1), count: $0 + 1) })
        #expect(small.merges > 0)
        #expect(small.0.named.count < 100, "merged down: \(small.0.named.count) segments hold 200 recipients")
        // 10,000 recipients, then the same ones again with a click, then with an open.
        let first = change(ids(0..<10_000), count: 10_000)
        let repeated = footprint(after: [first, change(ids(0..<10_000, actions: 3), count: 10_000), change(ids(0..<10_000, actions: 7), count: 10_000)])
        #expect(repeated.merges == 1, "the third copy would make the records cost three times the state")
    }

    @Test("the state records' bytes, one of each kind (the format is version 2)")
    func recordBytes() throws {
        let window = WindowKey(size: ChangelogRecord.unsized, windowStart: 60_000, deliveryId: "d1")
        let windowBytes: [UInt8] = [0, 0, 0, 0, 0, 0, 0xEA, 0x60, 0, 2, 0x64, 0x31]
        #expect(ChangelogRecord.encodeKey(.head(window)) == [0x57] + windowBytes)
        #expect(ChangelogRecord.encodeKey(.segment(window, number: 5)) == [0x53] + windowBytes + [0, 0, 0, 5])
        // A pipeline of several sizes names the size (here an hour, 3,600,000 ms) before the start.
        let hour = WindowKey(size: 3_600_000, windowStart: 60_000, deliveryId: "d1")
        let hourBytes: [UInt8] = [0, 0, 0, 0, 0, 0x36, 0xEE, 0x80] + windowBytes
        #expect(ChangelogRecord.encodeKey(.head(hour)) == [0x77] + hourBytes)
        #expect(ChangelogRecord.encodeKey(.segment(hour, number: 5)) == [0x73] + hourBytes + [0, 0, 0, 5])
        #expect(ChangelogRecord.decodeKey([0x73] + hourBytes + [0, 0, 0, 5]) == .segment(hour, number: 5))
        #expect(ChangelogRecord.decodeKey([0x57] + windowBytes) == .head(window))
        #expect(ChangelogRecord.decodeKey([0x77, 0, 0, 0, 0, 0, 0, 0, 0] + windowBytes) == nil, "a sized key of size 0 is no key")
        #expect(ChangelogRecord.encodeKey(.task) == [0x54])
        var counters = WindowCounters()
        (counters.impressions, counters.clicks, counters.uniqueImpressions, counters.uniqueClicks) = (3, 1, 2, 1)
        (counters.dismissals, counters.push, counters.android) = (1, 4, 4)
        let head = ChangelogRecord.Head(counters: counters, countedThrough: 300, emittedRevision: 4, segments: 5..<7, broadlogCount: 200)
        let headBytes: [UInt8] = [2, 0x57, 0xD8, 0x04, 4, 3, 1, 0, 2, 1, 0, 1, 4, 0, 0, 0, 4, 0, 5, 2, 0xC8, 0x01]
        #expect(ChangelogRecord.Entry.head(window, head).encoded.value == headBytes)
        let long = String(repeating: "x", count: 40)
        let broadlogs = [BroadlogActions(id: "b1", actions: 1), BroadlogActions(id: BroadlogID(long), actions: 4)]
        let segmentBytes: [UInt8] = [2, 0x53, 2 << 3 | 1, 0x62, 0x31, 31 << 3 | 4, 40] + Array(long.utf8)
        #expect(ChangelogRecord.Entry.segment(window, number: 5, broadlogs: broadlogs[...]).encoded.value == segmentBytes)
        #expect(try ChangelogRecord.decode(.head(window), value: headBytes) == .head(window, head))
        #expect(try ChangelogRecord.decode(.segment(window, number: 5), value: segmentBytes) == .segment(window, number: 5, broadlogs: broadlogs[...]))
        #expect(try ChangelogRecord.decode(.head(window), value: nil) == .tombstone(.head(window)))
        #expect(ChangelogRecord.encodedSize(of: broadlogs[0]) == 3 && ChangelogRecord.encodedSize(of: broadlogs[1]) == 42)
    }

    @Test("every counter of a head is written where `WindowCounters.all` (the reader's order) puts it, and segments of ids of every length read back")
    func headAndSegmentRoundTrip() throws {
        let window = WindowKey(size: ChangelogRecord.unsized, windowStart: 60_000, deliveryId: "d1")
        var counters = WindowCounters()
        for (index, counter) in WindowCounters.all.enumerated() { counters[keyPath: counter.keyPath] = UInt32(index + 1) << (index % 4 * 7) }
        let head = ChangelogRecord.Head(counters: counters, countedThrough: -7, emittedRevision: .max, segments: 3..<9, broadlogCount: 1 << 20)
        let headBytes = try #require(ChangelogRecord.Entry.head(window, head).encoded.value)
        #expect(try ChangelogRecord.decode(.head(window), value: headBytes) == .head(window, head))
        // Each length around the short form's limit (30 bytes), the inline ids' (16) and a varint's step (128).
        let broadlogs = [0, 1, 15, 16, 17, 30, 31, 32, 127, 128, 300].enumerated().map { index, length in
            BroadlogActions(id: BroadlogID(String(repeating: "b", count: length)), actions: UInt8(index % 7 + 1))
        }
        let segment = try #require(ChangelogRecord.Entry.segment(window, number: 1, broadlogs: broadlogs[...]).encoded.value)
        #expect(segment.count == 2 + broadlogs.reduce(0) { $0 + ChangelogRecord.encodedSize(of: $1) })
        #expect(try ChangelogRecord.decode(.segment(window, number: 1), value: segment) == .segment(window, number: 1, broadlogs: broadlogs[...]))
    }

    @Test("a window whose head names a segment the partition no longer holds is skipped as unreadable, and its head and segments are deleted with the next write")
    func headNamingAMissingSegment() throws {
        let arena = RecordArena()
        let records = input(arena, count: 30)
        let run = try recordedRun(records, batch: 10)
        var changelog = run.flatMap(\.write)
        let lost = try #require(changelog.lastIndex { if case .segment? = ChangelogRecord.decodeKey($0.key) { $0.value != nil } else { false } })
        changelog.remove(at: lost)
        changelog = changelog.enumerated().map { StateRecord(offset: Int64($0.offset), key: $0.element.key, value: $0.element.value) }
        var next = try takeOver(from: nil, changelog: changelog, now: Self.base + 1)
        let notice = next.drainReport().notices.joined()
        #expect(notice.contains("1 of them unreadable"), "\(notice)")
        var topics = Topics()
        topics.changelog = changelog
        var sink = RecordingSink()
        try next.process(records, now: Self.base + 2, into: &sink)
        _ = try commit(&next, into: &topics, now: Self.base + 2)
        #expect(Self.untidy(topics.compacted).isEmpty, "\(Self.untidy(topics.compacted))")
    }
}

extension ChangelogRecord {
    /// The record a key and a value stand for (a null value: a tombstone).
    static func decode(_ key: Key, value: [UInt8]?) throws(ChangelogRecord.DecodingError) -> Entry {
        guard let value else { return .tombstone(key) }
        switch key {
        case .task: return .task(try decodeTask(value))
        case .head(let window): return .head(window, try decodeHead(value))
        case .segment(let window, let number): return .segment(window, number: number, broadlogs: try decodeSegment(value)[...])
        }
    }
}
