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
///   partition and offset, which the aggregate stage deduplicates by), the source partition's
///   watermark as of this hit, and the original key and value bytes, so that a hit found too
///   late downstream is dead-lettered exactly as it arrived. Batching matters: librdkafka's
///   cost is mostly per message, on both the producing and the consuming side (measured in
///   docs/performance.md).
/// - **marks**: the watermarks and idleness of the source partitions one normalize stage owns,
///   sent to every repartition partition now and then, so that a partition that receives few
///   of a source's events still learns how far that source's event time has moved.
///
/// Every record starts with a format version byte, `version`, the one version this trackpipe
/// writes and reads: a record of any other version was written by another version of trackpipe,
/// and is refused rather than guessed at (`DecodingError.writtenByAnotherVersion`). A release
/// that changes the format reads the previous one for one release, then drops it
/// (docs/scale-out.md, "Formats").
///
/// Every record says where its events come from and how they were routed: the input topic's
/// name and partition count (the aggregate stage knows how many sources must report before the
/// watermark can move), per event and mark the epoch of its input partition (a new epoch begins
/// when the topic is found recreated), so that positions of another topic or of a recreated
/// one are never taken for copies of old ones, and the repartition topic's partition count the
/// writer routed by, so that instances that disagree on it are caught. Most hits' original key
/// and value stay in the input topic (see `writeEvent`): an event then records only their
/// lengths, and a `too_late` dead letter reads the message back from the input by its position.
public enum RepartitionRecord {
    public static let version: UInt8 = 4

    enum Kind: UInt8 {
        case marks = 2
        case events = 3
    }

    /// What a record says of where its events come from and how they were routed.
    public struct Origin {
        /// The input topic's partition count.
        public var sourcePartitions: Int
        /// The input topic's name.
        public var sourceTopic: UnsafeRawBufferPointer
        /// The repartition partition count the writer routed by.
        public var routedPartitions: Int
    }

    /// An event as read back: views into the record's bytes, valid as long as they are.
    public struct Event {
        public var origin: Origin
        public var sourcePartitions: Int { origin.sourcePartitions }
        public var sourcePartition: Int32
        /// The epoch of the source partition.
        public var sourceEpoch: UInt32
        public var sourceOffset: Int64
        public var sourceWatermark: Int64
        public var eventTime: Int64
        public var originalTimestamp: Int64?
        public var action: HitAction
        public var channel: Channel
        public var platform: Platform
        public var shape: HitShape
        public var deliveryId: UnsafeRawBufferPointer
        public var broadlogId: UnsafeRawBufferPointer
        /// The original key and value, when the event carries them (nil when it does not: see
        /// `leftInInput`).
        public var originalKey: UnsafeRawBufferPointer?
        public var originalValue: UnsafeRawBufferPointer?
        /// The original was left in the input topic: the lengths of its key and value, by which
        /// the message read back from there is recognised.
        public var leftInInput: OriginalShape?
    }

    /// The lengths of an original key (nil: the message had none) and value.
    public struct OriginalShape: Sendable, Hashable {
        public var keyLength: Int?
        public var valueLength: Int

        public init(keyLength: Int?, valueLength: Int) {
            self.keyLength = keyLength
            self.valueLength = valueLength
        }
    }

    public enum Decoded {
        case events([Event])
        case marks(Marks)
    }

    /// A marks record as read back.
    public struct Marks {
        public var origin: Origin
        public var marks: [SourceMark]
        /// The epoch of each mark's source partition, in the same order.
        public var epochs: [UInt32]
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

    /// Where an event's source watermark and epoch sit from the start of its encoding (see
    /// `writeEvent`): events are encoded in parallel before these are known, and get them
    /// written in by the one thread that knows the order.
    static let sourceWatermarkOffset = 12
    static let sourceEpochOffset = 36

    /// Writes the source's watermark and epoch into the event encoded at `start` of `bytes`.
    static func setSourceFacts(watermark: Int64, epoch: UInt32, ofEventAt start: Int, in bytes: UnsafeMutableRawBufferPointer) {
        bytes.storeBytes(of: watermark.littleEndian, toByteOffset: start + sourceWatermarkOffset, as: Int64.self)
        bytes.storeBytes(of: epoch.littleEndian, toByteOffset: start + sourceEpochOffset, as: UInt32.self)
    }

