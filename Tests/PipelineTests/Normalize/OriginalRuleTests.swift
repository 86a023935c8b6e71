import Kafka
import Testing
import TrackingDomain
import Windowing
@testable import Pipeline
@testable import RecordFormats
@testable import Runner

/// Which hits carry their original across the shuffle, and that the ones that do not are never
/// judged `too_late` behind it, tried where the rule could break: the first record a task reads,
/// the last one of a run, a source back from idle, a partition taken over from a crashed
/// reader, a backlog of the repartition topic read hours later, a task whose reading stalls, a
/// producer whose clock runs ahead. The real stages, no Kafka: what a normalize stage writes is
/// what the aggregate stage reads, in the order the topic would hold it.
@Suite("originals: only where a hit can be too late")
struct OriginalRuleTests {
    static let minute: Int64 = 60_000
    /// The clock when the tests begin, a minute boundary.
    static let start: Int64 = 1_795_300_000_000 - 1_795_300_000_000 % 60_000
    /// Windows of a minute, kept a minute for corrections, sources idle after 30 s: the
    /// normalize stage's allowance is then 30 s.
    static let window = WindowConfig(size: minute, grace: 0, retention: minute, idleTimeout: 30_000)
    static let rule = OriginalRule(window: window)

    @Test("the decision: a hit carries its original exactly when its window's end plus the retention is at or before the writer's clock plus the allowance (the idle timeout or half the retention, whichever is longer); absurd times do not trap")
    func decision() {
        #expect(Self.rule.delayAllowance == 30_000)
        #expect(OriginalRule(window: WindowConfig()).delayAllowance == 30 * Self.minute, "half of the default hour's retention")
        let clock = Self.start + 10 * Self.minute
        // A hit in the window [start + 8 min, start + 9 min) expires at start + 10 min.
        let expiring = Self.start + 8 * Self.minute + 5_000
        #expect(Self.rule.carries(eventTime: expiring, writerClock: clock - 30_000), "expiry at the clock plus the allowance")
        #expect(!Self.rule.carries(eventTime: expiring, writerClock: clock - 30_001), "one ms short of it")
        #expect(Self.rule.carries(eventTime: Self.start, writerClock: clock), "long past its retention")
        #expect(!Self.rule.carries(eventTime: clock, writerClock: clock), "a hit of now")
        #expect(!Self.rule.carries(eventTime: clock + Self.minute, writerClock: clock), "a device clock ahead")
        #expect(Self.rule.carries(eventTime: .min, writerClock: clock))
        #expect(!Self.rule.carries(eventTime: .max, writerClock: clock))
        #expect(Self.rule.carries(eventTime: 0, writerClock: .max))
    }

