import Kafka
import TrackingDomain
import Windowing

extension RepartitionRecord {
    /// A hit's original, as the writer has it: carried whole, or cut to `maxBytes` (key and
    /// value together) as its dead letter would be.
    package struct OriginalBytes {
        var key: UnsafeRawBufferPointer?
        var value: UnsafeRawBufferPointer?
        var timestamp: Int64?
        var maxBytes: Int = .max

        package init(key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?, timestamp: Int64?, maxBytes: Int = .max) {
            (self.key, self.value, self.timestamp, self.maxBytes) = (key, value, timestamp, maxBytes)
        }
    }

    /// One events record being written by one lane: its events appended in input order, written
    /// straight into the bytes that are sent (no buffer in between); the stage sets each
    /// source's watermark as it takes the events in order, and `finish` closes the record with
    /// its tables. A lane keeps its writers from batch to batch for their buffers.
    package struct EventsWriter {
        /// The repartition partition the record goes to.
        package private(set) var partition: Int32 = 0
        /// `bytes[0..<end]` is the record; what lies beyond is scratch, kept for its capacity.
        package private(set) var bytes: [UInt8] = []
        private(set) var end = 0 { didSet { size = end + tableBytes } }
        private(set) var count = 0
        /// The newest Kafka timestamp of the input records, the record's own timestamp.
        private(set) var timestamp: Int64?
        private var writerClock: Int64 = 0
        /// Where the event count and the tables' offset sit (fixed width, set by `finish`).
        private var countAt = 0
        private var deliveries: [DeliveryID] = []
        /// The deliveries' indices, once the table is too long to search.
        private var deliveryIndex: [DeliveryID: Int] = [:]
        private var sources: [Int32] = []
        private var epochs: [UInt32] = []
        private var begins: [Bool] = []
        private var watermarks: [Int64?] = []
        private var previousOffsets: [Int64] = []
        private var source = -1
        /// The current source's previous offset and watermark, kept here while its run lasts
        /// and stored into `previousOffsets` and `watermarks` when it ends (`storeRun`): written
        /// through the arrays, every hit checked their uniqueness and bounds.
        private var runPrevious: Int64 = -1
        private var runWatermark: Int64?
        private var previousTime: Int64 = 0
        /// What the tables will add when the record is closed, at most.
        private var tableBytes = 0 { didSet { size = end + tableBytes } }

        package init() {}

        var isEmpty: Bool { count == 0 }

        /// The record's size once closed, at most: what decides when it is full. Stored, so that
        /// the stage reads it in place after every hit: a getter of the sum was a call, which
        /// copied the whole writer (144 bytes) to pass it, about 30 instructions a hit (callgrind).
        package private(set) var size = 0

        /// Starts a new record for `partition`, forgetting the previous one (keeping buffers).
        package mutating func begin(partition: Int32, origin: Origin, writerClock: Int64) {
            self.partition = partition
            self.writerClock = writerClock
            bytes.removeAll(keepingCapacity: true)
            RepartitionRecord.appendHeader(.events, origin: origin, writerClock: writerClock, to: &bytes)
            countAt = bytes.count
            bytes.append(contentsOf: repeatElement(0, count: 8))
            end = bytes.count
            count = 0
            timestamp = nil
            deliveries.removeAll(keepingCapacity: true)
            deliveryIndex.removeAll(keepingCapacity: true)
            sources.removeAll(keepingCapacity: true)
            epochs.removeAll(keepingCapacity: true)
            begins.removeAll(keepingCapacity: true)
            watermarks.removeAll(keepingCapacity: true)
            previousOffsets.removeAll(keepingCapacity: true)
            source = -1
            runPrevious = -1
            runWatermark = nil
            previousTime = writerClock
            tableBytes = 2 * Varint.maxBytes
        }

        /// Appends one event of `sourcePartition` (of `epoch`) with its original, if given, and
        /// `watermark`, the source's watermark as of this event (in the same call: a call of its
        /// own to this module cost the stage about 30 instructions a hit, callgrind). Whether the
        /// record begins the group's records of a source is settled once the stage knows it
        /// (`settleSources`). `delivery` is the event's delivery's number in this record, as
        /// `number(of:)` gave it: the stage remembers it per delivery (`DeliveryRoutes`).
        package mutating func append(
            _ event: TrackingEvent, delivery: Int, eventTime: Int64, sourcePartition: Int32, epoch: UInt32, sourceOffset: Int64,
            timestamp: Int64?, original: OriginalBytes?, watermark: Int64
        ) {
            if let timestamp { self.timestamp = max(self.timestamp ?? timestamp, timestamp) }
            // A record's events come in runs of one source partition: only a new run (whose
            // event then names its source) looks the source up.
            let newSource = source < 0 || sources[source] != sourcePartition
            if newSource { enterSource(sourcePartition, epoch: epoch) }
            let fields = EventFields(
                head: Self.head(of: event, newSource: newSource, carriesOriginal: original != nil), shape: event.shape.rawValue,
                delivery: delivery, source: newSource ? source : nil,
                offsetDelta: Varint.zigzag(sourceOffset &- runPrevious &- 1), timeDelta: Varint.zigzag(eventTime &- previousTime))
            runPrevious = sourceOffset
            previousTime = eventTime
            runWatermark = watermark
            // Most events travel without their original: their path builds and destroys no
            // `FittedOriginal` (whose cut headers are an array).
            if let original {
                write(fields, original: FittedOriginal(original, eventTime: eventTime), broadlog: event.broadlogId.bytes)
            } else {
                write(fields, original: nil, broadlog: event.broadlogId.bytes)
            }
            count += 1
        }

        /// Makes `sourcePartition` the current source, at the start of a run of its events: looks
        /// it up in the table, or adds it.
        private mutating func enterSource(_ sourcePartition: Int32, epoch: UInt32) {
            storeRun()
            if let known = sources.firstIndex(of: sourcePartition) {
                source = known
            } else {
                source = sources.count
                sources.append(sourcePartition)
                epochs.append(epoch)
                begins.append(false)
                watermarks.append(nil)
                previousOffsets.append(-1)
                tableBytes += 3 * Varint.maxBytes + 1
            }
            (runPrevious, runWatermark) = (previousOffsets[source], watermarks[source])
        }

        /// Stores the current source's run into the tables.
        private mutating func storeRun() {
            guard source >= 0 else { return }
            (previousOffsets[source], watermarks[source]) = (runPrevious, runWatermark)
        }

        /// An event's first byte (`Head`).
        private static func head(of event: TrackingEvent, newSource: Bool, carriesOriginal: Bool) -> UInt8 {
            event.action.rawValue | event.channel.rawValue << 2 | event.platform.rawValue << 4
                | (newSource ? Head.newSource : 0) | (carriesOriginal ? Head.original : 0)
        }

        /// Writes one event's bytes at `end`, growing the buffer first if they might not fit.
        @inline(__always)
        private mutating func write(_ fields: EventFields, original: FittedOriginal?, broadlog: InlineUTF8) {
            // An inline broadlog id is stored as its two words (`RawWriter.put`), whose bytes
            // past the id land in scratch beyond the event.
            var size = 2 + 4 * Varint.maxBytes + max(broadlog.utf8Count, 16)
            if let original { size += original.maxSize }
            if bytes.count < end + size {
                // At least to the capacity the buffer already has (a record begun afresh keeps
                // it): grown once rather than doubling from the header on, about 20
                // instructions a hit (callgrind).
                bytes.append(contentsOf: repeatElement(0, count: max(end + size - bytes.count, bytes.count, bytes.capacity - bytes.count)))
            }
            let start = end
            end = bytes.withUnsafeMutableBytes { buffer -> Int in
                // Safe: `bytes` was grown above to hold this event, so the buffer is not empty.
                var out = RawWriter(raw: buffer.baseAddress!, at: start)
                out.byte(fields.head)
                let inline = min(fields.delivery, RepartitionRecord.inlineDeliveries)
                out.byte(fields.shape | UInt8(inline) << 3)
                if inline == RepartitionRecord.inlineDeliveries { out.varint(UInt64(fields.delivery - RepartitionRecord.inlineDeliveries)) }
                if let source = fields.source { out.varint(UInt64(source)) }
                out.varint(fields.offsetDelta)
                out.varint(fields.timeDelta)
                out.varint(UInt64(broadlog.utf8Count))
                out.put(broadlog)
                if let original { out.put(original) }
                return out.at
            }
        }

        /// Each source of the record's table, for `body` to settle its watermark and whether the
        /// record begins the group's records of it, once the stage knows them in input order.
        package mutating func settleSources(_ body: (_ source: Int32, _ watermark: inout Int64?, _ begins: inout Bool) -> Void) {
            storeRun()
            for index in sources.indices { body(sources[index], &watermarks[index], &begins[index]) }
            if source >= 0 { runWatermark = watermarks[source] }
        }

        /// Closes the record with its tables; `bytes[0..<end]` is then the record to send.
        package mutating func finish() {
            storeRun()
            bytes.removeSubrange(end...)
            let tablesAt = bytes.count
            Varint.append(UInt64(deliveries.count), to: &bytes)
            for delivery in deliveries {
                delivery.withUTF8 { utf8 in
                    Varint.append(UInt64(utf8.count), to: &bytes)
                    bytes.append(contentsOf: utf8)
                }
            }
            RepartitionRecord.appendSourceTable(
                sources.indices.lazy.map { [sources, watermarks, epochs, begins] in
                    (mark: SourceMark(source: sources[$0], watermark: watermarks[$0]), epoch: epochs[$0], begins: begins[$0])
                }, writerClock: writerClock, to: &bytes)
            let at = countAt
            let count = UInt32(self.count)
            bytes.withUnsafeMutableBytes {
                $0.storeBytes(of: count.littleEndian, toByteOffset: at, as: UInt32.self)
                $0.storeBytes(of: UInt32(tablesAt).littleEndian, toByteOffset: at + 4, as: UInt32.self)
            }
            end = bytes.count
        }

        /// The record's number for a delivery, which it is given here if it has none yet: a short
        /// table is searched (a record bound for one partition has few deliveries), a long one
        /// hashed.
        @inline(__always)
        package mutating func number(of id: DeliveryID) -> Int {
            if deliveries.count <= 16 {
                // By hand, by the first word first: 73 instructions an event where
                // `firstIndex(of:)` took 96 (callgrind, about ten deliveries a record).
                for index in deliveries.indices where deliveries[index].bytes.low == id.bytes.low && deliveries[index] == id { return index }
                tableBytes += Varint.maxBytes + id.utf8Count
                deliveries.append(id)
                if deliveries.count > 16 {
                    for (number, delivery) in deliveries.enumerated() { deliveryIndex[delivery] = number }
                }
                return deliveries.count - 1
            }
            if let known = deliveryIndex[id] { return known }
            tableBytes += Varint.maxBytes + id.utf8Count
            deliveries.append(id)
            deliveryIndex[id] = deliveries.count - 1
            return deliveries.count - 1
        }
    }

