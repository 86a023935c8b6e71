import RecordFormats
import Runner
import TrackingDomain
import Windowing

/// What both kinds of window task share: an engine, the sources of its events as its input has
/// them, and the counting of a decoded batch into them. A partition's task (`AggregateTask`)
/// adds what a partition needs to move between owners: a changelog, commits, and a previous
/// owner to take over from. `replay`'s one task (`ReplayTask`) adds only its shards, and sends
/// what it counts at once.
protocol WindowTask: Sendable {
    var engine: WindowEngine { get set }
    var sources: TaskSources { get set }
    /// When the task's clock began (the engine's `now`: the wall clock, or behind the shuffle
    /// the first writer's clock it read): the first input's sources hold the watermark back
    /// from then, not from when they were declared.
    var createdAt: Int64 { get }
    /// Behind the shuffle, the newest writer's clock read before the batch being counted (nil
    /// for a task of raw hits, or before any): what says why a late hit lacks its original.
    var clockAtBatchStart: Int64? { get }
}

/// What a task made of its share of a batch, for the stage to send in partition order.
struct TaskResult {
    var report = StageReport()
    /// Dead letters to send, in record order.
    var deadLetters: [PendingDeadLetter] = []
    /// The batch was routed by another partition count: nothing was counted.
    var misrouted: (routed: Int, expected: Int)?
    /// The judge refused a record of the batch (another group wrote it): nothing was counted.
    var refusal: PipelineError?
}

/// A dead letter a task decided on, made into a record by the stage while its batch is alive
/// (`AggregateInput.deadLetters`).
public struct PendingDeadLetter: Sendable {
    public var reference: DeadLetterReference
    public var reason: RejectReason
    public var detail: String
}

extension WindowTask {
    /// Counts what an input decoded from this task's records: filtered hits and rejected
    /// messages are accounted (the rejected as dead letters), copies an upstream sent twice are
    /// dropped, and the engine counts the rest; its too-late hits become dead letters too. In a
    /// backfill of a time range, what is about a window outside `range` is accounted as read
    /// and left aside, and its dead letters do not go out. A record below `previousMark` (the
    /// previous owner's processed mark) re-reads what that owner processed, and is accounted as
    /// reread. Runs on a worker thread, touching only this task; `runner` runs the engine's
    /// shards, if it has several.
    mutating func countBatch(
        _ batch: DecodedBatch, range: Range<Int64>?, previousMark: Int64?, now: Int64, on runner: some ShardRunner
    ) -> (TaskResult, EngineOutput) {
        let letters = LetterFilter(range: range, windowSizes: engine.config.lengths, previousMark: previousMark)
        var result = TaskResult()
        var accounting = Accounting()
        accounting.marks = batch.markRecords
        for declaration in sources.declare(batch.sourcePartitions, createdAt: createdAt, now: now) {
            engine.assign(partitions: declaration.ids, now: declaration.since)
        }
        for filtered in batch.filtered {
            accounting.consume(at: filtered.offset, letters)
            if letters.inRange(filtered.time) {
                accounting.filtered[filtered.reason] += 1
            } else {
                accounting.filteredOutsideRange[filtered.reason] += 1
            }
        }
        for rejection in batch.rejections {
            accounting.consume(at: rejection.offset, letters)
            if letters.inRange(rejection.time) {
                accounting.deadLettered[rejection.reason] += 1
                result.deadLetters.append(PendingDeadLetter(reference: rejection.reference, reason: rejection.reason, detail: rejection.detail))
            } else {
                accounting.deadLetteredOutsideRange[rejection.reason] += 1
            }
        }
        let inputs = admit(batch, letters, into: &accounting, notices: &result.report.notices)
        let clockBefore = clockAtBatchStart
        let output = engine.process(inputs, marks: engineMarks(batch.marks), now: now, on: runner)
        accounting.rereadFinal += output.rereadFinal
        accounting.tooLateForSize = output.lateInSomeSizes
        var lateOutside = 0
        for late in output.tooLate {
            let event = batch.events[late.tag]
            if letters.inRange(late.event.eventTime) {
                accounting.deadLettered[.tooLate] += 1
                var detail = late.detail
                if !event.carriesOriginal {
                    accounting.lateWithoutOriginal += 1
                    detail += Self.withoutOriginal(late, clock: clockBefore, config: engine.config)
                }
                result.deadLetters.append(PendingDeadLetter(reference: event.reference, reason: .tooLate, detail: detail))
            } else {
                lateOutside += 1
                accounting.deadLetteredOutsideRange[.tooLate] += 1
            }
        }
        // The hits of windows outside the range are counted by the engine (their windows move
        // event time as they did live), and their records never written.
        let outside = letters.range == nil ? 0 : inputs.count(where: { !letters.inRange($0.event.eventTime) })
        accounting.accepted += inputs.count - outside - (output.tooLate.count - lateOutside)
        accounting.acceptedOutsideRange += outside - lateOutside
        result.report.accounting = accounting
        result.report.capacityEvictions = output.capacityEvictions
        result.deadLetters.sort { $0.reference < $1.reference }
        return (result, output)
    }

