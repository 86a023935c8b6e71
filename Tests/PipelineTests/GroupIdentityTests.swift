import Kafka
@testable import Pipeline
@testable import RecordFormats
@testable import Runner
import Testing
import TrackingDomain
import Windowing

/// One group is one pipeline (`GroupIdentity`): what each stage's commit records of it, and the
/// judge (`GroupIdentity.judge`): how a difference is found and said, at start-up as at an
/// assignment or a read by the stages. No Kafka.
@Suite("What a group is fixed to")
struct GroupIdentityTests {
    static let minute: Int64 = 60_000
    /// As a commit records it: without its input topic.
    static let g1 = GroupIdentity(group: "g1", inputTopic: nil, windowSizes: [minute], repartitionTopic: "g1-repartition", stateTopic: "g1-state")
    /// As a run reading `hits` asks for it.
    static let g1OnHits = reading(g1)

    static func reading(_ identity: GroupIdentity, input: String = "hits") -> GroupIdentity {
        var reading = identity
        reading.inputTopic = input
        return reading
    }

    // MARK: In the commits

    @Test("both stages' checkpoints carry the identity, exactly as written, and read it back; either mode")
    func codec() throws {
        let two = Checkpoint(evictedBefore: 5, processedMark: 6, changelog: 7, changelogSince: 1, identity: Self.g1)
        #expect(two.encoded == "trackpipe/5 evicted=5 processed=6 changelog=7 since=1 window=60000 stages=2 repartition=g1-repartition state=g1-state")
        #expect(Checkpoint(decoding: two.encoded, group: "g1") == two)
        let one = Checkpoint(
            evictedBefore: 5, processedMark: 6, changelog: 7,
            identity: GroupIdentity(group: "g1", inputTopic: nil, windowSizes: [300_000], repartitionTopic: nil, stateTopic: "s"))
        #expect(one.encoded == "trackpipe/5 evicted=5 processed=6 changelog=7 since=0 window=300000 stages=1 state=s")
        #expect(Checkpoint(decoding: one.encoded, group: "g1") == one)
        // The group and the input are not written: the group is the one the commit is under.
        let source = SourceCheckpoint(epoch: 2, progress: 1_000, identity: Self.g1OnHits)
        #expect(source.encoded == "trackpipe/source/2 epoch=2 progress=1000 window=60000 stages=2 repartition=g1-repartition state=g1-state")
        #expect(SourceCheckpoint(decoding: source.encoded, group: "g1") == SourceCheckpoint(epoch: 2, progress: 1_000, identity: Self.g1))
        let quiet = SourceCheckpoint(epoch: 0, identity: Self.g1)
        #expect(SourceCheckpoint(decoding: quiet.encoded, group: "g1") == quiet && quiet.progress == nil)
        #expect(GroupIdentity.recorded(in: two.encoded, group: "g1") == Self.g1 && GroupIdentity.recorded(in: source.encoded, group: "g1") == Self.g1)
        #expect(GroupIdentity.recorded(in: two.encoded, group: "g2")?.group == "g2")
        #expect(GroupIdentity.recorded(in: one.encoded, group: "g1")?.repartitionTopic == nil)
        #expect(GroupIdentity.recorded(in: nil, group: "g1") == nil && GroupIdentity.recorded(in: "streams-app v3", group: "g1") == nil)
    }

    @Test("an identity missing a field, or whose fields contradict each other, is no checkpoint", arguments: [
        "window=60000 stages=2 repartition=r", "stages=2 repartition=r state=s", "window=60000 stages=1 repartition=r state=s",
        "window=60000 stages=2 state=s", "window=60000 stages=3 state=s", "window=60000 state=s", "window=1m stages=1 state=s",
        "window=60000 stages=1 state=", "window=60000 stages=2 repartition= state=s",
    ])
    func malformedIdentity(_ fields: String) {
        #expect(Checkpoint(decoding: "trackpipe/5 evicted=1 processed=2 changelog=3 since=0 \(fields)", group: "g1") == nil)
        #expect(SourceCheckpoint(decoding: "trackpipe/source/2 epoch=0 \(fields)", group: "g1") == nil)
    }

