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
/// Every record starts with a format version byte; a reader refuses versions it does not know
/// rather than guess. Version 1 (trackpipe before the batched format) sent one event per
/// record with the delivery id as the record key; this reader still reads it, so records left
/// in the topic by an older instance are counted after an upgrade. Every record carries the
/// input topic's partition count, so the aggregate stage knows how many sources must report
/// before the watermark can move.
public enum RepartitionRecord {
    public static let version: UInt8 = 2

    enum Kind: UInt8 {
        /// Version 1 only: one event, its delivery id in the record key.
        case event = 1
        case marks = 2
        case events = 3
    }

    /// An event as read back: views into the record's bytes, valid as long as they are.
    public struct Event {
        public var sourcePartitions: Int
        public var sourcePartition: Int32
        public var sourceOffset: Int64
        public var sourceWatermark: Int64
        public var eventTime: Int64
        public var originalTimestamp: Int64?
        public var action: HitAction
        public var channel: Channel
        public var platform: Platform
        public var shape: HitShape
        /// nil in version 1 records, whose record key is the delivery id.
        public var deliveryId: UnsafeRawBufferPointer?
        public var broadlogId: UnsafeRawBufferPointer
        public var originalKey: UnsafeRawBufferPointer?
        public var originalValue: UnsafeRawBufferPointer?
    }

    public enum Decoded {
        /// A version 1 record of one event.
        case event(Event)
        case events([Event])
        case marks(sourcePartitions: Int, [SourceMark])
    }

    public struct DecodingError: Error, CustomStringConvertible {
        public var description: String
    }

    /// An events record stays well below the 1 MB that producers and brokers accept by default
    /// (`message.max.bytes`): once a batch reaches this size it is sent and a new one begins.
    public static let batchBytes = 256 * 1024

    // MARK: Encoding

    /// Where an event's source watermark sits from the start of its encoding (see
    /// `appendEvent`): events are encoded in parallel before their watermark is known, and get
    /// it written in by the one thread that knows the order.
    static let sourceWatermarkOffset = 12

    /// Writes `watermark` into the event encoded at `start` of `bytes`.
    static func setSourceWatermark(_ watermark: Int64, ofEventAt start: Int, in bytes: UnsafeMutableRawBufferPointer) {
        bytes.storeBytes(of: watermark.littleEndian, toByteOffset: start + sourceWatermarkOffset, as: Int64.self)
    }

    /// Appends one event's encoding (as it appears inside an events record, without its
    /// length) to `bytes`, which may hold other data before it.
    static func appendEvent(
        _ event: TrackingEvent, eventTime: Int64, sourcePartition: Int32, sourceOffset: Int64, sourceWatermark: Int64,
        originalTimestamp: Int64?, originalKey: UnsafeRawBufferPointer?, originalValue: UnsafeRawBufferPointer?,
        to bytes: inout [UInt8]
    ) {
        append(sourcePartition, to: &bytes)
        append(sourceOffset, to: &bytes)
        append(sourceWatermark, to: &bytes)
        append(eventTime, to: &bytes)
        append(originalTimestamp ?? -1, to: &bytes)
        bytes.append(event.action.rawValue)
        bytes.append(event.channel.rawValue)
        bytes.append(event.platform.rawValue)
        bytes.append(event.shape.rawValue)
        appendShortText(event.deliveryId, to: &bytes)
        appendShortText(event.broadlogId, to: &bytes)
        appendBlob(originalKey, to: &bytes)
        appendBlob(originalValue, to: &bytes)
    }

    /// The events bound for one repartition partition, becoming one record.
    struct EventBatch {
        private(set) var bytes: [UInt8] = []
        private(set) var count = 0
        /// The newest Kafka timestamp of the input records, the record's own timestamp.
        private(set) var timestamp: Int64?

        var isEmpty: Bool { count == 0 }

        /// Adds one event encoded by `appendEvent`.
        mutating func append(encodedEvent: UnsafeRawBufferPointer, timestamp: Int64?, sourcePartitions: Int) {
            if count == 0 {
                bytes.removeAll(keepingCapacity: true)
                bytes.append(RepartitionRecord.version)
                bytes.append(Kind.events.rawValue)
                RepartitionRecord.append(UInt16(clamping: sourcePartitions), to: &bytes)
                RepartitionRecord.append(UInt32(0), to: &bytes)
            }
            RepartitionRecord.append(UInt32(encodedEvent.count), to: &bytes)
            bytes.append(contentsOf: encodedEvent)
            count += 1
            if let timestamp { self.timestamp = max(self.timestamp ?? timestamp, timestamp) }
        }

        /// The finished record; the batch is empty afterwards (keeping its buffer).
        mutating func take(_ body: (UnsafeRawBufferPointer, _ timestamp: Int64?) throws -> Void) rethrows {
            bytes.withUnsafeMutableBytes { $0.storeBytes(of: UInt32(count).littleEndian, toByteOffset: 4, as: UInt32.self) }
            try bytes.withUnsafeBytes { try body($0, timestamp) }
            count = 0
            timestamp = nil
        }
    }

    public static func encodeMarks(_ marks: [SourceMark], sourcePartitions: Int, into bytes: inout [UInt8]) {
        bytes.removeAll(keepingCapacity: true)
        bytes.append(version)
        bytes.append(Kind.marks.rawValue)
        append(UInt16(clamping: sourcePartitions), to: &bytes)
        append(UInt16(clamping: marks.count), to: &bytes)
        for mark in marks.prefix(Int(UInt16.max)) {
            append(mark.source, to: &bytes)
            append(mark.watermark ?? Int64.min, to: &bytes)
            bytes.append(mark.idle ? 1 : 0)
        }
    }