    /// Writes one event's encoding (as it appears inside an events record, without its length)
    /// into `bytes` from `start`, and returns where it ends. `bytes` only grows, and what lies
    /// beyond the returned end is scratch: a caller that keeps one buffer from batch to batch
    /// writes every event with one size check and plain stores, where appending its dozen
    /// fields one by one cost a few per cent of the two-stage worker's CPU.
    ///
    /// With `carriesOriginal` false the original key and value stay in the input topic and the
    /// event records only their lengths (as a length of -2 - n): the original bytes were two
    /// thirds of an event, and carrying them through the topic cost the two-stage worker about
    /// a tenth of its CPU (docs/performance.md), for the rare hit found too late downstream.
    static func writeEvent(
        _ event: TrackingEvent, eventTime: Int64, sourcePartition: Int32, sourceEpoch: UInt32, sourceOffset: Int64,
        sourceWatermark: Int64, originalTimestamp: Int64?, originalKey: UnsafeRawBufferPointer?,
        originalValue: UnsafeRawBufferPointer?, carriesOriginal: Bool = true, into bytes: inout [UInt8], at start: Int
    ) -> Int {
        var deliveryId = event.deliveryId
        var broadlogId = event.broadlogId
        return deliveryId.withUTF8 { delivery in
            broadlogId.withUTF8 { broadlog in
                let delivery = UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: delivery.prefix(Int(UInt16.max))))
                let broadlog = UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: broadlog.prefix(Int(UInt16.max))))
                let originalBytes = carriesOriginal ? (originalKey?.count ?? 0) + (originalValue?.count ?? 0) : 0
                let size = sourceFactsEnd + 4 + 2 + delivery.count + 2 + broadlog.count + 4 + 4 + originalBytes
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
                        guard carriesOriginal else { return put(Int32(-2) - Int32(clamping: blob.count)) }
                        put(Int32(clamping: blob.count))
                        put(blob)
                    }
                    put(sourcePartition)
                    put(sourceOffset)
                    put(sourceWatermark)
                    put(eventTime)
                    put(originalTimestamp ?? -1)
                    put(sourceEpoch)
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
                    return at
                }
            }
        }
    }

    /// Where an event's fixed fields end (after its source epoch).
    private static let sourceFactsEnd = 40

    /// Where a writer's records come from and how it routes: the same for every record it sends.
    public struct Source: Sendable, Hashable {
        public var topic: String
        public var partitions: Int
        public var routedPartitions: Int32

        public init(topic: String, partitions: Int, routedPartitions: Int32) {
            self.topic = topic
            self.partitions = partitions
            self.routedPartitions = routedPartitions
        }
    }

    /// The header every record starts with, after its version and kind.
    private static func appendOrigin(_ source: Source, to bytes: inout [UInt8]) {
        append(UInt16(clamping: source.partitions), to: &bytes)
        append(UInt16(clamping: source.routedPartitions), to: &bytes)
        appendShortText(source.topic, to: &bytes)
    }

    /// The events bound for one repartition partition, becoming one record.
    struct EventBatch {
        private(set) var bytes: [UInt8] = []
        private(set) var count = 0
        /// Where the event count sits in `bytes` (after the variable-length header).
        private var countOffset = 0
        /// The newest Kafka timestamp of the input records, the record's own timestamp.
        private(set) var timestamp: Int64?

        var isEmpty: Bool { count == 0 }

        /// Adds one event encoded by `appendEvent`.
        mutating func append(encodedEvent: UnsafeRawBufferPointer, timestamp: Int64?, source: Source) {
            if count == 0 {
                bytes.removeAll(keepingCapacity: true)
                bytes.append(RepartitionRecord.version)
                bytes.append(Kind.events.rawValue)
                RepartitionRecord.appendOrigin(source, to: &bytes)
                countOffset = bytes.count
                RepartitionRecord.append(UInt32(0), to: &bytes)
            }
            RepartitionRecord.append(UInt32(encodedEvent.count), to: &bytes)
            RepartitionRecord.appendRaw(encodedEvent, to: &bytes)
            count += 1
            if let timestamp { self.timestamp = max(self.timestamp ?? timestamp, timestamp) }
        }

        /// The finished record; the batch is empty afterwards (keeping its buffer).
        mutating func take(_ body: (UnsafeRawBufferPointer, _ timestamp: Int64?) throws -> Void) rethrows {
            let at = countOffset
            bytes.withUnsafeMutableBytes { $0.storeBytes(of: UInt32(count).littleEndian, toByteOffset: at, as: UInt32.self) }
            try bytes.withUnsafeBytes { try body($0, timestamp) }
            count = 0
            timestamp = nil
        }
    }

    /// A marks record: each mark with the epoch of its source partition.
    public static func encodeMarks(_ marks: [SourceMark], epochs: [UInt32], source: Source, into bytes: inout [UInt8]) {
        bytes.removeAll(keepingCapacity: true)
        bytes.append(version)
        bytes.append(Kind.marks.rawValue)
        appendOrigin(source, to: &bytes)
        append(UInt16(clamping: marks.count), to: &bytes)
        for (index, mark) in marks.prefix(Int(UInt16.max)).enumerated() {
            append(mark.source, to: &bytes)
            append(mark.watermark ?? Int64.min, to: &bytes)
            bytes.append(mark.idle ? 1 : 0)
            append(index < epochs.count ? epochs[index] : 0, to: &bytes)
        }
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
        let sourceTopic = try reader.slice(Int(try reader.integer(UInt16.self)))
        return (kind, Origin(sourcePartitions: sourcePartitions, sourceTopic: sourceTopic, routedPartitions: routedPartitions))
    }

    /// Event `number` of an events record, read without decoding the others: each event is
    /// preceded by its length, so the ones before it are stepped over. For a dead letter, which
    /// needs one event of a record.
    public static func event(_ number: Int, in bytes: UnsafeRawBufferPointer) throws(DecodingError) -> Event? {
        var reader = Reader(bytes: bytes)
        let (kind, origin) = try readHeader(&reader)
        guard Kind(rawValue: kind) == .events, number >= 0, number < Int(try reader.integer(UInt32.self)) else { return nil }
        for _ in 0..<number { _ = try reader.slice(Int(try reader.integer(UInt32.self))) }
        let length = Int(try reader.integer(UInt32.self))
        var inner = Reader(bytes: try reader.slice(length))
        return try readEvent(&inner, origin: origin)
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
                events.append(try readEvent(&inner, origin: origin))
                guard inner.position == length else { throw DecodingError(description: "repartition event with trailing bytes") }
            }
            guard reader.position == bytes.count else { throw DecodingError(description: "repartition record with trailing bytes") }
            return .events(events)
        case .marks:
            let count = Int(try reader.integer(UInt16.self))
            var marks: [SourceMark] = []
            var epochs: [UInt32] = []
            marks.reserveCapacity(count)
            epochs.reserveCapacity(count)
            for _ in 0..<count {
                let source = try reader.integer(Int32.self)
                let watermark = try reader.integer(Int64.self)
                let idle = try reader.byte() != 0
                marks.append(SourceMark(source: source, watermark: watermark == Int64.min ? nil : watermark, idle: idle))
                epochs.append(try reader.integer(UInt32.self))
            }
            return .marks(Marks(origin: origin, marks: marks, epochs: epochs))
        case nil:
            throw DecodingError(description: "repartition record of unknown kind \(kind)")
        }
    }

    private static func readEvent(_ reader: inout Reader, origin: Origin) throws(DecodingError) -> Event {
        let sourcePartition = try reader.integer(Int32.self)
        let sourceOffset = try reader.integer(Int64.self)
        let sourceWatermark = try reader.integer(Int64.self)
        let eventTime = try reader.integer(Int64.self)
        let timestamp = try reader.integer(Int64.self)
        let epoch = try reader.integer(UInt32.self)
        guard let action = HitAction(rawValue: try reader.byte()), let channel = Channel(rawValue: try reader.byte()),
            let platform = Platform(rawValue: try reader.byte()), let shape = HitShape(rawValue: try reader.byte())
        else { throw DecodingError(description: "repartition event with an unknown action, channel, platform or shape code") }
        let deliveryId = try reader.slice(Int(try reader.integer(UInt16.self)))
        let broadlog = try reader.slice(Int(try reader.integer(UInt16.self)))
        let keyLength = try reader.integer(Int32.self)
        let key = keyLength >= 0 ? try reader.slice(Int(keyLength)) : nil
        let valueLength = try reader.integer(Int32.self)
        let value = valueLength >= 0 ? try reader.slice(Int(valueLength)) : nil
        var left: OriginalShape?
        if valueLength < -1 || keyLength < -1 {
            // Left in the input: the key too (or the message had none), and a value was there.
            guard valueLength < -1, keyLength < 0 else {
                throw DecodingError(description: "repartition event with a malformed original key or value length")
            }
            left = OriginalShape(keyLength: keyLength == -1 ? nil : Int(-2 - keyLength), valueLength: Int(-2 - valueLength))
        }
        return Event(
            origin: origin, sourcePartition: sourcePartition, sourceEpoch: epoch, sourceOffset: sourceOffset,
            sourceWatermark: sourceWatermark, eventTime: eventTime, originalTimestamp: timestamp < 0 ? nil : timestamp,
            action: action, channel: channel, platform: platform, shape: shape, deliveryId: deliveryId, broadlogId: broadlog,
            originalKey: key, originalValue: value, leftInInput: left)
    }

    private typealias Reader = ByteReader<DecodingError>
}

extension ByteReader where Failure == RepartitionRecord.DecodingError {
    init(bytes: UnsafeRawBufferPointer) {
        self.init(bytes, cutShort: RepartitionRecord.DecodingError(description: "repartition record cut short"))
    }
}
