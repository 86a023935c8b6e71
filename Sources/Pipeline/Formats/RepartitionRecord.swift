import Kafka
import TrackingDomain
import Windowing

/// The format of the internal repartition topic, which carries accepted events from the
/// normalize stage to the aggregate stage.
///
/// Binary and little-endian, because the topic is internal: only trackpipe writes and reads
/// it, and a compact record costs less to produce, store and read than JSON. Two kinds:
///
/// - **events**: the events of one input batch bound for one repartition partition, in input
///   order. Each carries the normalized hit with its delivery id, its source position (input
///   partition and offset, which the aggregate stage deduplicates by), and the original key,
///   value and timestamp, so that a hit found too late downstream is dead-lettered exactly as it
///   arrived, whatever the input topic still holds. An original larger than the writer's bound
///   travels cut as its dead letter would be (`DeadLetterCut`): its first bytes, and what was
///   cut. The record ends with a table of the source partitions its events come from, each with
///   its epoch and its watermark once the record's last event of it was taken. Batching
///   matters: librdkafka's cost is mostly per message, on both the producing and the consuming
///   side (measured in docs/performance.md).
/// - **marks**: the watermarks and idleness of the source partitions one normalize stage owns,
///   sent to every repartition partition now and then, so that a partition that receives few
///   of a source's events still learns how far that source's event time has moved. Its table is
///   written like the events record's.
///
/// Every record starts with a format version byte, `version`, the one version this trackpipe
/// writes and reads: a record of any other version was written by another version of trackpipe,
/// and is refused rather than guessed at (`DecodingError.writtenByAnotherVersion`). A release
/// that changes the format reads the previous one for one release, then drops it
/// (docs/scale-out.md, "Formats").
///
/// Every record then says where its events come from and how they were routed (`Origin`): the
/// input topic's name and partition count (the aggregate stage knows how many sources must
/// report before the watermark can move), and the repartition topic's partition count the
/// writer routed by, so that instances that disagree on it are caught. The epoch of each source
/// partition in the table (a new epoch begins when the topic is found recreated) keeps
/// positions of another topic or of a recreated one from being taken for copies of old ones.
///
/// A table entry also says whether its record *begins* the group's records of that source in
/// its partition: the first record a normalize owner that began at the group's start of the
/// source (it took the partition without a trackpipe commit) sends to the partition naming it.
/// An aggregate task that reads its partition from the log start, with no commit, finds the
/// group's earlier records of a source deleted when the first record naming it does not begin
/// them (docs/scale-out.md, "Lost input").
public enum RepartitionRecord {
    public static let version: UInt8 = 6

    enum Kind: UInt8 {
        case marks = 2
        case events = 3
    }

    /// Where a record's events come from and how they were routed: the same for every record a
    /// writer sends.
    public struct Origin: Sendable, Hashable {
        /// The input topic's name.
        public var sourceTopic: String
        /// The input topic's partition count.
        public var sourcePartitions: Int
        /// The repartition partition count the writer routed by.
        public var routedPartitions: Int

        public init(sourceTopic: String, sourcePartitions: Int, routedPartitions: Int) {
            self.sourceTopic = sourceTopic
            self.sourcePartitions = sourcePartitions
            self.routedPartitions = routedPartitions
        }
    }

    /// An event as read back: views into the record's bytes, valid as long as they are.
    public struct Event {
        public var sourcePartition: Int32
        public var sourceOffset: Int64
        public var eventTime: Int64
        public var originalTimestamp: Int64?
        public var action: HitAction
        public var channel: Channel
        public var platform: Platform
        public var shape: HitShape
        public var deliveryId: UnsafeRawBufferPointer
        public var broadlogId: UnsafeRawBufferPointer
        /// The original key (nil: the message had none) and value (nil: a tombstone), whole or,
        /// if `originalCut` is not empty, their first bytes.
        public var originalKey: UnsafeRawBufferPointer?
        public var originalValue: UnsafeRawBufferPointer?
        /// What was cut of an original too large to travel whole, as the headers of its dead
        /// letter will say it (see `cutHeaders`); empty when the original is whole.
        public var originalCut: UnsafeRawBufferPointer
    }

    public enum Decoded {
        case events(Events)
        case marks(Marks)
    }

