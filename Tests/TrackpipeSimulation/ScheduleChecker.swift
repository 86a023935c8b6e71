import Foundation
import HitGenerator
import Kafka
import Pipeline
import RecordFormats
import Runner
import TrackingDomain
import TrackpipeTestSupport

/// Judges a drained world against the generator's truth. It shares no code with the stages:
/// the reference counts come from `ReferenceAggregates` (sets and counters), the output is read
/// back as JSON, dead letters by their headers.
///
/// A schedule may hold several *generations*: after a mode switch is refused, the operator's
/// remedy (a new group, or the group's offsets reset) counts the input again from its
/// beginning, writing to the same output and dead-letter topics. Each generation is judged on
/// the input it read and on its own records and dead letters; the last one's records are what a
/// reader of the output ends up with.
///
/// The checks, per generation:
/// - **Accounting.** Every input message is counted, filtered or dead-lettered as its truth
///   says; each bad message is dead-lettered at least once; a dead letter names a real message
///   and carries its bytes; one position is never dead-lettered for two reasons (and twice only
///   after a crash). Every stage report balances. Where no stage died, the stages' totals equal
///   what was read, nothing is dropped as a copy, and every hit is judged once (with the state
///   in a changelog, a clean handover re-reads nothing).
/// - **No hit counted and dead-lettered**: the counts leave dead-lettered hits out, so such a
///   hit shows as a record above the reference.
/// - **Revisions never go down** per key, crashes or not (records go out only once the state
///   they carry is written); `strictRevisions` off counts steps back after a crash apart.
/// - **The last generation's last record per key**, and every record of its with the key's
///   highest revision, equal the reference over the hits it did not dead-letter; every reference
///   key has a record, and no other key does. An earlier generation, stopped with windows still
///   open, must never hold more than its reference in any record.
/// - **Lost input** is reported only for what retention deleted (every range reported lies below
///   its partition's log start: transaction markers and compaction holes are never lost), and
///   whenever the output lacks hits while retention deleted records (else `silent-loss`). A
///   generation that reported loss may hold fewer hits than its reference, and may miss the
///   dead letters of input retention deleted. It holds no more hits than its reference either,
///   unless its window stage behind the shuffle reported loss: a window task whose partition
///   lost records a previous owner had counted (in the state it read back) cannot learn their
///   source positions, and may count a copy an upstream sent again, or judge it too late
///   (docs/scale-out.md, "Lost input").
/// - **Strict lateness** (on request): a hit is `too_late` exactly when, on its own input
///   partition, the running maximum of min(event time, Kafka timestamp) over the hits before it
///   had reached its window's end plus the retention. Applied to lockstep schedules, to the hits
///   produced before any source could have gone idle (to every hit with
///   `strictLatenessThroughIdleness`).
struct ScheduleChecker {
    let world: World
    let strictRevisions: Bool
    let strictLateness: Bool
    /// Judge every hit by the strict rule, whatever idleness the schedule had.
    let throughIdleness: Bool
    /// Check the bound the design keeps through quiet periods (`checkQuietBound`).
    let quietBound: Bool

    struct Position: Hashable, CustomStringConvertible {
        var topic: String
        var partition: Int32
        var offset: Int64
        var description: String { "\(topic)[\(partition)]@\(offset)" }
    }

    /// What one generation made of its input.
    struct Verdicts {
        var expected: [GeneratedHit.Expected] = []
        var tooLate = Set<Position>()
        /// Every hit to count it read, dead-lettered or not, in input order.
        var hits: [(position: Position, message: ProducedMessage, hit: GeneratedHit.Expected, dead: Bool)] = []
        var messages = 0
        var counted = 0
        var filtered = 0
        var rejected: [String: Int] = [:]
    }