    @Test("a checkpoint of another version is not read, and is told apart from another tool's metadata")
    func otherVersions() {
        for old in ["trackpipe/source epoch=0", "trackpipe/source epoch=3 progress=17", "trackpipe/source/1 epoch=0", "trackpipe/source/3 epoch=0 window=60000"] {
            #expect(SourceCheckpoint(decoding: old) == nil, "\(old)")
            #expect(SourceCheckpoint.otherVersion(of: old) == String(old.prefix { $0 != " " }), "\(old)")
            #expect(GroupIdentity.recorded(in: old, group: "g1") == nil)
        }
        let four = "trackpipe/4 evicted=1 processed=2 changelog=3 since=0 window=60000"
        #expect(Checkpoint(decoding: four) == nil && Checkpoint.otherVersion(of: four) == "trackpipe/4")
        #expect(SourceCheckpoint.otherVersion(of: four) == nil && Checkpoint.otherVersion(of: "trackpipe/source epoch=0") == nil)
        let current = SourceCheckpoint(epoch: 0, identity: Self.g1).encoded
        #expect(SourceCheckpoint.otherVersion(of: current) == nil && SourceCheckpoint.otherVersion(of: "streams-app v3") == nil)
        #expect(SourceCheckpoint(decoding: "trackpipe/source/2 epoch=0 progress=soon window=60000 stages=2 repartition=r state=s") == nil)
    }