    /// One event's fields as they are written, in the order they are written (its original, if
    /// it carries one, follows them).
    fileprivate struct EventFields {
        var head: UInt8
        var shape: UInt8
        /// The delivery's number in the record's table.
        var delivery: Int
        /// The source's place in the table, where the event begins a run of its source.
        var source: Int?
        var offsetDelta: UInt64
        var timeDelta: UInt64
    }

    /// An original as an event carries it: whole, or cut as its dead letter would be
    /// (`DeadLetterCut`) when key and value together pass the writer's bound, with what was cut.
    fileprivate struct FittedOriginal {
        var key: UnsafeRawBufferPointer?
        var value: UnsafeRawBufferPointer?
        /// What was cut, as `cutHeaders` reads it back (empty: nothing).
        var cutHeaders: [UInt8]
        /// The original timestamp as a delta from the event time, plus one (0: none).
        var timestampDelta: UInt64

        init(_ original: OriginalBytes, eventTime: Int64) {
            let whole = (original.key?.count ?? 0) + (original.value?.count ?? 0) <= original.maxBytes
            let cut = whole ? nil : DeadLetterCut.fitting(key: original.key, value: original.value, headers: [], limit: original.maxBytes)
            key = cut.map { cut in original.key.map { UnsafeRawBufferPointer(rebasing: $0[0..<cut.keyBytes]) } } ?? original.key
            value = cut.map { cut in original.value.map { UnsafeRawBufferPointer(rebasing: $0[0..<cut.valueBytes]) } } ?? original.value
            cutHeaders = Self.bytes(of: cut?.headers ?? [])
            timestampDelta = original.timestamp.map { Varint.zigzag($0 &- eventTime) + 1 } ?? 0
        }

        /// The most its bytes can take in an event.
        var maxSize: Int { 4 * Varint.maxBytes + (key?.count ?? 0) + (value?.count ?? 0) + cutHeaders.count }

        private static func bytes(of headers: [KafkaHeader]) -> [UInt8] {
            guard !headers.isEmpty else { return [] }
            var bytes: [UInt8] = []
            for header in headers {
                var key = header.key
                key.withUTF8 { key in
                    Varint.append(UInt64(key.count), to: &bytes)
                    bytes.append(contentsOf: key)
                }
                let value = header.value ?? []
                Varint.append(UInt64(value.count), to: &bytes)
                bytes.append(contentsOf: value)
            }
            return bytes
        }
    }