    @Test("the batch's threshold (firstUncarried) decides as carries does, hit by hit: around where it turns, for one size and several, at absurd clocks and times")
    func thresholdMatchesTheRule() {
        let rules = [
            Self.rule, OriginalRule(window: WindowConfig()),
            OriginalRule(windowSizes: [Self.minute, 5 * Self.minute, 60 * Self.minute], retention: 7 * Self.minute, delayAllowance: 1),
            OriginalRule(windowSizes: [1], retention: 0, delayAllowance: 0),
            OriginalRule(windowSizes: [Self.minute], retention: .max, delayAllowance: .max),
        ]
        let clocks: [Int64] = [Self.start, Self.start + 1, Self.start - 29_999, 0, -1, .min, .max, .min + 1, .max - 1]
        for rule in rules {
            for clock in clocks {
                let threshold = rule.firstUncarried(writerClock: clock)
                var times: [Int64] = [.min, .min + 1, -1, 0, 1, .max - 1, .max, clock, Self.start]
                if let threshold { times += [-2, -1, 0, 1, 2].map { threshold &+ $0 } }
                times += (-130...130).map { clock &+ Int64($0) * 1_000 }
                for time in times {
                    #expect(
                        (threshold.map { time < $0 } ?? true) == rule.carries(eventTime: time, writerClock: clock),
                        "\(rule) clock \(clock) time \(time) threshold \(String(describing: threshold))")
                }
            }
        }
    }

    /// Normalize stages writing to one repartition partition, and the aggregate task reading it,
    /// with the log in between: records land in the order they are sent.
    struct Shuffle {
        let arena = RecordArena()
        var log: [RecordingSink.Sent] = []
        var read = 0
        var aggregate: AggregateStage<RepartitionInput>
        var out = RecordingSink()

        init(window: WindowConfig = OriginalRuleTests.window) throws {
            aggregate = AggregateStage(sourceTopic: "hits", input: RepartitionInput(partitionCount: 1), window: window, shards: 1)
            try aggregate.assignEmpty([PartitionStart(partition: 0)], now: 0)
        }

        static func normalize(sources: Int = 2, window: WindowConfig = OriginalRuleTests.window) -> NormalizeStage {
            NormalizeStage(
                inputTopic: "hits", sourcePartitions: sources, repartitionPartitions: 1, limits: NormalizerLimits(), maxFutureSkew: 3_600_000,
                idleTimeout: window.idleTimeout, markInterval: 100, originals: OriginalRule(window: window))
        }

        /// `stage` reads `hits` (partition, offset, event time, and a Kafka timestamp, the event
        /// time by default) at `clock`.
        mutating func write(
            _ stage: inout NormalizeStage, _ hits: [(partition: Int32, offset: Int64, time: Int64, timestamp: Int64?)], at clock: Int64
        ) throws {
            var sink = RecordingSink()
            let records = hits.map {
                arena.record(
                    partition: $0.partition, offset: $0.offset, key: Array("key-\($0.partition)-\($0.offset)".utf8),
                    value: rawHit("d1", "b\($0.partition)-\($0.offset)", at: $0.time), timestamp: $0.timestamp ?? $0.time)
            }
            try stage.process(records, now: clock, into: &sink)
            log += sink.to(.repartition)
        }

        /// `stage`'s marks at `clock`.
        mutating func tick(_ stage: inout NormalizeStage, at clock: Int64) throws {
            var sink = RecordingSink()
            try stage.tick(now: clock, into: &sink)
            log += sink.to(.repartition)
        }

        /// The aggregate task reads what it has not read, in one batch, at its own wall clock
        /// `now`, then commits (sending what it held).
        mutating func readAll(now: Int64) throws {
            guard read < log.count else { return }
            let records = log[read...].enumerated().map { arena.record($0.element, offset: Int64(read + $0.offset)) }
            read = log.count
            try aggregate.process(records, now: now, into: &out)
            try aggregate.commitAll(now: now, into: &out)
        }

        /// The too_late letters: (source offset, whether it carries the message as it arrived).
        var late: [(partition: String?, offset: String?, original: Bool)] {
            out.to(.deadLetter).filter { $0.header[DeadLetter.Header.reason] == "too_late" }.map {
                (
                    $0.header[DeadLetter.Header.sourcePartition], $0.header[DeadLetter.Header.sourceOffset],
                    $0.header[DeadLetter.Header.normalized] == nil && $0.keyText?.hasPrefix("key-") == true
                )
            }
        }

        /// Whether the events written carry an original, by source position.
        func carried() throws -> [String: Bool] {
            var result: [String: Bool] = [:]
            for record in log {
                try record.value!.withUnsafeBytes { raw in
                    guard case .events(let events) = try RepartitionRecord.decode(raw) else { return }
                    for event in events.events { result["\(event.sourcePartition)@\(event.sourceOffset)"] = event.original != nil }
                }
            }
            return result
        }
    }

    @Test("the first record a new task reads: a hit just past the rule travels without its original and is counted, the one at the rule's edge carries it; neither is too late")
    func firstRecord() throws {
        var shuffle = try Shuffle()
        var upstream = Shuffle.normalize(sources: 1)
        try upstream.assignEmpty([PartitionStart(partition: 0)], now: Self.start)
        let clock = Self.start + 10 * Self.minute
        // Hits of the window expiring at `clock`: written 30 s before it (the allowance), and
        // one ms earlier than that.
        try shuffle.write(&upstream, [(0, 0, Self.start + 8 * Self.minute, nil)], at: clock - 30_001)
        try shuffle.write(&upstream, [(0, 1, Self.start + 8 * Self.minute + 1, nil)], at: clock - 30_000)
        #expect(try shuffle.carried() == ["0@0": false, "0@1": true])
        try shuffle.readAll(now: clock)
        #expect(shuffle.late.isEmpty, "the task's horizon is below the writer's clock: nothing of its first record is late")
    }

    @Test("a source back from idle: while it was quiet the other source's event time moved on, and of its old hits exactly those that are too late carry their originals and come out as they arrived")
    func backFromIdle() throws {
        var shuffle = try Shuffle()
        var quiet = Shuffle.normalize()
        try quiet.assignEmpty([PartitionStart(partition: 0)], now: Self.start)
        var busy = Shuffle.normalize()
        try busy.assignEmpty([PartitionStart(partition: 1)], now: Self.start)
        try shuffle.write(&quiet, [(0, 0, Self.start + 10_000, nil)], at: Self.start + 11_000)
        // Source 0 goes quiet; source 1 delivers for ten minutes, with source 0 said idle.
        for minute in 1...10 {
            let clock = Self.start + Int64(minute) * Self.minute
            try shuffle.write(&busy, [(1, Int64(minute), clock - 1_000, nil)], at: clock)
            try shuffle.tick(&quiet, at: clock)
            try shuffle.readAll(now: clock)
        }
        let back = Self.start + 10 * Self.minute + 1_000
        // Back, with a hit far too late, one whose window expired at its writer's clock, and
        // fresh ones.
        try shuffle.write(
            &quiet,
            [(0, 1, Self.start + 20_000, nil), (0, 2, back - 3 * Self.minute, nil), (0, 3, back - 20_000, nil), (0, 4, back - 1_000, nil)],
            at: back)
        try shuffle.readAll(now: back)
        let carried = try shuffle.carried()
        #expect(carried["0@1"] == true && carried["0@2"] == true && carried["0@3"] == false && carried["0@4"] == false)
        let late = shuffle.late
        #expect(late.map(\.offset) == ["1", "2"], "the task's event time had reached the busy source's, nine minutes on: \(late)")
        #expect(late.allSatisfy { $0.original }, "every too_late letter is the message as it arrived: \(late)")
    }

    @Test("a partition taken over from a crashed reader: the new reader starts from the commit, and what it sends again and anew is judged with its originals wherever it is too late")
    func takeover() throws {
        var shuffle = try Shuffle()
        var first = Shuffle.normalize(sources: 1)
        try first.assignEmpty([PartitionStart(partition: 0)], now: Self.start)
        try shuffle.write(&first, [(0, 0, Self.start + 5 * Self.minute, nil), (0, 1, Self.start + 5 * Self.minute + 1, nil)], at: Self.start + 5 * Self.minute + 2)
        let commit = try #require(first.commitPoints()[0])
        // The first reader sends more, then dies before committing it.
        try shuffle.write(&first, [(0, 2, Self.start + 9 * Self.minute, nil), (0, 3, Self.start + 9 * Self.minute + 1, nil)], at: Self.start + 9 * Self.minute + 2)
        try shuffle.readAll(now: Self.start + 9 * Self.minute + 2)
        // Its successor goes on from the commit much later: offsets 2 and 3 again, then old hits.
        let later = Self.start + 60 * Self.minute
        var second = Shuffle.normalize(sources: 1)
        try second.assignEmpty([PartitionStart(partition: 0, committedOffset: commit.offset, metadata: commit.metadata, logStart: 0)], now: later)
        try shuffle.write(
            &second,
            [
                (0, 2, Self.start + 9 * Self.minute, nil), (0, 3, Self.start + 9 * Self.minute + 1, nil), (0, 4, Self.start + 7 * Self.minute, nil),
                (0, 5, later - 10_000, nil),
            ], at: later)
        try shuffle.readAll(now: later)
        let report = shuffle.aggregate.drainReport().accounting
        #expect(report.duplicates == 2, "what the first reader had sent is dropped as copies, never too late")
        #expect(shuffle.late.map(\.offset) == ["4"] && shuffle.late.allSatisfy { $0.original }, "\(shuffle.late)")
        #expect(report.lateWithoutOriginal == 0)
    }

    @Test("a backlog of the repartition topic read hours after it was written, record by record, and a task whose reading stalled for an hour: the same verdicts and letters as read live, every too_late letter with its original")
    func backlogReadLater() throws {
        enum Reading { case live, hoursLater, recordByRecord }
        func run(_ reading: Reading) throws -> (late: [String], counts: [String]) {
            let lag: Int64 = reading == .live ? 0 : 5 * 3_600_000
            var shuffle = try Shuffle()
            var stages = [Shuffle.normalize(), Shuffle.normalize()]
            try stages[0].assignEmpty([PartitionStart(partition: 0)], now: Self.start)
            try stages[1].assignEmpty([PartitionStart(partition: 1)], now: Self.start)
            var offsets: [Int64] = [0, 0]
            for second in stride(from: Int64(10), through: 600, by: 10) {
                let clock = Self.start + second * 1_000
                // Source 0 falls silent for two minutes in the middle; now and then a hit is
                // two minutes old, and some of those are late.
                for source in 0..<2 where !(source == 0 && (200...320).contains(second)) {
                    let time = second % 70 == 0 ? clock - 2 * Self.minute - 5_000 : clock - 500
                    try shuffle.write(&stages[source], [(Int32(source), offsets[source], time, nil)], at: clock)
                    offsets[source] += 1
                }
                for source in 0..<2 { try shuffle.tick(&stages[source], at: clock + 1) }
                switch reading {
                case .live, .hoursLater: try shuffle.readAll(now: clock + 2 + lag)
                case .recordByRecord: break
                }
            }
            if reading == .recordByRecord {
                let log = shuffle.log
                shuffle.log = []
                for record in log {
                    shuffle.log.append(record)
                    try shuffle.readAll(now: Self.start + 601_000 + lag)
                }
            }
            // A stalled task: its wall clock runs on for an hour without reading anything.
            try shuffle.aggregate.tick(now: Self.start + 601_000 + lag + 3_600_000, into: &shuffle.out)
            try shuffle.aggregate.finish(now: Self.start + 700_000 + lag, into: &shuffle.out)
            try shuffle.aggregate.commitAll(now: Self.start + 700_000 + lag, into: &shuffle.out)
            #expect(shuffle.late.allSatisfy { $0.original }, "every too_late letter is the message as it arrived: \(shuffle.late)")
            #expect(shuffle.aggregate.drainReport().accounting.lateWithoutOriginal == 0)
            let counts = shuffle.out.to(.output).map { String(decoding: $0.value!, as: UTF8.self) }
            return (shuffle.late.map { "\($0.partition ?? "")@\($0.offset ?? "")" }, counts)
        }
        let live = try run(.live)
        #expect(!live.late.isEmpty, "some hits are late")
        let hoursLater = try run(.hoursLater)
        #expect(hoursLater.late == live.late && hoursLater.counts == live.counts, "the wall clock of the reader plays no part")
        let recordByRecord = try run(.recordByRecord)
        #expect(!recordByRecord.late.isEmpty)
    }

    @Test("the last record of a bounded run: its hits are judged before the final marks move event time on, so one that does not carry its original is counted")
    func lastRecord() throws {
        var shuffle = try Shuffle()
        var upstream = Shuffle.normalize(sources: 1)
        try upstream.assignEmpty([PartitionStart(partition: 0)], now: Self.start)
        try shuffle.write(&upstream, [(0, 0, Self.start + 5 * Self.minute, nil)], at: Self.start + 5 * Self.minute)
        // The last record: a hit whose window expires 31 s after its writer's clock.
        let clock = Self.start + 8 * Self.minute
        try shuffle.readAll(now: Self.start + 5 * Self.minute)
        try shuffle.write(&upstream, [(0, 1, clock - Self.minute + 1_000, nil)], at: clock)
        var sink = RecordingSink()
        try upstream.finish(now: clock + 10 * Self.minute, into: &sink)
        shuffle.log += sink.to(.repartition)
        try shuffle.readAll(now: clock)
        try shuffle.aggregate.finish(now: clock, into: &shuffle.out)
        try shuffle.aggregate.commitAll(now: clock, into: &shuffle.out)
        #expect(try shuffle.carried()["0@1"] == false)
        #expect(shuffle.late.isEmpty)
        let counted = shuffle.aggregate.drainReport().accounting
        #expect(counted.accepted == 2 && counted.deadLetteredTotal == 0)
    }

    @Test("a producer whose clock runs an hour ahead: its timestamps move no source's event time past the normalize stage's clock, so the other source's hits are not made late, and nothing too late lacks its original")
    func producerClockAhead() throws {
        var shuffle = try Shuffle()
        var upstream = Shuffle.normalize()
        try upstream.assignEmpty([PartitionStart(partition: 0), PartitionStart(partition: 1)], now: Self.start)
        let clock = Self.start + 10 * Self.minute
        // Source 0's producer stamps its records an hour ahead (its hits carry no time of their own).
        try shuffle.write(&upstream, [(0, 0, clock + 60 * Self.minute, clock + 60 * Self.minute)], at: clock)
        try shuffle.write(&upstream, [(1, 0, clock - 5_000, nil)], at: clock + 1_000)
        try shuffle.readAll(now: clock + 1_000)
        let marks = try #require(upstream.commitPoints()[0].flatMap { SourceCheckpoint(decoding: $0.metadata) })
        #expect(marks.progress == clock, "no further than the stage's clock")
        try shuffle.write(&upstream, [(0, 1, clock + 59 * Self.minute, clock + 60 * Self.minute), (1, 1, clock - 20_000, nil)], at: clock + 2_000)
        try shuffle.readAll(now: clock + 2_000)
        #expect(shuffle.late.isEmpty, "\(shuffle.late)")
    }

    // MARK: Beyond the rule's assumptions: the hit as normalized, saying why, counted

    /// A letter that carries the hit as normalized: (its value as text, its detail).
    static func normalizedLetters(_ shuffle: Shuffle) -> [(value: String, detail: String)] {
        shuffle.out.to(.deadLetter).filter { $0.header[DeadLetter.Header.normalized] == "true" }.map {
            (String(decoding: $0.value ?? [], as: UTF8.self), $0.header[DeadLetter.Header.detail] ?? "")
        }
    }

    @Test("the memory cap evicts a window early, which no writer can foresee: a later hit of it that crossed without its original is dead-lettered as trackpipe normalized it, saying so and why, and counted")
    func capacityEviction() throws {
        let capped = WindowConfig(size: Self.minute, grace: 0, retention: Self.minute, idleTimeout: 30_000, maxEntries: 10)
        var shuffle = try Shuffle(window: capped)
        var upstream = Shuffle.normalize(sources: 1, window: capped)
        try upstream.assignEmpty([PartitionStart(partition: 0)], now: Self.start)
        // Before the window of minute 1 expires (3:00), by more than the allowance.
        let clock = Self.start + 2 * Self.minute + 20_000
        // Twelve recipients in the window of minute 1, then twelve in minute 2: the cap (10)
        // evicts minute 1 while it is still open.
        try shuffle.write(&upstream, (0..<12).map { (0, Int64($0), Self.start + Self.minute + Int64($0), nil) }, at: clock)
        try shuffle.readAll(now: clock)
        try shuffle.write(&upstream, (12..<24).map { (0, Int64($0), Self.start + 2 * Self.minute + Int64($0), nil) }, at: clock)
        try shuffle.readAll(now: clock)
        // A hit of minute 1 that no clock made late: it travelled without its original.
        try shuffle.write(&upstream, [(0, 24, Self.start + Self.minute + 500, nil)], at: clock)
        #expect(try shuffle.carried()["0@24"] == false)
        try shuffle.readAll(now: clock)
        let letters = Self.normalizedLetters(shuffle)
        try #require(letters.count == 1, "\(shuffle.out.to(.deadLetter).map(\.header))")
        #expect(letters[0].value.contains("\"deliveryId\":\"d1\"") && letters[0].value.contains("\"broadlogId\":\"b0-24\""), "\(letters[0].value)")
        #expect(letters[0].detail.hasPrefix("too_late: ") && letters[0].detail.contains("--max-entries"), "\(letters[0].detail)")
        #expect(shuffle.out.to(.deadLetter).last?.key == nil, "no key: the original's was not carried")
        #expect(shuffle.aggregate.drainReport().accounting.lateWithoutOriginal == 1)
    }

    @Test("a record overtaken by another writer's for longer than the allowance (its writer's connection stalled, say): its source went idle at the task, whose event time moved on past a hit that crossed without its original; the letter says the record was overtaken")
    func overtakenRecord() throws {
        var shuffle = try Shuffle()
        var slow = Shuffle.normalize()
        try slow.assignEmpty([PartitionStart(partition: 0)], now: Self.start)
        var fast = Shuffle.normalize()
        try fast.assignEmpty([PartitionStart(partition: 1)], now: Self.start)
        try shuffle.write(&slow, [(0, 0, Self.start + 1_000, nil)], at: Self.start + 2_000)
        try shuffle.write(&fast, [(1, 0, Self.start + 1_000, nil)], at: Self.start + 2_000)
        try shuffle.readAll(now: Self.start + 2_000)
        // The slow writer's next record: a hit whose window expires at 2:00, written at 1:20
        // (so 10 s beyond its allowance of 30 s: no original) ...
        var held = shuffle
        held.log = []
        try held.write(&slow, [(0, 1, Self.start + Self.minute + 5_000, nil)], at: Self.start + 80_000)
        // ... reaches the topic only after three minutes of the fast writer's records.
        for second in stride(from: Int64(90), through: 270, by: 10) {
            try shuffle.write(&fast, [(1, second, Self.start + second * 1_000 - 500, nil)], at: Self.start + second * 1_000)
        }
        try shuffle.readAll(now: Self.start + 280_000)
        shuffle.log += held.log
        try shuffle.readAll(now: Self.start + 280_000)
        let letters = Self.normalizedLetters(shuffle)
        try #require(letters.count == 1, "\(shuffle.late)")
        #expect(letters[0].detail.contains("read when the writers' clocks had gone past its window's end plus the retention"), "\(letters[0].detail)")
        #expect(shuffle.aggregate.drainReport().accounting.lateWithoutOriginal == 1)
    }
}