    @Test("the topic names take room from the duplicate floors: a checkpoint that would not fit Kafka's commit metadata is caught before the run")
    func checkpointFits() {
        let usual = GroupIdentity(
            group: "trackpipe", inputTopic: nil, windowSizes: [Self.minute], repartitionTopic: "trackpipe-repartition", stateTopic: "trackpipe-state")
        #expect(Checkpoint.fits(sourcePartitions: Checkpoint.maxSourcePartitions, identity: usual), "400 partitions under usual names")
        #expect(!Checkpoint.fits(sourcePartitions: Checkpoint.maxSourcePartitions + 1, identity: usual))
        let long = GroupIdentity(
            group: "g1", inputTopic: nil, windowSizes: [7 * 24 * 3_600_000], repartitionTopic: String(repeating: "r", count: 249),
            stateTopic: String(repeating: "s", count: 249))
        #expect(!Checkpoint.fits(sourcePartitions: Checkpoint.maxSourcePartitions, identity: long))
        let most = (0...Checkpoint.maxSourcePartitions).last { Checkpoint.fits(sourcePartitions: $0, identity: long) }!
        #expect(most == 354, "names of Kafka's longest leave \(most) partitions (docs/scale-out.md says 354)")
        let thirty = String(repeating: "g", count: 30)
        #expect(
            Checkpoint.fits(
                sourcePartitions: 400,
                identity: GroupIdentity(
                    group: thirty, inputTopic: nil, windowSizes: [Self.minute], repartitionTopic: "\(thirty)-repartition", stateTopic: "\(thirty)-state")))
        // What `fits` promises: any checkpoint of that many partitions, offsets below 2^42.
        let seen = Dictionary(uniqueKeysWithValues: (0..<Int32(most)).map { ($0, SourceFloor(incarnation: .max, offset: (1 << 42) - 2)) })
        let widest = Checkpoint(evictedBefore: .min, processedMark: .max, seen: seen, changelog: .max, changelogSince: .max, identity: long)
        #expect(widest.encoded.utf8.count <= Checkpoint.maxEncodedBytes && Checkpoint(decoding: widest.encoded, group: "g1") == widest)
    }

    // MARK: Differences and what a refusal says

    @Test("a difference in each setting is found alone; another mode is one difference, not also another repartition topic")
    func differences() {
        var other = Self.g1
        #expect(Self.g1.differences(from: other).isEmpty)
        other.windowSizes = [5 * Self.minute]
        #expect(Self.g1.differences(from: other) == [.window])
        other = Self.g1
        other.repartitionTopic = "g1-rep2"
        #expect(Self.g1.differences(from: other) == [.repartitionTopic])
        other = Self.g1
        other.stateTopic = "g1-state2"
        #expect(Self.g1.differences(from: other) == [.stateTopic])
        other = Self.g1
        other.repartitionTopic = nil
        #expect(Self.g1.differences(from: other) == [.inputKeyedByDelivery] && other.differences(from: Self.g1) == [.inputKeyedByDelivery])
        other = GroupIdentity(group: "g1", inputTopic: nil, windowSizes: [5 * Self.minute], repartitionTopic: "g1-rep2", stateTopic: "g1-state2")
        #expect(Self.g1.differences(from: other) == [.window, .repartitionTopic, .stateTopic])
    }

    struct Case: Sendable, CustomStringConvertible {
        var recorded: GroupIdentity
        var asked: GroupIdentity
        var given: GivenSetting?
        var setting: GroupIdentity.Setting
        /// What the refusal must say of the run's side, and of the way back.
        var says: [String]
        var never: [String] = []
        var description: String { "\(setting.rawValue) \(given.map { "\($0.source)" } ?? "not given")" }
    }

    static let cases: [Case] = {
        var five = g1
        five.windowSizes = [5 * minute]
        var rep2 = g1
        rep2.repartitionTopic = "g1-rep2"
        var state2 = g1
        state2.stateTopic = "g1-state2"
        var one = g1
        one.repartitionTopic = nil
        var shuffled = g1
        shuffled.repartitionTopic = "shuffle"
        return [
            Case(
                recorded: g1, asked: five, given: GivenSetting(flag: "window", text: "5m", source: .commandLine), setting: .window,
                says: ["it counts windows of 1m and this run asks for --window 5m", "(--window 1m)"]),
            Case(
                recorded: g1, asked: five, given: GivenSetting(flag: "window", text: "300s", source: .environment), setting: .window,
                says: ["it counts windows of 1m and this run asks for TRACKPIPE_WINDOW=300s", "(TRACKPIPE_WINDOW=1m)"], never: ["--window"]),
            Case(
                recorded: five, asked: g1, given: GivenSetting(flag: "window", text: "1m", source: .defaultValue), setting: .window,
                says: ["it counts windows of 5m and this run asks for --window (default 1m)", "(--window 5m)"]),
            Case(recorded: g1, asked: five, given: nil, setting: .window, says: ["this run asks for windows of 5m", "(--window 1m)"]),
            Case(
                recorded: g1, asked: rep2, given: GivenSetting(flag: "repartition-topic", text: "g1-rep2", source: .commandLine),
                setting: .repartitionTopic,
                says: ["its repartition topic is g1-repartition and this run asks for --repartition-topic g1-rep2", "(--repartition-topic g1-repartition)"]),
            Case(
                recorded: g1, asked: rep2, given: GivenSetting(flag: "repartition-topic", text: "g1-rep2", source: .environment),
                setting: .repartitionTopic,
                says: ["this run asks for TRACKPIPE_REPARTITION_TOPIC=g1-rep2", "(TRACKPIPE_REPARTITION_TOPIC=g1-repartition)"],
                never: ["--repartition-topic"]),
            Case(
                recorded: shuffled, asked: g1, given: GivenSetting(flag: "repartition-topic", text: "g1-repartition", source: .defaultValue),
                setting: .repartitionTopic,
                says: ["its repartition topic is shuffle and this run asks for --repartition-topic (default g1-repartition)", "(--repartition-topic shuffle)"]),
            Case(recorded: g1, asked: rep2, given: nil, setting: .repartitionTopic, says: ["this run asks for g1-rep2", "(--repartition-topic g1-repartition)"]),
            Case(
                recorded: g1, asked: state2, given: GivenSetting(flag: "state-topic", text: "g1-state2", source: .commandLine), setting: .stateTopic,
                says: ["its state topic is g1-state and this run asks for --state-topic g1-state2", "(--state-topic g1-state)"]),
            Case(
                recorded: g1, asked: state2, given: GivenSetting(flag: "state-topic", text: "g1-state2", source: .environment), setting: .stateTopic,
                says: ["this run asks for TRACKPIPE_STATE_TOPIC=g1-state2", "(TRACKPIPE_STATE_TOPIC=g1-state)"], never: ["--state-topic"]),
            Case(
                recorded: state2, asked: g1, given: GivenSetting(flag: "state-topic", text: "g1-state", source: .defaultValue), setting: .stateTopic,
                says: ["its state topic is g1-state2 and this run asks for --state-topic (default g1-state)", "(--state-topic g1-state2)"]),
            Case(recorded: g1, asked: state2, given: nil, setting: .stateTopic, says: ["this run asks for g1-state2", "(--state-topic g1-state)"]),
            Case(
                recorded: g1, asked: one, given: GivenSetting(flag: "input-keyed-by-delivery", text: "", source: .commandLine),
                setting: .inputKeyedByDelivery,
                says: [
                    "it runs two stages (its repartition topic is g1-repartition) and this run asks for one stage (--input-keyed-by-delivery)",
                    "(no --input-keyed-by-delivery with --repartition-topic g1-repartition)",
                ]),
            Case(
                recorded: g1, asked: one, given: GivenSetting(flag: "input-keyed-by-delivery", text: "yes", source: .environment),
                setting: .inputKeyedByDelivery,
                says: ["this run asks for one stage (TRACKPIPE_INPUT_KEYED_BY_DELIVERY=yes)", "(TRACKPIPE_INPUT_KEYED_BY_DELIVERY=false with"]),
            Case(
                recorded: one, asked: g1, given: GivenSetting(flag: "input-keyed-by-delivery", text: "false", source: .defaultValue),
                setting: .inputKeyedByDelivery,
                says: [
                    "it runs one stage (--input-keyed-by-delivery) and this run asks for two stages (no --input-keyed-by-delivery)",
                    "(--input-keyed-by-delivery)",
                ]),
            Case(
                recorded: one, asked: g1, given: GivenSetting(flag: "input-keyed-by-delivery", text: "off", source: .environment),
                setting: .inputKeyedByDelivery,
                says: ["this run asks for two stages (TRACKPIPE_INPUT_KEYED_BY_DELIVERY=off)", "(TRACKPIPE_INPUT_KEYED_BY_DELIVERY=true)"]),
            Case(recorded: g1, asked: one, given: nil, setting: .inputKeyedByDelivery, says: ["this run asks for one stage (--input-keyed-by-delivery)"]),
        ]
    }()

    /// The judge's refusal; nil when it lets the run resume.
    static func refusal(_ judgement: GroupIdentity.Judgement) -> PipelineError? {
        guard case .refuse(let refusal) = judgement else { return nil }
        return refusal
    }

    /// The group's commit on hits[3], recording `recorded`: its normalize stage's, or its one
    /// stage's.
    static func commit(recording recorded: GroupIdentity) -> GroupIdentity.Evidence {
        let metadata =
            recorded.repartitionTopic == nil
            ? Checkpoint(evictedBefore: 0, processedMark: 5, changelog: 0, identity: recorded).encoded : SourceCheckpoint(epoch: 0, identity: recorded).encoded
        return .commit(PartitionStart(partition: 3, committedOffset: 5, metadata: metadata, logStart: 0), topic: "hits")
    }

    @Test("the judge's refusal of a commit names what differs, each side, how the run was given it (flag, variable and value, default) and the way back; exit 64", arguments: cases)
    func refusalNamesEachSide(_ example: Case) throws {
        let given = example.given.map { [example.setting: $0] } ?? [:]
        let refusal = try #require(Self.refusal(Self.reading(example.asked).judge(Self.commit(recording: example.recorded), given: given)))
        let text = "\(refusal)"
        #expect(text.hasPrefix("configuration: the group g1 runs another pipeline than this run asks for (its commit on hits[3] says so): "), "\(text)")
        for phrase in example.says { #expect(text.contains(phrase), "\(phrase) in: \(text)") }
        for phrase in example.never { #expect(!text.contains(phrase), "\(phrase) in: \(text)") }
        #expect(text.contains("or run this pipeline under a new --group and a new --output-topic (a new group counts the input from its beginning)"))
        #expect(refusal.exitCode == 64)
        #expect(Self.reading(example.recorded).judge(Self.commit(recording: example.recorded), given: given) == .resume, "the same identity goes on")
    }

    @Test("several differences are each named, and the way back lists every setting")
    func severalDifferences() throws {
        let asked = GroupIdentity(group: "g1", inputTopic: "hits", windowSizes: [5 * Self.minute], repartitionTopic: "g1-rep2", stateTopic: "g1-state2")
        let given: [GroupIdentity.Setting: GivenSetting] = [
            .window: GivenSetting(flag: "window", text: "5m", source: .environment),
            .repartitionTopic: GivenSetting(flag: "repartition-topic", text: "g1-rep2", source: .commandLine),
            .stateTopic: GivenSetting(flag: "state-topic", text: "g1-state2", source: .commandLine),
        ]
        let text = "\(try #require(Self.refusal(asked.judge(Self.commit(recording: Self.g1), given: given))))"
        #expect(
            text.contains(
                "it counts windows of 1m and this run asks for TRACKPIPE_WINDOW=5m; its repartition topic is g1-repartition and this run asks for --repartition-topic g1-rep2; its state topic is g1-state and this run asks for --state-topic g1-state2."
            ), "\(text)")
        #expect(text.contains("Go back to the group's settings (TRACKPIPE_WINDOW=1m, --repartition-topic g1-repartition, --state-topic g1-state)"), "\(text)")
        #expect(!text.contains("--window 5m"))
    }

    // MARK: The stages' own refusals, at an assignment

    @Test("a normalize stage refuses a commit of another identity or of another version, and goes on from its own or another tool's")
    func normalizeStageAtAssignment() throws {
        var stage = NormalizeStage(
            sourcePartitions: 2, repartitionPartitions: 2, identity: Self.g1OnHits, limits: NormalizerLimits(), maxFutureSkew: 3_600_000,
            idleTimeout: 30_000, originals: OriginalRule(window: WindowConfig()))
        var other = Self.g1
        other.stateTopic = "g1-state2"
        for (metadata, phrase) in [
            (SourceCheckpoint(epoch: 0, identity: other).encoded, "its state topic is g1-state2 and this run asks for g1-state"),
            ("trackpipe/source epoch=4 progress=9", "another version of trackpipe, whose checkpoint (trackpipe/source)"),
            (Checkpoint(evictedBefore: 0, processedMark: 5, changelog: 0, identity: Self.g1).encoded, "carries a window checkpoint"),
        ] {
            do {
                try stage.assign([PartitionStart(partition: 0, committedOffset: 5, metadata: metadata, logStart: 0)], now: 0)
                Issue.record("adopted \(metadata)")
            } catch {
                #expect("\(error)".contains(phrase) && "\(error)".contains("--group"), "\(error)")
            }
        }
        #expect(stage.commitPoints().isEmpty)
        let own = SourceCheckpoint(epoch: 3, progress: 1_000, identity: Self.g1).encoded
        // (At a clock past it: no watermark passes the stage's clock.)
        try stage.assign([PartitionStart(partition: 0, committedOffset: 5, metadata: own, logStart: 0)], now: 2_000)
        try stage.assign([PartitionStart(partition: 1, committedOffset: 7, metadata: nil, logStart: 0)], now: 2_000)
        #expect(stage.gauges().watermark == 1_000, "its own commit's event time goes on")
    }

    @Test("a window stage refuses a commit of another identity, the normalize stage's commit and another version's, whatever the offset")
    func windowStageAtAssignment() throws {
        let window = WindowConfig(size: Self.minute)
        func stage() -> AggregateStage<RepartitionInput> {
            AggregateStage(input: RepartitionInput(partitionCount: 2, identity: Self.g1OnHits), window: window, shards: 1, identity: Self.g1OnHits)
        }
        var five = Self.g1
        five.windowSizes = [5 * Self.minute]
        var oneStage = Self.g1
        oneStage.repartitionTopic = nil
        for (metadata, offset, phrase) in [
            (Checkpoint(evictedBefore: 0, processedMark: 5, changelog: 0, identity: five).encoded, Int64(5), "it counts windows of 5m"),
            (Checkpoint(evictedBefore: 0, processedMark: 0, changelog: 0, identity: oneStage).encoded, 0, "it runs one stage"),
            (SourceCheckpoint(epoch: 0, identity: Self.g1).encoded, 5, "normalize stage"),
            ("trackpipe/4 evicted=0 processed=5 changelog=0 since=0 window=60000", 5, "another version of trackpipe"),
        ] {
            var refusing = stage()
            do {
                try refusing.assign([PartitionStart(partition: 0, committedOffset: offset, metadata: metadata, logStart: 0)], now: 0)
                Issue.record("adopted \(metadata)")
            } catch {
                #expect("\(error)".contains(phrase) && "\(error)".contains("g1-repartition[0]"), "\(error)")
            }
            #expect(refusing.ownedPartitions.isEmpty)
        }
        var going = stage()
        let own = Checkpoint(evictedBefore: 0, processedMark: 5, changelog: 0, identity: Self.g1).encoded
        try going.assign([PartitionStart(partition: 0, committedOffset: 5, metadata: own, logStart: 0)], now: 0)
        #expect(going.ownedPartitions == [0])
    }

    // MARK: Who writes an internal topic

    @Test("the judge refuses a repartition record of another group, and a task record of another group or of another input, naming the place, the setting as given and the way back (exit 64); the group's own resume")
    func judgeOfTheInternalTopics() throws {
        let g2 = GroupIdentity(group: "g2", inputTopic: "hits", windowSizes: [Self.minute], repartitionTopic: "g1-repartition", stateTopic: "g1-state")
        let given: [GroupIdentity.Setting: GivenSetting] = [
            .repartitionTopic: GivenSetting(flag: "repartition-topic", text: "g1-repartition", source: .environment),
            .stateTopic: GivenSetting(flag: "state-topic", text: "g1-state", source: .commandLine),
        ]
        var g1Task = ChangelogRecord.TaskState(processedMark: 10, evictedBefore: 0, source: Self.g1OnHits.changelogSource)
        g1Task.group = "g1"
        for (evidence, says) in [
            (GroupIdentity.Evidence.repartitionRecord(writer: "g1", partition: 2, offset: 7), [
                "the repartition topic g1-repartition holds records that group g1's normalize stage wrote (the record at offset 7 of g1-repartition[2]), and this run is group g2",
                "(TRACKPIPE_REPARTITION_TOPIC=g1-repartition now; by default it is <group>-repartition), or run it as --group g1",
            ]),
            (.stateTask(g1Task, partition: 1, offset: 40), [
                "the state topic g1-state holds the windows of group g1 (the task record at offset 40 of g1-state[1] says so), and this run is group g2",
                "(--state-topic g1-state now; by default it is <group>-state), or run it as --group g1",
            ]),
        ] {
            let refusal = try #require(Self.refusal(g2.judge(evidence, given: given)), "\(evidence)")
            for phrase in says { #expect("\(refusal)".contains(phrase), "\(phrase) in: \(refusal)") }
            #expect(refusal.exitCode == 64)
            #expect(Self.g1OnHits.judge(evidence, given: given) == .resume, "g1's own")
        }
        // g1 in one stage on another input finds its two stages' task record: another input.
        var oneStage = Self.reading(Self.g1, input: "hits-b")
        oneStage.repartitionTopic = nil
        let other = try #require(Self.refusal(oneStage.judge(.stateTask(g1Task, partition: 0, offset: 3))))
        #expect(
            "\(other)".contains(
                "the state topic g1-state holds windows group g1 counted from another input than this run's (the task record at offset 3 of g1-state[0] counts another input topic, window size or mode; this run reads hits-b in one stage)"
            ), "\(other)")
    }

    @Test("repartition records and task records name their group; a new owner never continues the line of another group's task")
    func writersNamed() throws {
        var bytes: [UInt8] = []
        let origin = RepartitionRecord.Origin(sourceTopic: "hits", sourcePartitions: 2, routedPartitions: 4, group: "g1")
        RepartitionRecord.encodeMarks([SourceMark(source: 0, watermark: 5, idle: false)], epochs: [0], origin: origin, writerClock: 10, into: &bytes)
        #expect(try bytes.withUnsafeBytes { try RepartitionRecord.origin(of: $0) } == origin)
        guard case .marks(let marks) = try bytes.withUnsafeBytes({ try RepartitionRecord.decode($0) }) else {
            Issue.record("not marks")
            return
        }
        #expect(marks.origin.group == "g1")

        let source = ChangelogRecord.source(crossesShuffle: true, inputTopic: "hits", windowSizes: [Self.minute])
        var task = ChangelogRecord.TaskState(processedMark: 10, evictedBefore: 0, lineage: 0, source: source)
        task.group = "g1"
        #expect(try ChangelogRecord.decodeTask(ChangelogRecord.encodeTask(task)) == task)
        #expect(source == Self.g1OnHits.changelogSource && source == Self.reading(Self.g1, input: "other").changelogSource)
        /// A task of `identity` that finds g1's task record last in the partition, without a commit.
        func restore(as identity: GroupIdentity) -> (TaskChangelog.Restored, lineage: Int64) {
            var changelog = TaskChangelog(identity: identity, partition: 0)
            changelog.beginRestore(.lastWritten)
            changelog.apply(offset: 0, key: ChangelogRecord.encodeKey(.task), value: ChangelogRecord.encodeTask(task))
            return (changelog.finishRestore(committedChangelog: nil), changelog.lineage)
        }
        // g1's own next owner continues it.
        let own = restore(as: Self.g1OnHits)
        #expect(own.0.task == task && own.lineage == 0)
        // A task of g2 (same input, same kind): a new line at the partition's end.
        var g2 = Self.g1OnHits
        g2.group = "g2"
        let foreign = restore(as: g2)
        #expect(foreign.0.task == nil && foreign.lineage == 1, "g2 began its own line at the partition's end")
        // A task of g1 counting windows of another size (its first owner died before it
        // committed, and the group was started again with another --window): a new line too.
        var resized = Self.g1OnHits
        resized.windowSizes = [5 * Self.minute]
        let other = restore(as: resized)
        #expect(other.0.task == nil && other.lineage == 1)
    }

    @Test("an aggregate stage that reads a record another group's normalize stage wrote stops on it (exit 64), counting nothing of it; its own group's records count")
    func recordOfAnotherGroupStops() throws {
        let arena = RecordArena()
        func shuffled(by group: String) throws -> [RecordingSink.Sent] {
            var writer = NormalizeStage(
                sourcePartitions: 1, repartitionPartitions: 1,
                identity: GroupIdentity(
                    group: group, inputTopic: "hits", windowSizes: [Self.minute], repartitionTopic: "g1-repartition", stateTopic: "\(group)-state"),
                limits: NormalizerLimits(), maxFutureSkew: 3_600_000, idleTimeout: 30_000, originals: OriginalRule(window: WindowConfig()))
            try writer.assign([PartitionStart(partition: 0)], now: 0)
            var shuffle = RecordingSink()
            try writer.process(
                [arena.record(partition: 0, offset: 0, value: rawHit("d1", "b1", at: 10 * Self.minute), timestamp: 10 * Self.minute)], now: 0,
                into: &shuffle)
            return shuffle.to(.repartition)
        }
        func reader() throws -> AggregateStage<RepartitionInput> {
            var stage = AggregateStage(
                input: RepartitionInput(partitionCount: 1, identity: Self.g1OnHits), window: WindowConfig(size: Self.minute), shards: 1,
                identity: Self.g1OnHits)
            try stage.assignEmpty([PartitionStart(partition: 0)], now: 0)
            return stage
        }
        let foreign = try shuffled(by: "g2")
        try #require(foreign.count == 1)
        var stage = try reader()
        var sink = RecordingSink()
        #expect {
            try stage.process([arena.record(foreign[0], offset: 0)], now: 0, into: &sink)
        } throws: { error in
            "\(error)".contains(
                "the repartition topic g1-repartition holds records that group g2's normalize stage wrote (the record at offset 0 of g1-repartition[0]), and this run is group g1"
            ) && PipelineError.exitCode(for: error) == 64
        }
        #expect(stage.drainReport().accounting.accepted == 0)
        var own = try reader()
        try own.process([arena.record(try shuffled(by: "g1")[0], offset: 0)], now: 0, into: &sink)
        #expect(own.drainReport().accounting.accepted == 1)
    }

    // MARK: The settings

    @Test("the internal topics' names must be Kafka topic names: they are written into commit metadata", arguments: [
        ("repartition-topic", "a b", "--repartition-topic a b: not a Kafka topic name"),
        ("state-topic", "s=1", "--state-topic s=1: not a Kafka topic name"),
        ("state-topic", String(repeating: "s", count: 250), "not a Kafka topic name"),
        ("group", "my group", "--repartition-topic (default my group-repartition): not a Kafka topic name"),
    ])
    func internalTopicNames(_ flag: String, _ value: String, _ message: String) {
        var config = PipelineConfig()
        switch flag {
        case "repartition-topic": config.repartitionTopic = value
        case "state-topic": config.stateTopic = value
        default:
            config.group = value
            config.given[.repartitionTopic] = GivenSetting(flag: "repartition-topic", text: "\(value)-repartition", source: .defaultValue)
        }
        #expect {
            try config.validate()
        } throws: { error in
            "\(error)".contains(message)
        }
        #expect(PipelineConfig.isTopicName("tracking_hits-2.v1") && !PipelineConfig.isTopicName("..") && !PipelineConfig.isTopicName(""))
    }

    @Test("the identity a run asks for follows its settings; how a setting was given defaults to its flag")
    func configIdentity() {
        var config = PipelineConfig()
        config.group = "g1"
        #expect(
            config.identity
                == GroupIdentity(group: "g1", inputTopic: "tracking-hits", windowSizes: [Self.minute], repartitionTopic: "g1-repartition", stateTopic: "g1-state"))
        config.inputKeyedByDelivery = true
        config.stateTopic = "own"
        #expect(config.identity == GroupIdentity(group: "g1", inputTopic: "tracking-hits", windowSizes: [Self.minute], repartitionTopic: nil, stateTopic: "own"))
        #expect(config.givenSetting(.stateTopic).label == "--state-topic own")
        #expect(config.givenSetting(.inputKeyedByDelivery).label == "--input-keyed-by-delivery")
        config.inputKeyedByDelivery = false
        #expect(config.givenSetting(.inputKeyedByDelivery).source == .defaultValue)
        config.given[.window] = GivenSetting(flag: "window", text: "1m", source: .environment)
        #expect(config.givenSettings[.window]?.label == "TRACKPIPE_WINDOW=1m")
    }
}

extension GroupIdentity {
    /// The identity a commit of `group` records in its metadata, a window stage's checkpoint or
    /// the normalize stage's; nil for anything else (as the judge reads it).
    fileprivate static func recorded(in metadata: String?, group: String) -> GroupIdentity? {
        Checkpoint(decoding: metadata, group: group)?.identity ?? SourceCheckpoint(decoding: metadata, group: group)?.identity
    }
}