    func check() -> (discrepancies: [Discrepancy], stats: ScheduleStats) {
        var found: [Discrepancy] = []
        var stats = ScheduleStats()
        stats.operations = world.steps
        stats.crashes = world.crashes
        stats.stateWriteCuts = world.stateWriteCuts
        stats.topicRefusals = world.topicRefusals
        stats.topicWarnings = world.topicWarnings
        stats.mergeCuts = world.mergeCuts
        stats.rebalances = world.rebalances
        stats.generations = world.generations.count
        stats.refusals = world.refusals.count
        stats.deletedRecords = world.deleted.values.reduce(0, +)

        for problem in world.problems { found.append(Discrepancy(.runner, problem)) }
        checkPurges(stats: &stats, into: &found)
        for runner in world.allRunners {
            for problem in runner.problems { found.append(Discrepancy(.runner, problem)) }
        }

        // Dead letters, by the generation that sent them and the input position they name.
        let deadLetterLog = world.kafka.topic(World.deadLetterTopic)
        var reasons: [Int: [Position: [String]]] = [:]
        for entry in deadLetterLog.partitions[0] {
            stats.deadLetters += 1
            guard let letter = DeadLetter(headers: entry.headers) else {
                found.append(Discrepancy(.deadLetterOrigin, "a dead letter without its context headers"))
                continue
            }
            let position = Position(topic: letter.sourceTopic, partition: letter.sourcePartition, offset: letter.sourceOffset)
            guard let partitions = world.produced[letter.sourceTopic], partitions.indices.contains(Int(position.partition)),
                partitions[Int(position.partition)].indices.contains(Int(position.offset))
            else {
                found.append(Discrepancy(.deadLetterOrigin, "dead letter \(letter.reason) names \(position), which was never produced"))
                continue
            }
            let input = world.kafka.topic(position.topic)
            let original = input.entry(partition: position.partition, offset: position.offset)
            if entry.headers.contains(where: { $0.key == DeadLetter.Header.normalized }) {
                // A too_late hit that crossed the shuffle without its original: allowed only as the
                // one exception the originals rule cannot avoid (the window was evicted early by the
                // memory cap), and only carrying the hit as normalized.
                stats.lateWithoutOriginal += 1
                let produced = world.produced[letter.sourceTopic]![Int(position.partition)][Int(position.offset)]
                if let problem = Self.withoutOriginal(
                    letter, value: deadLetterLog.bytes(entry.value), fate: produced.fate, capped: world.scenario.window.maxEntries < 1_000_000)
                {
                    found.append(Discrepancy(.lateWithoutOriginal, "dead letter \(letter.reason) of \(position) \(problem)"))
                }
            } else if input.bytes(original.key) != deadLetterLog.bytes(entry.key) || input.bytes(original.value) != deadLetterLog.bytes(entry.value) {
                found.append(Discrepancy(.deadLetterOrigin, "dead letter \(letter.reason) of \(position) does not carry that message's key and value"))
            }
            reasons[entry.stamp.generation, default: [:]][position, default: []].append(letter.reason.rawValue)
        }

        // The output of each size, read back.
        let sizes = world.scenario.window.lengths
        var recordsBySize: [[OutputRecord]] = []
        for topic in World.outputTopics(world.scenario.window) {
            let outputLog = world.kafka.topic(topic)
            var records: [OutputRecord] = []
            for (index, entry) in outputLog.partitions[0].enumerated() {
                let key = outputLog.bytes(entry.key).map { String(decoding: $0, as: UTF8.self) } ?? ""
                let value = outputLog.bytes(entry.value) ?? []
                guard let revision = OutputRecord.revision(in: value) else {
                    found.append(Discrepancy(.runner, key: key, "\(topic) record \(index) has no revision"))
                    continue
                }
                records.append(OutputRecord(key: key, revision: revision, index: index, stamp: entry.stamp, value: value))
            }
            stats.outputRecords += records.count
            stats.keys += Set(records.map(\.key)).count
            recordsBySize.append(records)
        }
        // Of several sizes, when each hit was last handed to a window stage (below).
        let handedOut = sizes.count > 1 ? lastHandedOut() : [:]
        stats.sizes = sizes.count
        if let stray = reasons.keys.first(where: { number in !world.generations.contains { $0.number == number } }) {
            found.append(Discrepancy(.deadLetterOrigin, "dead letters of generation \(stray), which never ran"))
        }
        for generation in world.generations {
            let last = generation.number == world.generations.last!.number
            let lost = judgeLoss(of: generation, into: &found)
            stats.lostRanges += lost.ranges
            stats.lostAtFirstReads += lost.atFirstReads
            let verdicts = judgeMessages(of: generation, reasons: reasons[generation.number] ?? [:], lossReported: lost.ranges > 0, into: &found)
            if last {
                stats.messages = verdicts.messages
                stats.countedHits = verdicts.counted
                stats.tooLate = verdicts.tooLate.count
            }
            for (index, size) in sizes.enumerated() {
                judgeRecords(
                    recordsBySize[index].filter { $0.stamp.generation == generation.number }, of: generation, size: size,
                    largest: index == sizes.count - 1, handedOut: handedOut, last: last, verdicts: verdicts, loss: lost, stats: &stats,
                    into: &found)
            }
            if lost.ranges == 0 { judgeTotals(of: generation, verdicts: verdicts, into: &found) }
            if last, strictLateness { stats.strictLatenessChecked = checkStrictLateness(tooLate: verdicts.tooLate, into: &found) }
            if last, quietBound { stats.quietBoundChecked = checkQuietBound(tooLate: verdicts.tooLate, into: &found) }
        }
        // Across generations a key starts again from the recount's first revision: what a new
        // group does by design, counted apart.
        for records in recordsBySize {
            var lastRevision: [String: (revision: Int, generation: Int)] = [:]
            for record in records {
                if let previous = lastRevision[record.key], previous.generation != record.stamp.generation, record.revision < previous.revision {
                    stats.steppedBackAcrossGenerations += 1
                }
                lastRevision[record.key] = (record.revision, record.stamp.generation)
            }
        }
        return (found, stats)
    }

    /// What the generation's runners reported lost, in every life.
    struct Loss {
        var ranges = 0
        /// Ranges found where reading began without a commit (a new group's first delivery past
        /// its start, a window task's first read).
        var atFirstReads = 0
        /// Some was reported by the window stage behind the shuffle.
        var behindShuffle = false
    }

