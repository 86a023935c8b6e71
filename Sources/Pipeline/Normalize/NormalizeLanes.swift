import RecordFormats
import Runner
import Kafka
import TrackingDomain
import Windowing

/// The parallel pass of the normalize stage: each lane judges and encodes a contiguous chunk of
/// the batch, and sums up what the sequential pass needs per run of one source partition
/// rather than per record, so that the pass in input order costs per run, not per hit.
extension NormalizeStage {
    /// What a lane needs to judge and encode its records, the same for every lane of a batch.
    struct LaneContext: Sendable {
        let intake: HitIntake
        let origin: RepartitionRecord.Origin
        let repartitionPartitions: Int32
        let batchBytes: Int
        let maxOriginalBytes: Int
        /// The earliest event time that travels without its original in this batch
        /// (`OriginalRule.firstUncarried`; nil: every hit carries it).
        let uncarriedFrom: Int64?
        /// The stage's clock for this batch: every record of it says it was written then, and
        /// no hit moves its source's event time past it.
        let writerClock: Int64
        /// The epoch of every owned source partition.
        let epochs: [Int32: UInt32]
    }

    /// A run of a lane's records of one source partition, in record order.
    struct Run {
        let partition: Int32
        /// The offset after the run's last record.
        var next: Int64
        /// The latest time of the source's accepted hits in the lane up to the run's end, each
        /// taken as `SourceState.watermark` takes it (no later than its arrival nor than the
        /// stage's clock); nil: none so far in the lane.
        var watermark: Int64?
        /// Whether the run has an accepted hit.
        var accepted = false
    }

    /// A contiguous chunk of a batch, prepared: its records' runs of one source partition, its
    /// counts, its rejections (with each record's place in the batch), and the events records
    /// its accepted hits were written into (`writers[0..<used]`, in the order they were begun),
    /// each source's watermark in them as far as the lane saw it (`settleWriters` adds what
    /// the lanes before knew).
    ///
    /// No value per record is kept: the sequential pass visited an outcome and a placement per
    /// record, about 170 instructions a hit with its calls (callgrind), where it now visits runs
    /// and records, about 12.
    /// A stage keeps its lanes from batch to batch and only empties them, so that their buffers
    /// are allocated once rather than for every batch; a writer whose buffer an unusual batch of
    /// large messages grew beyond `retainedRecordBytes` is let go rather than held.
    struct PreparedLane {
        var runs: [Run] = []
        var accepted = 0
        var filtered = ReasonCounts<FilterReason>()
        var rejections: [(record: Int, reason: RejectReason, detail: String)] = []
        var writers: [RepartitionRecord.EventsWriter] = []
        var used = 0
        /// Per repartition partition, the writer taking its events (-1: none yet).
        var open: [Int32] = []
        /// Per repartition partition, the stamp of the record its open writer began.
        var stamps: [Int] = []
        /// How many records the lane has begun, ever: each record's stamp.
        var begun = 0
        var routes = DeliveryRoutes()

        /// Forgets the previous batch, keeping the buffers.
        mutating func empty(partitions: Int) {
            runs.removeAll(keepingCapacity: true)
            accepted = 0
            filtered = ReasonCounts()
            rejections.removeAll(keepingCapacity: true)
            for index in 0..<used where writers[index].bytes.capacity > retainedRecordBytes {
                writers[index] = RepartitionRecord.EventsWriter()
            }
            used = 0
            if open.count == partitions {
                for index in open.indices { open[index] = -1 }
            } else {
                open = Array(repeating: -1, count: partitions)
                stamps = Array(repeating: -1, count: partitions)
            }
        }

        /// A run of `partition` starting, which carries on from the lane's watermark of the
        /// source in its previous run, if any.
        func run(of partition: Int32, at offset: Int64) -> Run {
            Run(partition: partition, next: offset, watermark: runs.last { $0.partition == partition }?.watermark)
        }

