import TrackingDomain
import Windowing

/// The format of the internal repartition topic, which carries accepted events from the
/// normalize stage to the aggregate stage, keyed by `deliveryId`.
///
/// Binary and little-endian, because the topic is internal: only trackpipe writes and reads
/// it, and a compact record costs less to produce, store and read than JSON. Two kinds:
///
/// - **event**: the normalized hit, its source position (input partition and offset, which the
///   aggregate stage deduplicates by), the source partition's watermark as of this hit, and the
///   original key and value bytes, so that a hit found too late downstream is dead-lettered
///   exactly as it arrived. The delivery id is the record key.
/// - **marks**: the watermarks and idleness of the source partitions one normalize stage owns,
///   sent to every repartition partition now and then, so that a partition that receives few
///   of a source's events still learns how far that source's event time has moved.
///
/// Both start with a version byte; a reader refuses versions it does not know rather than
/// guess. Both carry the input topic's partition count, so the aggregate stage knows how many
/// sources must report before the watermark can move.
public enum RepartitionRecord {
    public static let version: UInt8 = 1

    enum Kind: UInt8 {
        case event = 1
        case marks = 2
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
        public var broadlogId: UnsafeRawBufferPointer
        public var originalKey: UnsafeRawBufferPointer?
        public var originalValue: UnsafeRawBufferPointer?
    }

    public enum Decoded {
        case event(Event)
        case marks(sourcePartitions: Int, [SourceMark])
    }

    public struct DecodingError: Error, CustomStringConvertible {
        public var description: String
    }

    // MARK: Encoding

    public static func encodeEvent(
        _ event: TrackingEvent, eventTime: Int64, sourcePartitions: Int, sourcePartition: Int32, sourceOffset: Int64,
        sourceWatermark: Int64, originalTimestamp: Int64?, originalKey: UnsafeRawBufferPointer?,
        originalValue: UnsafeRawBufferPointer?, into bytes: inout [UInt8]
    ) {
        bytes.removeAll(keepingCapacity: true)
        bytes.append(version)
        bytes.append(Kind.event.rawValue)
        append(UInt16(clamping: sourcePartitions), to: &bytes)
        append(sourcePartition, to: &bytes)
        append(sourceOffset, to: &bytes)
        append(sourceWatermark, to: &bytes)
        append(eventTime, to: &bytes)
        append(originalTimestamp ?? -1, to: &bytes)
        bytes.append(event.action.rawValue)
        bytes.append(event.channel.rawValue)
        bytes.append(event.platform.rawValue)
        bytes.append(event.shape.rawValue)
        let broadlog = event.broadlogId.utf8
        append(UInt16(clamping: broadlog.count), to: &bytes)
        bytes.append(contentsOf: broadlog.prefix(Int(UInt16.max)))
        appendBlob(originalKey, to: &bytes)
        appendBlob(originalValue, to: &bytes)
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
        guard version == Self.version else {
            throw DecodingError(description: "repartition record of format version \(version); this trackpipe reads version \(Self.version)")
        }
        let kindByte = try reader.byte()
        let sourcePartitions = Int(try reader.integer(UInt16.self))
        switch Kind(rawValue: kindByte) {
        case .event:
            let sourcePartition = try reader.integer(Int32.self)
            let sourceOffset = try reader.integer(Int64.self)
            let sourceWatermark = try reader.integer(Int64.self)
            let eventTime = try reader.integer(Int64.self)
            let timestamp = try reader.integer(Int64.self)
            guard let action = HitAction(rawValue: try reader.byte()), let channel = Channel(rawValue: try reader.byte()),
                let platform = Platform(rawValue: try reader.byte()), let shape = HitShape(rawValue: try reader.byte())
            else { throw DecodingError(description: "repartition event with an unknown action, channel, platform or shape code") }
            let broadlogLength = Int(try reader.integer(UInt16.self))
            let broadlog = try reader.slice(broadlogLength)
            let key = try reader.blob()
            let value = try reader.blob()
            return .event(
                Event(
                    sourcePartitions: sourcePartitions, sourcePartition: sourcePartition, sourceOffset: sourceOffset,
                    sourceWatermark: sourceWatermark, eventTime: eventTime, originalTimestamp: timestamp < 0 ? nil : timestamp,
                    action: action, channel: channel, platform: platform, shape: shape, broadlogId: broadlog,
                    originalKey: key, originalValue: value))
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
        case nil:
            throw DecodingError(description: "repartition record of unknown kind \(kindByte)")
        }
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