    /// What the generation's runners reported lost, in every life: each range must lie below its
    /// partition's log start (retention deleted it).
    private func judgeLoss(of generation: Generation, into found: inout [Discrepancy]) -> Loss {
        let tag = world.generations.count > 1 ? "generation \(generation.number): " : ""
        var reported = Loss()
        for runner in world.allRunners where runner.generation == generation.number {
            for lost in runner.lostInput {
                reported.ranges += 1
                // Found where reading began without a commit: a new group's first delivery past
                // its start, or a window task's first read.
                switch lost.cause {
                case .groupStart, .firstRead: reported.atFirstReads += 1
                case .jump, .endReached, .commitBehindLogStart: break
                }
                if runner.role == .aggregate, generation.mode == .twoStage { reported.behindShuffle = true }
                let start = world.kafka.topics[lost.partition.topic]?.start(of: lost.partition.partition) ?? 0
                let range = lost.from.map { "offsets \($0) to \(lost.to - 1)" } ?? "the offsets before \(lost.to)"
                if lost.to > start || lost.count <= 0 {
                    found.append(
                        Discrepancy(
                            .falseLoss,
                            "\(tag)\(runner.label) reported \(lost.partition) \(range) lost, but the partition begins at \(start): retention deleted nothing of it there"
                        ))
                }
            }
        }
        return reported
    }

    /// Every message the generation read, against its truth and the generation's dead letters. A
    /// generation that lost input may miss the dead letters of what retention deleted.
    private func judgeMessages(
        of generation: Generation, reasons: [Position: [String]], lossReported: Bool, into found: inout [Discrepancy]
    ) -> Verdicts {
        let window = world.scenario.window
        let tag = world.generations.count > 1 ? "generation \(generation.number): " : ""
        var verdicts = Verdicts()
        for topic in world.produced.keys.sorted() {
            for (partition, messages) in world.produced[topic]!.enumerated() {
                let scope = generation.scope(topic, partition: partition, available: messages.count)
                let deletedBelow = world.kafka.topics[topic]?.start(of: Int32(partition)) ?? 0
                for (offset, message) in messages.prefix(scope).enumerated() {
                    let position = Position(topic: topic, partition: Int32(partition), offset: Int64(offset))
                    let letters = reasons[position] ?? []
                    if case .neverDelivered = message.fate {
                        if !letters.isEmpty {
                            found.append(
                                Discrepancy(.deadLetterOrigin, "\(tag)\(position) is a transaction marker or a compacted record, yet was dead-lettered \(letters)"))
                        }
                        continue
                    }
                    verdicts.messages += 1
                    let distinct = Set(letters)
                    if distinct.count > 1 {
                        found.append(Discrepancy(.deadLetterReason, "\(tag)\(position) dead-lettered for several reasons: \(distinct.sorted())"))
                    } else if letters.count > 1, world.crashes == 0 {
                        found.append(
                            Discrepancy(.accounting, "\(tag)\(position) dead-lettered \(letters.count) times (\(letters[0])) though no stage died"))
                    }
                    switch message.fate {
                    case .rejected(let reason):
                        verdicts.rejected[reason, default: 0] += 1
                        if distinct.isEmpty {
                            if lossReported, Int64(offset) < deletedBelow { continue }
                            found.append(Discrepancy(.missingDeadLetter, "\(tag)\(position) (\(reason)) was not dead-lettered"))
                        } else if distinct != [reason] {
                            found.append(Discrepancy(.deadLetterReason, "\(tag)\(position) must be dead-lettered \(reason), got \(distinct.sorted())"))
                        }
                    case .filtered:
                        verdicts.filtered += 1
                        if !distinct.isEmpty {
                            found.append(
                                Discrepancy(.filteredDeadLettered, "\(tag)\(position) has tracking off but was dead-lettered \(distinct.sorted())"))
                        }
                    case .counted(let hit):
                        verdicts.counted += 1
                        if distinct.isEmpty {
                            verdicts.expected.append(hit)
                        } else if distinct == ["too_late"] {
                            verdicts.tooLate.insert(position)
                        } else {
                            found.append(Discrepancy(.deadLetterReason, "\(tag)\(position) is a hit to count, dead-lettered \(distinct.sorted())"))
                        }
                        verdicts.hits.append((position, message, hit, !distinct.isEmpty))
                    case .neverDelivered:
                        break
                    }
                }
            }
        }
        return verdicts
    }