        /// Writes an accepted hit into the events record of its delivery's partition, with
        /// `watermark`, the lane's watermark of its source as of this hit. Inlined into
        /// `prepareChunk`: called, it cost about 5 instructions a hit more (callgrind).
        @inline(__always)
        mutating func write(
            _ event: TrackingEvent, eventTime: Int64, of record: PolledRecord, epoch: UInt32, watermark: Int64, context: LaneContext
        ) {
            let slot = routes.slot(of: event.deliveryId, partitions: context.repartitionPartitions)
            let target = routes.routes[slot].partition
            var writer = Int(open[Int(target)])
            if writer < 0 {
                writer = used
                if writer == writers.count { writers.append(RepartitionRecord.EventsWriter()) }
                writers[writer].begin(partition: target, origin: context.origin, writerClock: context.writerClock)
                used += 1
                open[Int(target)] = Int32(writer)
                begun += 1
                stamps[Int(target)] = begun
            }
            // The delivery's number in the open record, if that record numbered it (its stamp);
            // otherwise the record gives it one, found or added.
            var delivery = Int(routes.routes[slot].number)
            if routes.routes[slot].record != stamps[Int(target)] {
                delivery = writers[writer].number(of: event.deliveryId)
                routes.remember(delivery, record: stamps[Int(target)], at: slot)
            }
            let original =
                context.uncarriedFrom.map { eventTime < $0 } ?? true
                ? RepartitionRecord.OriginalBytes(key: record.key, value: record.value, timestamp: record.timestamp, maxBytes: context.maxOriginalBytes)
                : nil
            // Appended and measured in one access to the writer: reading `size` through the
            // array on its own copied the whole writer (its ten buffers retained and released)
            // for every hit.
            let full = Self.append(
                event, delivery: delivery, to: &writers[writer], eventTime: eventTime, record: record, epoch: epoch, watermark: watermark, original: original,
                batchBytes: context.batchBytes)
            // A full record is closed: the partition's next event begins another.
            if full { open[Int(target)] = -1 }
        }

        /// Appends an accepted hit to `writer`, with its source's watermark; returns whether the
        /// record is full (`batchBytes`).
        private static func append(
            _ event: TrackingEvent, delivery: Int, to writer: inout RepartitionRecord.EventsWriter, eventTime: Int64, record: PolledRecord, epoch: UInt32,
            watermark: Int64, original: RepartitionRecord.OriginalBytes?, batchBytes: Int
        ) -> Bool {
            writer.append(
                event, delivery: delivery, eventTime: eventTime, sourcePartition: record.partition, epoch: epoch, sourceOffset: record.offset,
                timestamp: record.timestamp, original: original, watermark: watermark)
            return writer.size >= batchBytes
        }
    }

    /// The most bytes a writer keeps from one batch to the next: a batch of typical hits needs
    /// well under this.
    static let retainedRecordBytes = 2 << 20

    /// Judges and encodes `records` on up to `lanes` threads, lane `i` into `prepared[i]`;
    /// returns how many lanes hold this batch (the first ones).
    static func prepare(_ records: [PolledRecord], context: LaneContext, lanes: Int, into prepared: inout [PreparedLane]) -> Int {
        let lanes = max(1, min(lanes, records.count))
        if prepared.count < lanes { prepared += Array(repeating: PreparedLane(), count: lanes - prepared.count) }
        let chunk = (records.count + lanes - 1) / lanes
        // Lanes beyond `lanes`, kept from a larger batch, get an empty chunk.
        _ = inParallel(&prepared, lanes: lanes) { lane, index in
            prepareChunk(records, min(records.count, index * chunk)..<min(records.count, (index + 1) * chunk), context: context, into: &lane)
        }
        return lanes
    }

    private static func prepareChunk(_ records: [PolledRecord], _ range: Range<Int>, context: LaneContext, into lane: inout PreparedLane) {
        lane.empty(partitions: Int(context.repartitionPartitions))
        guard let first = range.first else { return }
        var run = lane.run(of: records[first].partition, at: records[first].offset)
        var epoch = context.epochs[run.partition] ?? 0
        var accepted = 0
        for index in range {
            let record = records[index]
            if record.partition != run.partition {
                lane.runs.append(run)
                run = lane.run(of: record.partition, at: record.offset)
                epoch = context.epochs[record.partition] ?? 0
            }
            run.next = record.offset + 1
            switch context.intake.take(record) {
            case .filtered(let reason):
                lane.filtered[reason] += 1
            case .rejected(let reason, let detail):
                lane.rejections.append((index, reason, detail))
            case .accepted(let event):
                let eventTime = event.eventTime!  // the intake accepts no hit without one
                let watermark = EventTimeMath.latest(run.watermark, min(eventTime, record.timestamp ?? eventTime, context.writerClock))
                run.watermark = watermark
                run.accepted = true
                accepted += 1
                lane.write(event, eventTime: eventTime, of: record, epoch: epoch, watermark: watermark, context: context)
            }
        }
        lane.runs.append(run)
        lane.accepted = accepted
    }
}
