import HitGenerator
import Kafka
import Pipeline
import TrackingDomain
import TrackpipeTestSupport

/// Judges a drained world against the generator's truth. It shares no code with the stages:
/// the reference counts come from `ReferenceAggregates` (sets and counters), the output is read
/// back as JSON, dead letters by their headers.
///
/// The checks:
/// - **Accounting.** Every input message is counted, filtered or dead-lettered as its truth
///   says; a dead letter names a real message, carries its bytes, and one position is never
///   dead-lettered for two reasons (after a crash the same one may come twice); no hit is both
///   counted and dead-lettered (it would show as a count above the reference, which leaves
///   dead-lettered hits out). Every stage report balances; where no stage died, the stages'
///   totals equal what was produced.
/// - **Last record per key** equals the reference over the hits that were not dead-lettered, as
///   do the records with the highest revision; every reference key has a record, and no other
///   key does.
/// - **Revisions** never go down per key; after a crash a step back is counted apart (a failure
///   only with `strictRevisions`).
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

    struct Position: Hashable, CustomStringConvertible {
        var topic: String
        var partition: Int32
        var offset: Int64
        var description: String { "\(topic)[\(partition)]@\(offset)" }
    }

    func check() -> (discrepancies: [Discrepancy], stats: ScheduleStats) {
        var found: [Discrepancy] = []
        var stats = ScheduleStats()
        stats.operations = world.steps
        stats.crashes = world.crashes
        stats.rebalances = world.rebalances
        let window = world.scenario.window

        for problem in world.problems { found.append(Discrepancy(.runner, problem)) }
        for runner in world.allRunners {
            for problem in runner.problems { found.append(Discrepancy(.runner, problem)) }
        }

        // Dead letters, by the input position they name.
        let deadLetterLog = world.kafka.topic(World.deadLetterTopic)
        var reasons: [Position: [String]] = [:]
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
            if input.bytes(original.key) != deadLetterLog.bytes(entry.key) || input.bytes(original.value) != deadLetterLog.bytes(entry.value) {
                found.append(Discrepancy(.deadLetterOrigin, "dead letter \(letter.reason) of \(position) does not carry that message's key and value"))
            }
            reasons[position, default: []].append(letter.reason)
        }

        // Every message's fate.
        var expected: [GeneratedHit.Expected] = []
        var tooLate = Set<Position>()
        var positionsByKey: [String: [(Position, ProducedMessage, dead: Bool)]] = [:]
        var counted = 0, filtered = 0
        var rejected: [String: Int] = [:]
        for topic in world.produced.keys.sorted() {
            for (partition, messages) in world.produced[topic]!.enumerated() {
                for (offset, message) in messages.enumerated() {
                    stats.messages += 1
                    let position = Position(topic: topic, partition: Int32(partition), offset: Int64(offset))
                    let letters = reasons[position] ?? []
                    let distinct = Set(letters)
                    if distinct.count > 1 {
                        found.append(Discrepancy(.deadLetterReason, "\(position) dead-lettered for several reasons: \(distinct.sorted())"))
                    } else if letters.count > 1, world.crashes == 0 {
                        found.append(
                            Discrepancy(.accounting, "\(position) dead-lettered \(letters.count) times (\(letters[0])) though no stage died"))
                    }
                    switch message.fate {
                    case .rejected(let reason):
                        rejected[reason, default: 0] += 1
                        if distinct.isEmpty {
                            found.append(Discrepancy(.missingDeadLetter, "\(position) (\(reason)) was not dead-lettered"))
                        } else if distinct != [reason] {
                            found.append(Discrepancy(.deadLetterReason, "\(position) must be dead-lettered \(reason), got \(distinct.sorted())"))
                        }
                    case .filtered:
                        filtered += 1
                        if !distinct.isEmpty {
                            found.append(Discrepancy(.filteredDeadLettered, "\(position) has tracking off but was dead-lettered \(distinct.sorted())"))
                        }
                    case .counted(let hit):
                        counted += 1
                        let key = Self.key(hit, size: window.size)
                        if distinct.isEmpty {
                            expected.append(hit)
                        } else if distinct == ["too_late"] {
                            tooLate.insert(position)
                        } else {
                            found.append(Discrepancy(.deadLetterReason, "\(position) is a hit to count, dead-lettered \(distinct.sorted())"))
                        }
                        positionsByKey[key, default: []].append((position, message, !distinct.isEmpty))
                    }
                }
            }
        }
        stats.countedHits = counted
        stats.tooLate = tooLate.count

        // The output, read back.
        let outputLog = world.kafka.topic(World.outputTopic)
        var records: [OutputRecord] = []
        for (index, entry) in outputLog.partitions[0].enumerated() {
            let key = outputLog.bytes(entry.key).map { String(decoding: $0, as: UTF8.self) } ?? ""
            let value = outputLog.bytes(entry.value) ?? []
            guard let revision = OutputRecord.revision(in: value) else {
                found.append(Discrepancy(.runner, key: key, "output record \(index) has no revision"))
                continue
            }
            records.append(OutputRecord(key: key, revision: revision, index: index, stamp: entry.stamp, value: value))
        }
        stats.outputRecords = records.count
        var last: [String: Int] = [:]
        var highest: [String: (revision: Int, records: [Int], crashes: Int)] = [:]
        for (position, record) in records.enumerated() {
            last[record.key] = position
            if let top = highest[record.key] {
                if record.revision < top.revision {
                    let previous = records[top.records.last!]
                    let text =
                        "revision \(record.revision) by \(world.writerName(record.stamp.writer)) at t=\(record.stamp.time - world.scenario.start) (record \(record.index)) after revision \(top.revision) by \(world.writerName(previous.stamp.writer)) at t=\(previous.stamp.time - world.scenario.start) (record \(previous.index))"
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
        stats.keys = last.count

        // Against the reference.
        let reference = ReferenceAggregates(expected, windowSize: window.size).byKey
        func hits(_ counts: ReferenceAggregates.Counts) -> Int { counts.impressions + counts.clicks + counts.opens }
        func context(_ key: String) -> String {
            let entries = positionsByKey[key] ?? []
            let dead = entries.filter(\.dead).map { "\($0.0)" }
            let shown = entries.prefix(12).map { "\($0.0)\($0.dead ? " too_late" : "") \($0.1.kind.rawValue) at t=\($0.1.producedAt - world.scenario.start)" }
            return "; input: \(shown.joined(separator: ", "))\(entries.count > 12 ? ", …" : "")\(dead.isEmpty ? "" : "; dead-lettered: \(dead.count)")"
        }
        for key in Set(reference.keys).union(last.keys).sorted() {
            guard let want = reference[key] else {
                let record = records[last[key]!]
                found.append(
                    Discrepancy(
                        .extraKey, key: key,
                        "a record with \(record.counts.map(Self.describe) ?? "unreadable counts") (rev \(record.revision)) for a window with no hit to count\(context(key))"
                    ))
                continue
            }
            guard let lastPosition = last[key] else {
                found.append(Discrepancy(.missingKey, key: key, "no record; expected \(Self.describe(want)) (\(hits(want)) hits)\(context(key))"))
                continue
            }
            let record = records[lastPosition]
            let got = record.counts
            if got != want || record.revision != hits(want) {
                let difference = got.map { hits($0) - hits(want) } ?? 0
                let deadLettered = positionsByKey[key]?.filter(\.dead).count ?? 0
                let hint =
                    difference > 0 && deadLettered >= difference
                    ? "; the record holds \(difference) hits more than the reference, and \(deadLettered) of this key's hits were dead-lettered too_late: counted and dead-lettered"
                    : ""
                found.append(
                    Discrepancy(
                        .lastRecord, key: key,
                        "last record (rev \(record.revision) by \(world.writerName(record.stamp.writer)) at t=\(record.stamp.time - world.scenario.start)) has \(got.map(Self.describe) ?? "unreadable counts"); expected \(Self.describe(want)) (\(hits(want)) hits)\(context(key))\(hint)",
                        refinement: difference < 0 ? "fewer-hits" : difference > 0 ? "more-hits" : "other-counts"))
            }
            for position in highest[key]?.records ?? [] where records[position].counts != want {
                let top = records[position]
                found.append(
                    Discrepancy(
                        .highestRevision, key: key,
                        "record \(top.index) with the highest revision \(top.revision) has \(top.counts.map(Self.describe) ?? "unreadable counts"); expected \(Self.describe(want))"
                    ))
                break
            }
        }

        // Totals, where nothing was read twice.
        if world.crashes == 0 {
            var normalize = Accounting()
            var aggregate = Accounting()
            for runner in world.allRunners {
                if runner.role == .normalize { normalize.add(runner.totals) } else { aggregate.add(runner.totals) }
            }
            // The normalize stage reads every message once (a clean handover commits what it
            // processed); after a switch to one stage it has read only a part.
            if world.scenario.mode == .twoStage, !world.scenario.has(.oneStageSwitch) {
                let dead = normalize.deadLettered.filter { $0.value > 0 }
                if normalize.consumed != stats.messages || normalize.accepted != counted || normalize.filteredTotal != filtered
                    || dead != rejected
                {
                    found.append(
                        Discrepancy(
                            .accounting,
                            "normalize consumed \(normalize.consumed), accepted \(normalize.accepted), filtered \(normalize.filteredTotal), dead-lettered \(dead); produced \(stats.messages) messages: \(counted) hits to count, \(filtered) with tracking off, dead letters \(rejected)"
                        ))
                }
            }
            // Only a normalize stage that died before its commit sends an event twice.
            if aggregate.duplicates != 0 {
                found.append(
                    Discrepancy(
                        .accounting,
                        "the aggregate stage dropped \(aggregate.duplicates) events as copies of events it had seen, though no stage died, so nothing was sent twice"
                    ))
            }
            // The aggregate stage replays after a rebalance or a switch; without them it judges
            // every hit once.
            if world.rebalances == 0, !world.scenario.has(.topicSwitch), !world.scenario.has(.oneStageSwitch) {
                let late = aggregate.deadLettered["too_late"] ?? 0
                if late != tooLate.count || aggregate.accepted + late != counted {
                    found.append(
                        Discrepancy(
                            .accounting,
                            "the aggregate stage accepted \(aggregate.accepted), found \(late) too late and \(aggregate.duplicates) duplicates; \(counted) hits to count, \(tooLate.count) dead-lettered too_late"
                        ))
                }
            }
        }

        if strictLateness { stats.strictLatenessChecked = checkStrictLateness(tooLate: tooLate, into: &found) }
        return (found, stats)
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
                    let start = Self.windowStart(hit.eventTime, size: window.size)
                    let expiry = start + window.size + window.retention
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
                                    dead ? .tooLateTooSoon : .countedPastRetention, key: Self.key(hit, size: window.size),
                                    dead ? "dead-lettered too_late but the rule says count it: \(text)" : "counted but the rule says too_late: \(text)"))
                        }
                    }
                    progress = max(progress ?? .min, min(hit.eventTime, message.kafkaTimestamp))
                }
            }
        }
        return checked
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