    /// The generation's records of one size: revisions per key, and against the size's own
    /// reference. One that reported lost input may hold fewer hits than the reference (never
    /// more); one that did not, while retention deleted records, must hold them all. Of several
    /// sizes, a smaller size's window may lack hits too late for it and counted in a larger size
    /// (`lateInThisSize`).
    private func judgeRecords(
        _ records: [OutputRecord], of generation: Generation, size: Int64, largest: Bool, handedOut: [Position: Int64], last isLast: Bool,
        verdicts: Verdicts, loss: Loss, stats: inout ScheduleStats, into found: inout [Discrepancy]
    ) {
        let lossReported = loss.ranges > 0
        let window = world.scenario.window
        let tag =
            (world.generations.count > 1 ? "generation \(generation.number): " : "") + (window.sizes.count > 1 ? "windows of \(size) ms: " : "")
        var positionsByKey: [String: [(Position, ProducedMessage, dead: Bool)]] = [:]
        var countedByKey: [String: [(position: Position, hit: GeneratedHit.Expected)]] = [:]
        for entry in verdicts.hits {
            let key = Self.key(entry.hit, size: size)
            positionsByKey[key, default: []].append((entry.position, entry.message, entry.dead))
            if !entry.dead { countedByKey[key, default: []].append((entry.position, entry.hit)) }
        }
        /// Hits of `key` too late for this size alone, if they explain `got` (of `revision`). Not
        /// tried where input was reported lost: a window may then lack any hits.
        func lateHere(_ key: String, got: ReferenceAggregates.Counts?, revision: Int) -> Int? {
            guard !largest, isLast, !lossReported, let hits = countedByKey[key] else { return nil }
            return lateInThisSize(hits, size: size, got: got, revision: revision, handedOut: handedOut, stats: &stats)
        }
        var last: [String: Int] = [:]
        var highest: [String: (revision: Int, records: [Int], crashes: Int)] = [:]
        for (position, record) in records.enumerated() {
            last[record.key] = position
            if let top = highest[record.key] {
                if record.revision < top.revision {
                    let previous = records[top.records.last!]
                    let text =
                        "\(tag)revision \(record.revision) by \(world.writerName(record.stamp.writer)) at t=\(record.stamp.time - world.scenario.start) (record \(record.index)) after revision \(top.revision) by \(world.writerName(previous.stamp.writer)) at t=\(previous.stamp.time - world.scenario.start) (record \(previous.index))"
                    if record.stamp.outputCrashes > top.crashes {
                        stats.steppedBackAfterCrash += 1
                        if strictRevisions { found.append(Discrepancy(.revisionWentBackAfterCrash, key: record.key, text)) }
                    } else {
                        found.append(Discrepancy(.revisionWentBack, key: record.key, text))
                    }
                } else if record.revision == top.revision {
                    highest[record.key] = (top.revision, top.records + [position], record.stamp.outputCrashes)
                } else {
                    highest[record.key] = (record.revision, [position], record.stamp.outputCrashes)
                }
            } else {
                highest[record.key] = (record.revision, [position], record.stamp.outputCrashes)
            }
        }

        let reference = ReferenceAggregates(verdicts.expected, windowSize: size).byKey
        func hits(_ counts: ReferenceAggregates.Counts) -> Int { counts.impressions + counts.clicks + counts.opens }
        func context(_ key: String) -> String {
            let entries = positionsByKey[key] ?? []
            let dead = entries.filter(\.dead).map { "\($0.0)" }
            let shown = entries.prefix(12).map { "\($0.0)\($0.dead ? " too_late" : "") \($0.1.kind.rawValue) at t=\($0.1.producedAt - world.scenario.start)" }
            return "; input: \(shown.joined(separator: ", "))\(entries.count > 12 ? ", …" : "")\(dead.isEmpty ? "" : "; dead-lettered: \(dead.count)")"
        }
        guard isLast else {
            // Stopped with windows open: its records may hold less than its reference, never more.
            for key in Set(last.keys).sorted() {
                let top = records[highest[key]!.records[0]]
                guard let want = reference[key] else {
                    found.append(
                        Discrepancy(
                            .extraKey, key: key,
                            "\(tag)a record (rev \(top.revision) by \(world.writerName(top.stamp.writer))) for a window with no hit to count in the input it read\(context(key))"))
                    continue
                }
                if top.revision > hits(want) {
                    found.append(
                        Discrepancy(
                            .lastRecord, key: key,
                            "\(tag)record \(top.index) (rev \(top.revision) by \(world.writerName(top.stamp.writer))) holds more hits than the \(hits(want)) of the input it read that it did not dead-letter\(context(key))",
                            refinement: "more-hits"))
                }
            }
            return
        }
        var short: [String] = []
        defer {
            if !short.isEmpty, !lossReported, stats.deletedRecords > 0 {
                found.append(
                    Discrepancy(
                        .silentLoss,
                        "\(tag)retention deleted \(stats.deletedRecords) records (\(world.deleted.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))), \(short.count) keys hold fewer hits than the reference (\(short.prefix(3).joined(separator: ", "))), and nothing was reported lost"
                    ))
            }
        }
        for key in Set(reference.keys).union(last.keys).sorted() {
            guard var want = reference[key] else {
                // Behind the shuffle after lost input, a copy sent again may be judged too late
                // by a task that cannot tell it from its original, which a previous owner
                // counted: a real key whose hits were all dead-lettered.
                if loss.behindShuffle, positionsByKey[key] != nil { continue }
                let record = records[last[key]!]
                found.append(
                    Discrepancy(
                        .extraKey, key: key,
                        "\(tag)a record with \(record.counts.map(Self.describe) ?? "unreadable counts") (rev \(record.revision)) for a window with no hit to count\(context(key))"
                    ))
                continue
            }
            guard let lastPosition = last[key] else {
                if lateHere(key, got: nil, revision: 0) != nil {
                    stats.smallerSizeKeys += 1
                    continue
                }
                short.append(key)
                if lossReported { continue }
                found.append(Discrepancy(.missingKey, key: key, "\(tag)no record; expected \(Self.describe(want)) (\(hits(want)) hits)\(context(key))"))
                continue
            }
            let record = records[lastPosition]
            let got = record.counts
            if got != want || record.revision != hits(want), let got, lateHere(key, got: got, revision: record.revision) != nil { want = got }
            if got != want || record.revision != hits(want) {
                let difference = got.map { hits($0) - hits(want) } ?? 0
                if difference < 0 { short.append(key) }
                // Input lost before it was read leaves windows short; over only behind the shuffle.
                if lossReported, difference < 0 || loss.behindShuffle { continue }
                let deadLettered = positionsByKey[key]?.filter(\.dead).count ?? 0
                let hint =
                    difference > 0 && deadLettered >= difference
                    ? "; the record holds \(difference) hits more than the reference, and \(deadLettered) of this key's hits were dead-lettered too_late: counted and dead-lettered"
                    : ""
                found.append(
                    Discrepancy(
                        .lastRecord, key: key,
                        "\(tag)last record (rev \(record.revision) by \(world.writerName(record.stamp.writer)) at t=\(record.stamp.time - world.scenario.start)) has \(got.map(Self.describe) ?? "unreadable counts"); expected \(Self.describe(want)) (\(hits(want)) hits)\(context(key))\(hint)",
                        refinement: difference < 0 ? "fewer-hits" : difference > 0 ? "more-hits" : "other-counts"))
            } else if !largest {
                stats.smallerSizeKeys += 1
            }
            for position in highest[key]?.records ?? [] where records[position].counts != want {
                let top = records[position]
                if lossReported, let counts = top.counts, hits(counts) < hits(want) || loss.behindShuffle { break }
                found.append(
                    Discrepancy(
                        .highestRevision, key: key,
                        "\(tag)record \(top.index) with the highest revision \(top.revision) has \(top.counts.map(Self.describe) ?? "unreadable counts"); expected \(Self.describe(want))"
                    ))
                break
            }
        }
    }