    private static func append<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    private static func appendShortText(_ text: String, to bytes: inout [UInt8]) {
        let utf8 = text.utf8
        append(UInt16(clamping: utf8.count), to: &bytes)
        bytes.append(contentsOf: utf8.prefix(Int(UInt16.max)))
    }

    private static func appendBlob(_ blob: UnsafeRawBufferPointer?, to bytes: inout [UInt8]) {
        guard let blob else {
            append(Int32(-1), to: &bytes)
            return
        }
        append(Int32(clamping: blob.count), to: &bytes)
        bytes.append(contentsOf: blob)
    }

    // MARK: Decoding

    public static func decode(_ bytes: UnsafeRawBufferPointer) throws(DecodingError) -> Decoded {
        var reader = Reader(bytes: bytes)
        let version = try reader.byte()
        guard version == 1 || version == Self.version else {
            throw DecodingError(
                description: "repartition record of format version \(version); this trackpipe reads versions 1 and \(Self.version)")
        }
        let kindByte = try reader.byte()
        let sourcePartitions = Int(try reader.integer(UInt16.self))
        switch Kind(rawValue: kindByte) {
        case .event where version == 1:
            return .event(try readEvent(&reader, sourcePartitions: sourcePartitions, withDeliveryId: false))
        case .events where version >= 2:
            let count = Int(try reader.integer(UInt32.self))
            var events: [Event] = []
            events.reserveCapacity(min(count, bytes.count / 40))
            for _ in 0..<count {
                let length = Int(try reader.integer(UInt32.self))
                var inner = Reader(bytes: try reader.slice(length))
                events.append(try readEvent(&inner, sourcePartitions: sourcePartitions, withDeliveryId: true))
                guard inner.position == length else { throw DecodingError(description: "repartition event with trailing bytes") }
            }
            guard reader.position == bytes.count else { throw DecodingError(description: "repartition record with trailing bytes") }
            return .events(events)
        case .marks:
            let count = Int(try reader.integer(UInt16.self))
            var marks: [SourceMark] = []
            marks.reserveCapacity(count)
            for _ in 0..<count {
                let source = try reader.integer(Int32.self)
                let watermark = try reader.integer(Int64.self)
                let idle = try reader.byte() != 0
                marks.append(SourceMark(source: source, watermark: watermark == Int64.min ? nil : watermark, idle: idle))
            }
            return .marks(sourcePartitions: sourcePartitions, marks)
        default:
            throw DecodingError(description: "repartition record of unknown kind \(kindByte) in format version \(version)")
        }
    }

    private static func readEvent(_ reader: inout Reader, sourcePartitions: Int, withDeliveryId: Bool) throws(DecodingError) -> Event {
        let sourcePartition = try reader.integer(Int32.self)
        let sourceOffset = try reader.integer(Int64.self)
        let sourceWatermark = try reader.integer(Int64.self)
        let eventTime = try reader.integer(Int64.self)
        let timestamp = try reader.integer(Int64.self)
        guard let action = HitAction(rawValue: try reader.byte()), let channel = Channel(rawValue: try reader.byte()),
            let platform = Platform(rawValue: try reader.byte()), let shape = HitShape(rawValue: try reader.byte())
        else { throw DecodingError(description: "repartition event with an unknown action, channel, platform or shape code") }
        let deliveryId = withDeliveryId ? try reader.slice(Int(try reader.integer(UInt16.self))) : nil
        let broadlog = try reader.slice(Int(try reader.integer(UInt16.self)))
        let key = try reader.blob()
        let value = try reader.blob()
        return Event(
            sourcePartitions: sourcePartitions, sourcePartition: sourcePartition, sourceOffset: sourceOffset,
            sourceWatermark: sourceWatermark, eventTime: eventTime, originalTimestamp: timestamp < 0 ? nil : timestamp,
            action: action, channel: channel, platform: platform, shape: shape, deliveryId: deliveryId, broadlogId: broadlog,
            originalKey: key, originalValue: value)
    }

    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        var position = 0

        mutating func byte() throws(DecodingError) -> UInt8 {
            guard position < bytes.count else { throw DecodingError(description: "repartition record cut short") }
            defer { position += 1 }
            return bytes[position]
        }

        mutating func integer<T: FixedWidthInteger>(_: T.Type) throws(DecodingError) -> T {
            let size = MemoryLayout<T>.size
            guard position + size <= bytes.count else { throw DecodingError(description: "repartition record cut short") }
            defer { position += size }
            return T(littleEndian: bytes.loadUnaligned(fromByteOffset: position, as: T.self))
        }

        mutating func slice(_ count: Int) throws(DecodingError) -> UnsafeRawBufferPointer {
            guard count >= 0, position + count <= bytes.count else { throw DecodingError(description: "repartition record cut short") }
            defer { position += count }
            return UnsafeRawBufferPointer(rebasing: bytes[position..<position + count])
        }

        mutating func blob() throws(DecodingError) -> UnsafeRawBufferPointer? {
            let length = try integer(Int32.self)
            return length < 0 ? nil : try slice(Int(length))
        }
    }
}