    /// An events record as read back.
    public struct Events {
        public var origin: Origin
        public var events: [Event]
        /// The source partitions of the events, each with its watermark as of the record's last
        /// event of it (never idle), and the epoch of each, in the same order.
        public var marks: [SourceMark]
        public var epochs: [UInt32]
        /// Whether the record begins the group's records of each source in its partition, in
        /// the same order.
        public var begins: [Bool]
    }

    /// A marks record as read back.
    public struct Marks {
        public var origin: Origin
        public var marks: [SourceMark]
        /// The epoch of each mark's source partition, in the same order.
        public var epochs: [UInt32]
        /// Whether the record begins the group's records of each source in its partition.
        public var begins: [Bool]
    }

    public struct DecodingError: Error, CustomStringConvertible {
        public var description: String
        /// The record begins with another format version than `version`: another version of
        /// trackpipe wrote it, and the description says what to do.
        public var writtenByAnotherVersion = false
    }

    /// An events record stays well below the 1 MB that producers and brokers accept by default
    /// (`message.max.bytes`): once a batch reaches this size it is sent and a new one begins.
    public static let batchBytes = 256 * 1024

    // MARK: Encoding

    /// Writes one event's encoding (as it appears inside an events record, without its length)
    /// into `bytes` from `start`, and returns where it ends. `bytes` only grows, and what lies
    /// beyond the returned end is scratch: a caller that keeps one buffer from batch to batch
    /// writes every event with one size check and plain stores, where appending its dozen
    /// fields one by one cost a few per cent of the two-stage worker's CPU. Nothing in an event
    /// depends on the events before it, so that events can be written on several threads.
    ///
    /// An original key and value larger together than `maxOriginalBytes` travel cut to that
    /// size as a dead letter of them would be, so that one hit cannot take an events record
    /// past what the topic takes.
    static func writeEvent(
        _ event: TrackingEvent, eventTime: Int64, sourcePartition: Int32, sourceOffset: Int64, originalTimestamp: Int64?,
        originalKey: UnsafeRawBufferPointer?, originalValue: UnsafeRawBufferPointer?, maxOriginalBytes: Int = .max,
        into bytes: inout [UInt8], at start: Int
    ) -> Int {
        // Constants, not variables: the closures below capture them, and a captured variable is
        // checked for exclusive access at run time on every read.
        let cut =
            (originalKey?.count ?? 0) + (originalValue?.count ?? 0) > maxOriginalBytes
            ? DeadLetterCut.fitting(key: originalKey, value: originalValue, headers: [], limit: maxOriginalBytes) : nil
        let originalKey = cut.map { cut in originalKey.map { UnsafeRawBufferPointer(rebasing: $0[0..<cut.keyBytes]) } } ?? originalKey
        let originalValue = cut.map { cut in originalValue.map { UnsafeRawBufferPointer(rebasing: $0[0..<cut.valueBytes]) } } ?? originalValue
        let cutHeaders = cut?.headers ?? []
        var deliveryId = event.deliveryId
        var broadlogId = event.broadlogId
        return deliveryId.withUTF8 { delivery in
            broadlogId.withUTF8 { broadlog in
                let delivery = UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: delivery.prefix(Int(UInt16.max))))
                let broadlog = UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: broadlog.prefix(Int(UInt16.max))))
                let originalBytes = (originalKey?.count ?? 0) + (originalValue?.count ?? 0)
                let cutBytes = cutHeaders.reduce(0) { $0 + 4 + $1.key.utf8.count + ($1.value?.count ?? 0) }
                let size = fixedFieldsEnd + 2 + delivery.count + 2 + broadlog.count + 4 + 4 + originalBytes + 2 + cutBytes
                if bytes.count < start + size {
                    bytes.append(contentsOf: repeatElement(0, count: max(start + size - bytes.count, bytes.count)))
                }
                return bytes.withUnsafeMutableBytes { raw in
                    var at = start
                    func put<T: FixedWidthInteger>(_ value: T) {
                        raw.storeBytes(of: value.littleEndian, toByteOffset: at, as: T.self)
                        at += MemoryLayout<T>.size
                    }
                    func put(_ source: UnsafeRawBufferPointer) {
                        if let base = source.baseAddress, !source.isEmpty {
                            (raw.baseAddress! + at).copyMemory(from: base, byteCount: source.count)
                        }
                        at += source.count
                    }
                    func putBlob(_ blob: UnsafeRawBufferPointer?) {
                        guard let blob else { return put(Int32(-1)) }
                        put(Int32(clamping: blob.count))
                        put(blob)
                    }
                    put(sourcePartition)
                    put(sourceOffset)
                    put(eventTime)
                    put(originalTimestamp ?? -1)
                    put(event.action.rawValue)
                    put(event.channel.rawValue)
                    put(event.platform.rawValue)
                    put(event.shape.rawValue)
                    put(UInt16(delivery.count))
                    put(delivery)
                    put(UInt16(broadlog.count))
                    put(broadlog)
                    putBlob(originalKey)
                    putBlob(originalValue)
                    put(UInt16(cutBytes))
                    for header in cutHeaders {
                        var key = header.key
                        key.withUTF8 { key in
                            put(UInt16(key.count))
                            put(UnsafeRawBufferPointer(key))
                        }
                        let value = header.value ?? []
                        put(UInt16(value.count))
                        value.withUnsafeBytes { put($0) }
                    }
                    return at
                }
            }
        }
    }

    /// Where an event's fixed fields end (after its shape).
    private static let fixedFieldsEnd = 32

    /// The header every record starts with, after its version and kind.
    private static func appendOrigin(_ origin: Origin, to bytes: inout [UInt8]) {
        append(UInt16(clamping: origin.sourcePartitions), to: &bytes)
        append(UInt16(clamping: origin.routedPartitions), to: &bytes)
        appendShortText(origin.sourceTopic, to: &bytes)
    }

    /// A table of source partitions, as marks records and the end of events records hold it.
    /// Each entry's flags byte: bit 0 idle, bit 1 the record begins the group's records of the
    /// source in its partition.
    private static func appendSourceTable(_ marks: [SourceMark], epochs: [UInt32], begins: [Bool], to bytes: inout [UInt8]) {
        append(UInt16(clamping: marks.count), to: &bytes)
        for (index, mark) in marks.prefix(Int(UInt16.max)).enumerated() {
            append(mark.source, to: &bytes)
            append(mark.watermark ?? Int64.min, to: &bytes)
            let begins = index < begins.count && begins[index]
            bytes.append((mark.idle ? Flag.idle : 0) | (begins ? Flag.begins : 0))
            append(index < epochs.count ? epochs[index] : 0, to: &bytes)
        }
    }

    /// The bits of a table entry's flags byte.
    private enum Flag {
        static let idle: UInt8 = 1
        static let begins: UInt8 = 2
    }

    /// The events bound for one repartition partition, becoming one record.
    struct EventBatch {
        private(set) var bytes: [UInt8] = []
        private(set) var count = 0
        /// Where the event count sits in `bytes` (after the variable-length header).
        private var countOffset = 0
        /// The newest Kafka timestamp of the input records, the record's own timestamp.
        private(set) var timestamp: Int64?
        /// The source partitions of the events so far, each with its latest watermark, and
        /// their epochs: the record's closing table.
        private var sources: [SourceMark] = []
        private var epochs: [UInt32] = []
        private var begins: [Bool] = []

        var isEmpty: Bool { count == 0 }

        /// Adds one event encoded by `writeEvent`, of a source partition (of `epoch`) whose
        /// watermark, as of this event, is `watermark`. `begins`: this is the first record the
        /// writer sends to the partition naming the source, and the writer began at the group's
        /// start of it (read where the source's first event of the record enters the table).
        mutating func append(
            encodedEvent: UnsafeRawBufferPointer, timestamp: Int64?, origin: Origin, sourcePartition: Int32, epoch: UInt32,
            watermark: Int64, begins: Bool = false
        ) {
            if count == 0 {
                bytes.removeAll(keepingCapacity: true)
                bytes.append(RepartitionRecord.version)
                bytes.append(Kind.events.rawValue)
                RepartitionRecord.appendOrigin(origin, to: &bytes)
                countOffset = bytes.count
                RepartitionRecord.append(UInt32(0), to: &bytes)
            }
            RepartitionRecord.append(UInt32(encodedEvent.count), to: &bytes)
            RepartitionRecord.appendRaw(encodedEvent, to: &bytes)
            count += 1
            if let timestamp { self.timestamp = max(self.timestamp ?? timestamp, timestamp) }
            // A record's events come in runs of one source partition: the last entry first.
            if let last = sources.indices.last, sources[last].source == sourcePartition {
                sources[last].watermark = watermark
            } else if let index = sources.firstIndex(where: { $0.source == sourcePartition }) {
                sources[index].watermark = watermark
            } else {
                sources.append(SourceMark(source: sourcePartition, watermark: watermark, idle: false))
                epochs.append(epoch)
                self.begins.append(begins)
            }
        }

        /// The finished record, its table of sources closing it; the batch is empty afterwards
        /// (keeping its buffers).
        mutating func take(_ body: (UnsafeRawBufferPointer, _ timestamp: Int64?) throws -> Void) rethrows {
            let at = countOffset
            bytes.withUnsafeMutableBytes { $0.storeBytes(of: UInt32(count).littleEndian, toByteOffset: at, as: UInt32.self) }
            RepartitionRecord.appendSourceTable(sources, epochs: epochs, begins: begins, to: &bytes)
            try bytes.withUnsafeBytes { try body($0, timestamp) }
            count = 0
            timestamp = nil
            sources.removeAll(keepingCapacity: true)
            epochs.removeAll(keepingCapacity: true)
            begins.removeAll(keepingCapacity: true)
        }
    }

    /// A marks record: each mark with the epoch of its source partition, and whether the record
    /// begins the group's records of it in the partition it goes to (none when `begins` is empty).
    public static func encodeMarks(_ marks: [SourceMark], epochs: [UInt32], begins: [Bool] = [], origin: Origin, into bytes: inout [UInt8]) {
        bytes.removeAll(keepingCapacity: true)
        bytes.append(version)
        bytes.append(Kind.marks.rawValue)
        appendOrigin(origin, to: &bytes)
        appendSourceTable(marks, epochs: epochs, begins: begins, to: &bytes)
    }

    private static func append<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { appendRaw($0, to: &bytes) }
    }

    /// Appends raw bytes as one copy: `Array.append(contentsOf:)` given raw bytes, or a
    /// String's UTF-8 view, copies them one by one.
    @inline(__always)
    static func appendRaw(_ raw: UnsafeRawBufferPointer, to bytes: inout [UInt8]) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: raw.baseAddress?.assumingMemoryBound(to: UInt8.self), count: raw.count))
    }

    private static func appendShortText(_ text: String, to bytes: inout [UInt8]) {
        var text = text
        text.withUTF8 { utf8 in
            let kept = UnsafeBufferPointer(rebasing: utf8.prefix(Int(UInt16.max)))
            append(UInt16(kept.count), to: &bytes)
            bytes.append(contentsOf: kept)
        }
    }

    // MARK: Decoding

    /// What every record starts with: its format version, its kind and its origin.
    private static func readHeader(_ reader: inout Reader) throws(DecodingError) -> (kind: UInt8, origin: Origin) {
        let found = try reader.byte()
        guard found == version else {
            throw DecodingError(
                description:
                    "repartition record of format version \(found), written by another version of trackpipe; this one reads version \(version) only. Run every instance of a deployment on the same trackpipe version, upgrading one release at a time (a release reads the formats of the one before it); the hits of such records are not counted: recount the input under a new --group to count them",
                writtenByAnotherVersion: true)
        }
        let kind = try reader.byte()
        let sourcePartitions = Int(try reader.integer(UInt16.self))
        let routedPartitions = Int(try reader.integer(UInt16.self))
        let sourceTopic = String(decoding: try reader.slice(Int(try reader.integer(UInt16.self))), as: UTF8.self)
        return (kind, Origin(sourceTopic: sourceTopic, sourcePartitions: sourcePartitions, routedPartitions: routedPartitions))
    }

    /// Event `number` of an events record, read without decoding the others: each event is
    /// preceded by its length, so the ones before it are stepped over. For a dead letter, which
    /// needs one event of a record.
    public static func event(_ number: Int, in bytes: UnsafeRawBufferPointer) throws(DecodingError) -> Event? {
        var reader = Reader(bytes: bytes)
        let (kind, _) = try readHeader(&reader)
        guard Kind(rawValue: kind) == .events, number >= 0, number < Int(try reader.integer(UInt32.self)) else { return nil }
        for _ in 0..<number { _ = try reader.slice(Int(try reader.integer(UInt32.self))) }
        let length = Int(try reader.integer(UInt32.self))
        var inner = Reader(bytes: try reader.slice(length))
        return try readEvent(&inner)
    }

    public static func decode(_ bytes: UnsafeRawBufferPointer) throws(DecodingError) -> Decoded {
        var reader = Reader(bytes: bytes)
        let (kind, origin) = try readHeader(&reader)
        switch Kind(rawValue: kind) {
        case .events:
            let count = Int(try reader.integer(UInt32.self))
            var events: [Event] = []
            events.reserveCapacity(min(count, bytes.count / 40))
            for _ in 0..<count {
                let length = Int(try reader.integer(UInt32.self))
                var inner = Reader(bytes: try reader.slice(length))
                events.append(try readEvent(&inner))
                guard inner.position == length else { throw DecodingError(description: "repartition event with trailing bytes") }
            }
            let (marks, epochs, begins) = try readSourceTable(&reader)
            guard reader.position == bytes.count else { throw DecodingError(description: "repartition record with trailing bytes") }
            return .events(Events(origin: origin, events: events, marks: marks, epochs: epochs, begins: begins))
        case .marks:
            let (marks, epochs, begins) = try readSourceTable(&reader)
            return .marks(Marks(origin: origin, marks: marks, epochs: epochs, begins: begins))
        case nil:
            throw DecodingError(description: "repartition record of unknown kind \(kind)")
        }
    }

    private static func readSourceTable(_ reader: inout Reader) throws(DecodingError) -> ([SourceMark], [UInt32], [Bool]) {
        let count = Int(try reader.integer(UInt16.self))
        var marks: [SourceMark] = []
        var epochs: [UInt32] = []
        var begins: [Bool] = []
        marks.reserveCapacity(count)
        epochs.reserveCapacity(count)
        begins.reserveCapacity(count)
        for _ in 0..<count {
            let source = try reader.integer(Int32.self)
            let watermark = try reader.integer(Int64.self)
            let flags = try reader.byte()
            marks.append(SourceMark(source: source, watermark: watermark == Int64.min ? nil : watermark, idle: flags & Flag.idle != 0))
            begins.append(flags & Flag.begins != 0)
            epochs.append(try reader.integer(UInt32.self))
        }
        return (marks, epochs, begins)
    }

    private static func readEvent(_ reader: inout Reader) throws(DecodingError) -> Event {
        let sourcePartition = try reader.integer(Int32.self)
        let sourceOffset = try reader.integer(Int64.self)
        let eventTime = try reader.integer(Int64.self)
        let timestamp = try reader.integer(Int64.self)
        guard let action = HitAction(rawValue: try reader.byte()), let channel = Channel(rawValue: try reader.byte()),
            let platform = Platform(rawValue: try reader.byte()), let shape = HitShape(rawValue: try reader.byte())
        else { throw DecodingError(description: "repartition event with an unknown action, channel, platform or shape code") }
        let deliveryId = try reader.slice(Int(try reader.integer(UInt16.self)))
        let broadlog = try reader.slice(Int(try reader.integer(UInt16.self)))
        let keyLength = try reader.integer(Int32.self)
        let key = keyLength >= 0 ? try reader.slice(Int(keyLength)) : nil
        let valueLength = try reader.integer(Int32.self)
        let value = valueLength >= 0 ? try reader.slice(Int(valueLength)) : nil
        guard keyLength >= -1, valueLength >= -1 else {
            throw DecodingError(description: "repartition event with a malformed original key or value length")
        }
        let cut = try reader.slice(Int(try reader.integer(UInt16.self)))
        return Event(
            sourcePartition: sourcePartition, sourceOffset: sourceOffset, eventTime: eventTime,
            originalTimestamp: timestamp < 0 ? nil : timestamp, action: action, channel: channel, platform: platform, shape: shape,
            deliveryId: deliveryId, broadlogId: broadlog, originalKey: key, originalValue: value, originalCut: cut)
    }

    /// The headers that say what was cut of an event's original (`Event.originalCut`), for its
    /// dead letter.
    public static func cutHeaders(_ cut: UnsafeRawBufferPointer) throws(DecodingError) -> [KafkaHeader] {
        var reader = Reader(bytes: cut)
        var headers: [KafkaHeader] = []
        while !reader.isAtEnd {
            let key = String(decoding: try reader.slice(Int(try reader.integer(UInt16.self))), as: UTF8.self)
            let value = Array(try reader.slice(Int(try reader.integer(UInt16.self))))
            headers.append(KafkaHeader(key: key, value: value))
        }
        return headers
    }

    private typealias Reader = ByteReader<DecodingError>
}

extension ByteReader where Failure == RepartitionRecord.DecodingError {
    init(bytes: UnsafeRawBufferPointer) {
        self.init(bytes, cutShort: RepartitionRecord.DecodingError(description: "repartition record cut short"))
    }
}