    /// Of several sizes, a hit too late for a smaller size and not for the largest is counted in
    /// the larger sizes' windows and left out of the smaller one's, and nothing names it (only a
    /// hit too late for every size is dead-lettered; `EngineOutput.lateInSomeSizes` counts the
    /// others). A smaller size's record that lacks hits of its reference (`revision` of them;
    /// nil `got`: no record at all) is explained when leaving out hits that could have been
    /// found too late for the size gives its counts: a hit could only if a window stage was
    /// handed it at or after its window's expiry (the window's end plus the retention), the
    /// horizon never passing the clock, but where a memory cap, which moves the horizon past
    /// what it evicts, makes any hit a candidate. Tries the hits handed out last first (later
    /// hits of a window are found too late first), and only choices whose actions, channels and
    /// platforms add up to what the record lacks; after `limit` steps the window is counted as
    /// unexplored. Returns the hits left out, nil when nothing explains the record.
    private func lateInThisSize(
        _ hits: [(position: Position, hit: GeneratedHit.Expected)], size: Int64, got: ReferenceAggregates.Counts?, revision: Int,
        handedOut: [Position: Int64], stats: inout ScheduleStats, limit: Int = 5_000_000
    ) -> Int? {
        let window = world.scenario.window
        let missing = hits.count - revision
        guard missing > 0, let first = hits.first else { return nil }
        let expiry = Self.windowStart(first.hit.eventTime, size: size) + size + window.retention
        let capped = window.maxEntries < 1_000_000
        let candidates = hits.indices.filter { capped || (handedOut[hits[$0].position] ?? .max) >= expiry }
            .sorted { (handedOut[hits[$0].position] ?? .max) > (handedOut[hits[$1].position] ?? .max) }
        guard candidates.count >= missing else { return nil }
        guard let got else {
            stats.lateInSmallerSizes += missing
            return missing
        }
        let key = Self.key(first.hit, size: size)
        guard let want = ReferenceAggregates(hits.map(\.hit), windowSize: size).byKey[key] else { return nil }
        // What the hits left out must add up to, by action, channel and platform: a choice that
        // strays from it is cut short.
        func tally(_ counts: ReferenceAggregates.Counts) -> [String: Int] {
            var parts = ["impression": counts.impressions, "click": counts.clicks, "open": counts.opens]
            for (name, count) in counts.channels { parts["channel " + name] = count }
            for (name, count) in counts.platforms { parts["platform " + name] = count }
            return parts
        }
        let (whole, kept) = (tally(want), tally(got))
        var owed = whole.merging(kept.mapValues { -$0 }, uniquingKeysWith: +)
        guard owed.values.allSatisfy({ $0 >= 0 }) else { return nil }
        func parts(_ hit: GeneratedHit.Expected) -> [String] {
            let action = switch hit.action {
            case .impression: "impression"
            case .click: "click"
            case .open: "open"
            }
            return [action, "channel " + hit.channel.name, "platform " + hit.platform.name]
        }
        var left = Set<Int>()
        var visited = 0
        func search(from index: Int) -> Bool? {
            visited += 1
            if visited > limit { return nil }
            if left.count == missing {
                guard owed.values.allSatisfy({ $0 == 0 }) else { return false }
                let rest = hits.indices.filter { !left.contains($0) }.map { hits[$0].hit }
                return ReferenceAggregates(rest, windowSize: size).byKey[key] == got
            }
            guard candidates.count - index >= missing - left.count else { return false }
            let hit = candidates[index]
            let named = parts(hits[hit].hit)
            if named.allSatisfy({ owed[$0, default: 0] > 0 }) {
                for part in named { owed[part]! -= 1 }
                left.insert(hit)
                let found = search(from: index + 1)
                left.remove(hit)
                for part in named { owed[part]! += 1 }
                if found != false { return found }
            }
            return search(from: index + 1)
        }
        switch search(from: 0) {
        case true?:
            stats.lateInSmallerSizes += missing
            return missing
        case false?:
            return nil
        case nil:
            stats.unexploredKeys += 1
            return missing
        }
    }