    /// Why a `too_late` hit crossed the shuffle without its original, as its letter says: the
    /// normalize stage carries the original of every hit whose window expires before the
    /// record's writer's clock plus its allowance (`OriginalRule`), and this task's horizon
    /// stays below the newest writer's clock it has read, except where the memory cap raised it.
    /// So either the window was evicted early by the cap (its expiry is beyond that clock), or
    /// the record was read when writers' clocks had gone further past its own than the
    /// allowance (the record was overtaken, clocks disagree, or instances run with different
    /// `--retention`).
    private static func withoutOriginal(_ late: LateHit, clock: Int64?, config: WindowConfig) -> String {
        let expiry = late.event.eventTime.map(config.lastExpiry(ofHitAt:))
        let cause =
            if let expiry, let clock, expiry <= clock {
                "its record was read when the writers' clocks had gone past its window's end plus the retention, further past the clock of its own writer than the normalize stage allows for (a record delayed on its way, instance clocks that disagree, or instances run with different --retention)"
            } else {
                "its window was finalized early to keep the window state within --max-entries, which the normalize stage cannot foresee"
            }
        return "; its original message did not cross the shuffle (\(cause)), so the value is the hit as trackpipe normalized it and the header \(DeadLetter.Header.normalized) says so: the message is at its source position in the input topic, for as long as the input's retention keeps it"
    }

    /// The events to count, in order: copies an upstream sent twice are dropped. A batch without
    /// copies (the usual) is counted as decoded, its inputs shared rather than copied.
    ///
    /// Each event is read in place, a field at a time: taken whole (`enumerated()`, or an
    /// `UnsafeBufferPointer`'s subscript), every event was copied and destroyed through its
    /// value witnesses first (about 90 instructions a hit: callgrind, one stage).
    private mutating func admit(
        _ batch: DecodedBatch, _ letters: LetterFilter, into accounting: inout Accounting, notices: inout [String]
    ) -> [WindowInput] {
        var copies: [Int] = []
        var switched: Set<Int32> = []
        batch.events.withUnsafeBufferPointer { buffer in
            batch.inputs.withUnsafeBufferPointer { inputBuffer in
                // Through the pointers' addressors, a field is read alone; the buffers'
                // subscripts would copy the whole event or input first.
                guard let events = buffer.baseAddress, let inputs = inputBuffer.baseAddress else { return }
                for tag in buffer.indices {
                    accounting.consume(at: inputs[tag].offset, letters)
                    switch sources.admit(events[tag].source, sourceOffset: events[tag].sourceOffset) {
                    case .copy:
                        accounting.duplicates += 1
                        copies.append(tag)
                    case .firstOfNewIncarnation:
                        switched.insert(events[tag].source.partition)
                    case .first:
                        break
                    }
                }
            }
        }
        if !switched.isEmpty {
            notices.append(
                "events of input partitions \(switched.sorted()) now come from another incarnation of the input (another topic under this group, or the topic deleted and created again): their offsets start afresh, and earlier positions no longer mark copies")
        }
        guard !copies.isEmpty else { return batch.inputs }
        var inputs: [WindowInput] = []
        inputs.reserveCapacity(batch.inputs.count - copies.count)
        var next = 0
        for input in batch.inputs {
            if next < copies.count, copies[next] == input.tag {
                next += 1
            } else {
                inputs.append(input)
            }
        }
        return inputs
    }

    /// The sources' watermarks under the engine's numbers for them, in that order, so the engine
    /// sees the same sequence whatever the batch's history. Each source has a number of its own
    /// (`TaskSources.engineId`), so a source's reports are already folded into one: gathered
    /// again through a table of engine numbers, a task behind 32 input partitions paid about
    /// 49,000 instructions a batch, 95 a hit of two stages (callgrind).
    private mutating func engineMarks(_ reported: SourceMarks<SourceKey>) -> [SourceMark] {
        var marks: [SourceMark] = []
        reported.forEachSource { source, report in
            marks.append(
                SourceMark(
                    source: sources.engineId(source), watermark: report.watermark, idle: report.idle, delivered: report.delivered,
                    quietSince: report.quietSince))
        }
        marks.sort { $0.source < $1.source }
        return marks
    }
}

/// Which messages of a batch belong to a backfill's time range, by the time they are about: the
/// window of a hit (late or not; of any size), the Kafka timestamp of a message that could not be read or was
/// filtered. Outside a backfill, and for a message without any time, every message does. Only
/// the dead letters of those that belong go out (a reread's too, since the previous owner may
/// never have sent them).
private struct LetterFilter {
    /// nil when every message belongs (no range, or a range of all time).
    let range: Range<Int64>?
    let windowSizes: [Int64]
    /// The previous owner's processed mark: below it, a record re-reads what that owner processed.
    let previousMark: Int64?

    init(range: Range<Int64>?, windowSizes: [Int64], previousMark: Int64?) {
        self.range = range == Int64.min..<Int64.max ? nil : range
        self.windowSizes = windowSizes
        self.previousMark = previousMark
    }

    func isReread(_ offset: Int64) -> Bool { offset < (previousMark ?? .min) }

    func inRange(_ time: Int64?) -> Bool {
        guard let range, let time else { return true }
        return windowSizes.contains { range.contains(EventTimeMath.windowStart(of: time, size: $0)) }
    }
}

extension Accounting {
    /// A message of the input read, and whether it re-reads what the previous owner processed.
    fileprivate mutating func consume(at offset: Int64, _ letters: LetterFilter) {
        consumed += 1
        if letters.isReread(offset) { reread += 1 }
    }
}