    /// Writes into memory already reserved, advancing `at`: no bounds are checked, so its caller
    /// reserves the most an event can take first (`EventsWriter.write`).
    fileprivate struct RawWriter {
        let raw: UnsafeMutableRawPointer
        var at: Int

        mutating func byte(_ value: UInt8) {
            raw.storeBytes(of: value, toByteOffset: at, as: UInt8.self)
            at += 1
        }

        mutating func varint(_ value: UInt64) { at = Varint.write(value, to: raw, at: at) }

        @inline(__always)
        mutating func put(_ bytes: UnsafeRawBufferPointer) {
            if let base = bytes.baseAddress, !bytes.isEmpty { (raw + at).copyMemory(from: base, byteCount: bytes.count) }
            at += bytes.count
        }

        /// An id's bytes, one of at most sixteen as its two words (which may write up to sixteen
        /// bytes, zero past the id): copied out of the id by `withUTF8` and `memcpy`, it cost
        /// a closure call and a copy, about 30 instructions a hit (callgrind).
        @inline(__always)
        mutating func put(_ id: InlineUTF8) {
            if let spilled = id.spilled {
                spilled.withUnsafeBytes { put($0) }
                return
            }
            raw.storeBytes(of: id.low.littleEndian, toByteOffset: at, as: UInt64.self)
            raw.storeBytes(of: id.high.littleEndian, toByteOffset: at + 8, as: UInt64.self)
            at += id.utf8Count
        }

        /// An event's original. Not inlined: most events carry none, and with it inlined the
        /// closure writing every event was a call of its own, about 20 instructions a hit.
        @inline(never)
        mutating func put(_ original: FittedOriginal) {
            varint(original.timestampDelta)
            putOptional(original.key)
            putOptional(original.value)
            varint(UInt64(original.cutHeaders.count))
            original.cutHeaders.withUnsafeBytes { put($0) }
        }

        /// Length plus one, then the bytes; 0 for none.
        mutating func putOptional(_ bytes: UnsafeRawBufferPointer?) {
            guard let bytes else { return varint(0) }
            varint(UInt64(bytes.count) + 1)
            put(bytes)
        }
    }
}

/// An events record bound for its repartition partition, as a finished writer wrote it
/// (`RepartitionRecord.EventsWriter.finish`): lent from the writer's own buffer, which is
/// reused for the writer's next record.
package struct RepartitionEvents: OutgoingRecord {
    package let partition: Int32?
    /// `bytes[0..<end]` is the record.
    let bytes: [UInt8]
    let end: Int
    /// The newest Kafka timestamp of the input records it carries events of.
    package let timestamp: Int64?

    package var destination: Destination { .repartition }
    package var headers: [KafkaHeader] { [] }

    package func withBytes<R>(_ body: (_ key: UnsafeRawBufferPointer?, _ value: UnsafeRawBufferPointer?) throws -> R) rethrows -> R {
        try bytes.withUnsafeBytes { try body(nil, UnsafeRawBufferPointer(rebasing: $0[0..<end])) }
    }
}

extension RepartitionRecord.EventsWriter {
    /// The record written, once `finish` has closed it.
    package var record: RepartitionEvents { RepartitionEvents(partition: partition, bytes: bytes, end: end, timestamp: timestamp) }
}