    /// When each input position was last handed to a reader, as itself or as an event of a
    /// repartition record (`SimulatedCluster.handedOut`): no window stage judged the hit later.
    private func lastHandedOut() -> [Position: Int64] {
        var latest: [Position: Int64] = [:]
        for (tp, times) in world.cluster.handedOut {
            let log = world.kafka.topic(tp.topic)
            for (offset, time) in times.enumerated() where time > .min && Int64(offset) < log.end(of: tp.partition) {
                var positions = [Position(topic: tp.topic, partition: tp.partition, offset: Int64(offset))]
                if tp.topic.hasSuffix("-repartition"), let value = log.bytes(log.entry(partition: tp.partition, offset: Int64(offset)).value) {
                    positions = value.withUnsafeBytes { bytes in
                        guard case .events(let record)? = try? RepartitionRecord.decode(bytes) else { return [] }
                        return record.events.map { Position(topic: record.origin.sourceTopic, partition: $0.sourcePartition, offset: $0.sourceOffset) }
                    }
                }
                for position in positions { latest[position] = max(latest[position] ?? .min, time) }
            }
        }
        return latest
    }

    /// The stages' totals, where no stage died: nothing was read twice.
    private func judgeTotals(of generation: Generation, verdicts: Verdicts, into found: inout [Discrepancy]) {
        guard world.crashes == 0 else { return }
        let tag = world.generations.count > 1 ? "generation \(generation.number): " : ""
        var normalize = Accounting()
        var aggregate = Accounting()
        var normalizeRan = false
        for runner in world.allRunners where runner.generation == generation.number {
            if runner.role == .normalize {
                normalize.add(runner.totals)
                normalizeRan = true
            } else {
                aggregate.add(runner.totals)
            }
        }
        // The normalize stage reads every message once (a clean handover commits what it
        // processed), unless the generation changed mode in place.
        if normalizeRan, generation.mode == .twoStage, !generation.switchedInPlace {
            let dead = Dictionary(uniqueKeysWithValues: normalize.deadLettered.counted.map { ($0.reason.rawValue, $0.count) })
            if normalize.consumed != verdicts.messages || normalize.accepted != verdicts.counted || normalize.filteredTotal != verdicts.filtered
                || dead != verdicts.rejected
            {
                found.append(
                    Discrepancy(
                        .accounting,
                        "\(tag)normalize consumed \(normalize.consumed), accepted \(normalize.accepted), filtered \(normalize.filteredTotal), dead-lettered \(dead); it read \(verdicts.messages) messages: \(verdicts.counted) hits to count, \(verdicts.filtered) with tracking off, dead letters \(verdicts.rejected)"
                    ))
            }
        }
        // Only a normalize stage that died before its commit sends an event twice.
        if aggregate.duplicates != 0 {
            found.append(
                Discrepancy(
                    .accounting,
                    "\(tag)the aggregate stage dropped \(aggregate.duplicates) events as copies of events it had seen, though no stage died, so nothing was sent twice"
                ))
        }
        // With the windows in a changelog, a clean handover, a switch or a restart re-reads
        // nothing: every hit is judged once.
        if !generation.switchedInPlace {
            let late = aggregate.deadLettered[.tooLate]
            if late != verdicts.tooLate.count || aggregate.accepted + late != verdicts.counted || aggregate.reread != 0 {
                found.append(
                    Discrepancy(
                        .accounting,
                        "\(tag)the aggregate stage accepted \(aggregate.accepted), found \(late) too late, re-read \(aggregate.reread) and dropped \(aggregate.duplicates) duplicates; \(verdicts.counted) hits to count, \(verdicts.tooLate.count) dead-lettered too_late"
                    ))
            }
        }
    }

    /// The strict lateness rule, on the hits produced before any source could have gone idle;
    /// returns how many hits it judged, or nil when the schedule does not allow it.
    private func checkStrictLateness(tooLate: Set<Position>, into found: inout [Discrepancy]) -> Int? {
        guard world.scenario.lockstep || throughIdleness else { return nil }
        let window = world.scenario.window
        // A gap of half the idle timeout between hits of one partition is treated as possible
        // idleness (the stages judge idleness by wall-clock time since a partition's last hit).
        // Behind the repartition topic every source's idleness moves every task's watermark, so
        // the first possible idleness anywhere ends the check; in one stage each partition's task
        // has only its own partition as a source.
        let gap = window.idleTimeout / 2
        let perPartition = world.scenario.mode == .oneStage && !world.scenario.has(.oneStageSwitch)
        var limits: [String: [Int64]] = [:]
        for (topic, partitions) in world.produced {
            limits[topic] = partitions.map { messages in
                var previous = world.topicStarts[topic] ?? world.scenario.start
                for message in messages {
                    guard case .counted = message.fate else { continue }
                    if message.producedAt - previous >= gap { return min(world.idleFreeUntil, previous) }
                    previous = message.producedAt
                }
                return min(world.idleFreeUntil, previous)
            }
        }
        let global = limits.values.joined().min() ?? world.idleFreeUntil
        var checked = 0
        for topic in world.produced.keys.sorted() {
            for (partition, messages) in world.produced[topic]!.enumerated() {
                var progress: Int64?
                for (offset, message) in messages.enumerated() {
                    guard case .counted(let hit) = message.fate else { continue }
                    let start = Self.windowStart(hit.eventTime, size: window.lengths[0])
                    let expiry = start + window.lengths[0] + window.retention
                    if throughIdleness || message.producedAt < (perPartition ? limits[topic]![partition] : global) {
                        checked += 1
                        let position = Position(topic: topic, partition: Int32(partition), offset: Int64(offset))
                        let late = progress.map { $0 >= expiry } ?? false
                        let dead = tooLate.contains(position)
                        if late != dead {
                            let text =
                                "\(position) (\(message.kind.rawValue), event time +\(hit.eventTime - world.scenario.start), Kafka timestamp +\(message.kafkaTimestamp - world.scenario.start)): its window's end plus retention is +\(expiry - world.scenario.start), its partition's progress before it +\(progress.map { String($0 - world.scenario.start) } ?? "none")"
                            found.append(
                                Discrepancy(
                                    dead ? .tooLateTooSoon : .countedPastRetention, key: Self.key(hit, size: window.lengths[0]),
                                    dead ? "dead-lettered too_late but the rule says count it: \(text)" : "counted but the rule says too_late: \(text)"))
                        }
                    }
                    progress = max(progress ?? .min, min(hit.eventTime, message.kafkaTimestamp))
                }
            }
        }
        return checked
    }

    /// The bound the design keeps on lateness (docs/windowing.md, "Watermark" and "Every source
    /// idle"): the watermark is the minimum over active partitions; a partition idle for the idle
    /// timeout stops holding it back (and it never comes back); when every partition is idle it
    /// goes on with the wall clock from the slowest partition that was still delivering. So a hit
    /// is `too_late` only when its window's end plus the retention is at or below the largest of:
    /// its own partition's progress before it; for every quiet period before it, the slowest
    /// delivering partition's progress when the input went quiet plus the quiet's length (and an
    /// idle timeout of slack for detection and steps); and, for every partition that may have
    /// gone idle before it, the other delivering partitions' fastest progress when it came back.
    /// A gap of half the idle timeout counts as possible idleness (of all partitions: a quiet
    /// period; of one: that partition), and the hits a partition receives at once after its own
    /// gap, or as its first, are exempt (judged against the others' watermark). Lockstep
    /// schedules only, so that every partition's hits reach the stages as they are produced, and
    /// only as long as the runners were served so (`World.servedUntil`). Returns how many hits it
    /// judged. With the watermark going on from the fastest partition when all are quiet (what
    /// the stages did before), a lagging partition's hits after a pause break it.
    private func checkQuietBound(tooLate: Set<Position>, into found: inout [Discrepancy]) -> Int? {
        guard world.scenario.lockstep else { return nil }
        let window = world.scenario.window
        let idle = window.idleTimeout
        struct Hit {
            var position: Position
            var message: ProducedMessage
            var hit: GeneratedHit.Expected
        }
        var hits: [Hit] = []
        for (topic, partitions) in world.produced {
            for (partition, messages) in partitions.enumerated() {
                for (offset, message) in messages.enumerated() {
                    guard case .counted(let hit) = message.fate else { continue }
                    hits.append(Hit(position: Position(topic: topic, partition: Int32(partition), offset: Int64(offset)), message: message, hit: hit))
                }
            }
        }
        hits.sort {
            ($0.message.producedAt, $0.position.topic, $0.position.partition, $0.position.offset)
                < ($1.message.producedAt, $1.position.topic, $1.position.partition, $1.position.offset)
        }
        struct Source: Hashable {
            var topic: String
            var partition: Int32
        }
        var progress: [Source: Int64] = [:]
        var lastProduced: [Source: Int64] = [:]
        var burst: [Source: Int64] = [:]
        var quietBound = Int64.min
        var idleBound = Int64.min
        var previous: Int64?
        var checked = 0
        for entry in hits {
            let source = Source(topic: entry.position.topic, partition: entry.position.partition)
            let at = entry.message.producedAt
            if let previous, at - previous >= idle / 2 {
                let delivering = lastProduced.filter { $0.value >= previous - idle }.keys.compactMap { progress[$0] }
                if let slowest = delivering.min() { quietBound = max(quietBound, slowest + (at - previous) + idle) }
            }
            // After its own gap a partition may have gone idle: the watermark may then have gone
            // on to the other partitions' progress, and never comes back. The burst it then
            // receives at once (what a stalled producer releases) is exempt.
            if lastProduced[source].map({ at - $0 >= idle / 2 }) ?? true {
                burst[source] = at
                let others = lastProduced.filter { $0.key != source && $0.value >= at - idle }.keys.compactMap { progress[$0] }
                if let fastest = others.max() { idleBound = max(idleBound, fastest) }
            }
            if burst[source] != at, at < world.servedUntil {
                checked += 1
                let expiry = Self.windowStart(entry.hit.eventTime, size: window.lengths[0]) + window.lengths[0] + window.retention
                let allowed = max(progress[source] ?? .min, quietBound, idleBound)
                if tooLate.contains(entry.position), expiry > allowed {
                    let start = world.scenario.start
                    found.append(
                        Discrepancy(
                            .tooLateTooSoon, key: Self.key(entry.hit, size: window.lengths[0]),
                            "dead-lettered too_late beyond what quiet periods allow: \(entry.position) (\(entry.message.kind.rawValue), event time +\(entry.hit.eventTime - start), Kafka timestamp +\(entry.message.kafkaTimestamp - start), produced at +\(at - start)): its window's end plus retention is +\(expiry - start), its partition's progress before it +\(progress[source].map { String($0 - start) } ?? "none"), the quiet periods' bound +\(quietBound == .min ? "none" : String(quietBound - start)), idle partitions' +\(idleBound == .min ? "none" : String(idleBound - start))"
                        ))
                }
            }
            progress[source] = max(progress[source] ?? .min, min(entry.hit.eventTime, entry.message.kafkaTimestamp))
            lastProduced[source] = at
            previous = at
        }
        return checked
    }

    /// What is wrong with a dead letter that carries the hit as normalized instead of its
    /// original, if anything: it must be a `too_late` hit's, in a schedule whose window state has
    /// a cap, say that the cap evicted its window, and be that hit (docs/scale-out.md, "Which
    /// hits carry their original").
    static func withoutOriginal(_ letter: DeadLetter, value: [UInt8]?, fate: Fate, capped: Bool) -> String? {
        guard letter.reason == .tooLate else { return "carries no original, and only a too_late hit may cross the shuffle without it" }
        guard capped, letter.detail.contains("--max-entries") else {
            return "crossed the shuffle without its original, and the memory cap is not why (\(capped ? "the detail says: \(letter.detail)" : "no cap in this schedule")): the originals rule let a hit that could be too late go without it"
        }
        guard case .counted(let hit) = fate,
            let object = value.flatMap({ try? JSONSerialization.jsonObject(with: Data($0)) }) as? [String: Any],
            object["deliveryId"] as? String == hit.deliveryId, object["broadlogId"] as? String == hit.broadlogId,
            (object["eventTime"] as? NSNumber)?.int64Value == hit.eventTime
        else { return "carries something else than the hit as normalized: \(value.map { String(decoding: $0, as: UTF8.self) } ?? "no value")" }
        return nil
    }

    /// The purges of the repartition topics: at the end, no partition's log start is past any
    /// group's commit on it (what no owner has counted is still there to read; the cluster also
    /// checks each deletion as it is carried out, see `RecordDeletions`), and what the topics
    /// keep, against what was written to them.
    private func checkPurges(stats: inout ScheduleStats, into found: inout [Discrepancy]) {
        let deletions = world.cluster.recordDeletions
        stats.purgesAsked = deletions.asked
        stats.purged = deletions.purged
        stats.purgesRefused = deletions.refused
        for name in world.kafka.topics.keys.sorted() where name.hasSuffix("-repartition") {
            let log = world.kafka.topic(name)
            stats.repartitionBytesWritten += log.writtenBytes
            stats.repartitionBytesKept += log.retainedBytes
            for partition in 0..<Int32(log.partitionCount) {
                let start = log.start(of: partition)
                for (group, committed) in world.kafka.commits(topic: name, partition: partition).sorted(by: { $0.key < $1.key })
                where committed.offset < start {
                    found.append(
                        Discrepancy(
                            .runner, "\(name)[\(partition)] starts at \(start), past \(group)'s commit \(committed.offset): purged beyond what was committed"))
                }
            }
        }
    }

    /// Counts in a fixed order (the reference's own description prints dictionaries).
    static func describe(_ counts: ReferenceAggregates.Counts) -> String {
        func pairs(_ map: [String: Int]) -> String { map.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ") }
        return
            "impressions \(counts.impressions), clicks \(counts.clicks), opens \(counts.opens), unique \(counts.uniqueImpressions)/\(counts.uniqueClicks)/\(counts.uniqueOpens), dismissals \(counts.dismissals), channels (\(pairs(counts.channels))), platforms (\(pairs(counts.platforms)))"
    }

    /// The output key of a hit, computed as the reference does.
    static func key(_ hit: GeneratedHit.Expected, size: Int64) -> String {
        "\(hit.deliveryId)@\(CivilTime.rfc3339(epochMillis: windowStart(hit.eventTime, size: size), offsetMinutes: 0, fractionDigits: 0))"
    }

    static func windowStart(_ time: Int64, size: Int64) -> Int64 {
        let remainder = time % size
        return remainder < 0 ? time - remainder - size : time - remainder
    }
}
