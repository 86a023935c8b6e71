import Kafka
import TrackingDomain
import Windowing

/// The format of the internal repartition topic, which carries accepted events from the
/// normalize stage to the aggregate stage.
///
/// Binary and compact, because the topic is internal: only trackpipe writes and reads it, and
/// every byte of it is produced, stored, replicated and fetched once per hit. Numbers are
/// varints (`Varint`), most of them small deltas. Two kinds:
///
/// - **events**: the events of one input batch bound for one repartition partition, in input
///   order. Each carries the normalized hit (its delivery as an index into the record's table of
///   deliveries, which a record bound for one partition shares among few), its source position
///   (input partition, and offset as a delta from the previous event of the same partition in
///   the record), which the aggregate stage deduplicates by, and its event time as a delta from
///   the previous event's. Events have no length of their own: they are read in order. A hit
///   the normalize stage cannot rule out as `too_late` downstream (`OriginalRule`) also carries
///   its original key, value and timestamp, so that its dead letter is the message as it
///   arrived, whatever the input topic still holds; an original larger than the writer's bound
///   travels cut as its dead letter would be (`DeadLetterCut`): its first bytes, and what was
///   cut. The record ends with its table of deliveries and a table of the source partitions its
///   events come from, each with its epoch and its watermark once the record's last event of it
///   was taken. Batching matters: librdkafka's cost is mostly per message, on both the producing
///   and the consuming side (measured in docs/performance.md).
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
/// report before the watermark can move), the repartition topic's partition count the
/// writer routed by, so that instances that disagree on it are caught, and the group whose
/// normalize stage wrote it, so that a run of another group pointed at this topic is refused
/// before it writes (`GroupIdentityCheck`). Then the **writer's clock**: the wall-clock time
/// its writer wrote it at. Every watermark a record carries is at or below it, and a window
/// task's event time never passes the newest writer's clock it has read: that is what bounds a
/// task's horizon for the originals rule (docs/scale-out.md). The epoch of each source
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
        /// The group whose normalize stage wrote the record (`--group`): a repartition topic
        /// carries one group's hits.
        public var group: String

        public init(sourceTopic: String, sourcePartitions: Int, routedPartitions: Int, group: String) {
            self.sourceTopic = sourceTopic
            self.sourcePartitions = sourcePartitions
            self.routedPartitions = routedPartitions
            self.group = group
        }
    }

    /// A hit's message as it arrived, carried for its `too_late` dead letter: views into the
    /// record's bytes, valid as long as they are.
    public struct Original {
        /// The original key (nil: the message had none) and value (nil: a tombstone), whole or,
        /// if `cut` is not empty, their first bytes.
        public var key: UnsafeRawBufferPointer?
        public var value: UnsafeRawBufferPointer?
        public var timestamp: Int64?
        /// What was cut of an original too large to travel whole, as the headers of its dead
        /// letter will say it (see `cutHeaders`); empty when the original is whole.
        public var cut: UnsafeRawBufferPointer

        @usableFromInline
        init(key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?, timestamp: Int64?, cut: UnsafeRawBufferPointer) {
            (self.key, self.value, self.timestamp, self.cut) = (key, value, timestamp, cut)
        }
    }

    /// An event as read back: views into the record's bytes, valid as long as they are.
    public struct Event {
        public var sourcePartition: Int32
        public var sourceOffset: Int64
        public var eventTime: Int64
        public var action: HitAction
        public var channel: Channel
        public var platform: Platform
        public var shape: HitShape
        /// Its delivery's place in the record's table of deliveries, and the id itself.
        public var delivery: Int
        public var deliveryId: UnsafeRawBufferPointer
        public var broadlogId: UnsafeRawBufferPointer
        /// Nil when the writer ruled out that the hit can be `too_late` downstream.
        public var original: Original?

        @usableFromInline
        init(
            sourcePartition: Int32, sourceOffset: Int64, eventTime: Int64, action: HitAction, channel: Channel, platform: Platform,
            shape: HitShape, delivery: Int, deliveryId: UnsafeRawBufferPointer, broadlogId: UnsafeRawBufferPointer, original: Original?
        ) {
            (self.sourcePartition, self.sourceOffset, self.eventTime) = (sourcePartition, sourceOffset, eventTime)
            (self.action, self.channel, self.platform, self.shape) = (action, channel, platform, shape)
            (self.delivery, self.deliveryId, self.broadlogId, self.original) = (delivery, deliveryId, broadlogId, original)
        }
    }

    public enum Decoded {
        case events(Events)
        case marks(Marks)
    }

    /// An events record as read back.
    public struct Events {
        public var origin: Origin
        /// When its writer wrote it (epoch ms, the writer's wall clock).
        public var writerClock: Int64
        public var events: [Event]
        /// The record's table of deliveries, which events name by index.
        public var deliveries: [UnsafeRawBufferPointer]
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
        /// When its writer wrote it (epoch ms, the writer's wall clock).
        public var writerClock: Int64
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

        @usableFromInline
        init(description: String, writtenByAnotherVersion: Bool = false) {
            (self.description, self.writtenByAnotherVersion) = (description, writtenByAnotherVersion)
        }
    }

    /// An events record stays well below the 1 MB that producers and brokers accept by default
    /// (`message.max.bytes`): once a record reaches this size it is closed and a new one begins.
    public static let batchBytes = 256 * 1024

    // MARK: Layout

    /// An event's first byte: its action, channel and platform (two bits each), whether a new
    /// source partition's events begin with it, and whether its original follows it.
    @usableFromInline
    enum Head {
        @usableFromInline static let newSource: UInt8 = 0x40
        @usableFromInline static let original: UInt8 = 0x80
    }

    /// An event's second byte: its shape (three bits), and its delivery's index when below 31
    /// (five bits; 31: the index minus 31 follows as a varint).
    @usableFromInline static let inlineDeliveries = 31

    /// A source table entry's flags.
    fileprivate enum SourceFlag {
        static let idle: UInt8 = 1
        static let hasWatermark: UInt8 = 2
        /// An idle source says when it last delivered.
        static let hasQuietSince: UInt8 = 4
        /// The record begins the group's records of the source in its partition.
        static let begins: UInt8 = 8
    }

    // MARK: Encoding

    /// What every record starts with: version, kind, origin and the writer's clock.
    static func appendHeader(_ kind: Kind, origin: Origin, writerClock: Int64, to bytes: inout [UInt8]) {
        bytes.append(version)
        bytes.append(kind.rawValue)
        Varint.append(UInt64(max(0, origin.sourcePartitions)), to: &bytes)
        Varint.append(UInt64(max(0, origin.routedPartitions)), to: &bytes)
        for var text in [origin.sourceTopic, origin.group] {
            text.withUTF8 { utf8 in
                Varint.append(UInt64(utf8.count), to: &bytes)
                bytes.append(contentsOf: utf8)
            }
        }
        Varint.append(Varint.zigzag(writerClock), to: &bytes)
    }

    /// A table of source partitions, as marks records and the end of events records hold it:
    /// watermarks as deltas from the writer's clock, which bounds them.
    static func appendSourceTable(
        _ sources: some Collection<(mark: SourceMark, epoch: UInt32, begins: Bool)>, writerClock: Int64, to bytes: inout [UInt8]
    ) {
        Varint.append(UInt64(sources.count), to: &bytes)
        for (mark, epoch, begins) in sources {
            Varint.append(UInt64(UInt32(bitPattern: mark.source)), to: &bytes)
            Varint.append(UInt64(epoch), to: &bytes)
            let quietSince = mark.idle ? mark.quietSince : nil
            bytes.append(
                (mark.idle ? SourceFlag.idle : 0) | (mark.watermark == nil ? 0 : SourceFlag.hasWatermark)
                    | (quietSince == nil ? 0 : SourceFlag.hasQuietSince) | (begins ? SourceFlag.begins : 0))
            if let watermark = mark.watermark { Varint.append(Varint.zigzag(watermark &- writerClock), to: &bytes) }
            if let quietSince { Varint.append(Varint.zigzag(quietSince &- writerClock), to: &bytes) }
        }
    }

    /// A marks record: each mark with the epoch of its source partition, and whether the record
    /// begins the group's records of it in the partition it goes to (none when `begins` is
    /// empty), written at `writerClock`.
    public static func encodeMarks(
        _ marks: [SourceMark], epochs: [UInt32], begins: [Bool] = [], origin: Origin, writerClock: Int64, into bytes: inout [UInt8]
    ) {
        bytes.removeAll(keepingCapacity: true)
        appendHeader(.marks, origin: origin, writerClock: writerClock, to: &bytes)
        appendSourceTable(
            marks.enumerated().map { index, mark in
                (mark: mark, epoch: index < epochs.count ? epochs[index] : 0, begins: index < begins.count && begins[index])
            }, writerClock: writerClock, to: &bytes)
    }

    // MARK: Decoding

    /// What every record starts with: its format version, its kind, its origin and its writer's
    /// clock.
    private static func readHeader(_ reader: inout Reader) throws(DecodingError) -> (kind: UInt8, origin: Origin, writerClock: Int64) {
        let found = try reader.byte()
        guard found == version else {
            throw DecodingError(
                description:
                    "repartition record of format version \(found), written by another version of trackpipe; this one reads version \(version) only. Run every instance of a deployment on the same trackpipe version, upgrading one release at a time (a release reads the formats of the one before it); the hits of such records are not counted: recount the input under a new --group to count them",
                writtenByAnotherVersion: true)
        }
        let kind = try reader.byte()
        let sourcePartitions = try reader.count()
        let routedPartitions = try reader.count()
        let sourceTopic = String(decoding: try reader.slice(try reader.count()), as: UTF8.self)
        let group = String(decoding: try reader.slice(try reader.count()), as: UTF8.self)
        let writerClock = try reader.zigzag()
        return (
            kind,
            Origin(sourceTopic: sourceTopic, sourcePartitions: sourcePartitions, routedPartitions: routedPartitions, group: group),
            writerClock
        )
    }

    /// The origin a record begins with, without reading its events: who wrote it.
    public static func origin(of bytes: UnsafeRawBufferPointer) throws(DecodingError) -> Origin {
        var reader = Reader(bytes: bytes)
        return try readHeader(&reader).origin
    }

    /// Event `number` of an events record, with its original if it carries one. Events have no
    /// length of their own: the ones before it are read too. For a dead letter, which needs one
    /// event of a record (`decode` gives a record's late hits at once).
    public static func event(_ number: Int, in bytes: UnsafeRawBufferPointer) throws(DecodingError) -> Event? {
        guard case .events(let record) = try decode(bytes), record.events.indices.contains(number) else { return nil }
        return record.events[number]
    }

    /// How many events an events record says it holds, bounded by what its bytes could hold (0
    /// for a marks record, or for bytes that do not begin like a record of this version), read
    /// from its header alone. The aggregate stage makes room for a batch's events with it: grown
    /// one record at a time, the batch's events were copied about once over, and reallocated
    /// about a dozen times a batch (141 instructions a hit, callgrind).
    public static func eventCount(in bytes: UnsafeRawBufferPointer) -> Int {
        var reader = Reader(bytes: bytes)
        do {
            guard try reader.byte() == version, try reader.byte() == Kind.events.rawValue else { return 0 }
            _ = try reader.varint()
            _ = try reader.varint()
            try reader.skip(try reader.count())
            try reader.skip(try reader.count())
            _ = try reader.varint()
            // An event takes at least five bytes (head, shape, two deltas, its broadlog id's length).
            return min(Int(try reader.integer(UInt32.self)), bytes.count / 5)
        } catch {
            return 0
        }
    }

    /// A record, its events gathered: for tests, inspection and a record's dead letters.
    public static func decode(_ bytes: UnsafeRawBufferPointer) throws(DecodingError) -> Decoded {
        switch try read(bytes) {
        case .marks(let marks):
            return .marks(marks)
        case .events(var reader):
            var events: [Event] = []
            events.reserveCapacity(min(reader.remaining, bytes.count / 4))
            while reader.remaining > 0 { events.append(try reader.next()) }
            try reader.finish()
            return .events(Events(
                origin: reader.origin, writerClock: reader.writerClock, events: events, deliveries: reader.deliveries, marks: reader.marks,
                epochs: reader.epochs, begins: reader.begins))
        }
    }

    /// A record as it is read: a marks record whole, an events record's header and tables,
    /// with its events to be read one at a time (`EventsReader`).
    public enum Reading {
        case events(EventsReader)
        case marks(Marks)
    }

    /// Reads a record's header and tables; an events record's events are read by the reader
    /// returned, which `decode` gathers.
    public static func read(_ bytes: UnsafeRawBufferPointer) throws(DecodingError) -> Reading {
        var reader = Reader(bytes: bytes)
        let (kind, origin, writerClock) = try readHeader(&reader)
        switch Kind(rawValue: kind) {
        case .events:
            let count = Int(try reader.integer(UInt32.self))
            let tablesAt = Int(try reader.integer(UInt32.self))
            guard tablesAt >= reader.position, tablesAt <= bytes.count else {
                throw DecodingError(description: "repartition record whose tables lie outside it")
            }
            var tables = Reader(bytes: UnsafeRawBufferPointer(rebasing: bytes[tablesAt...]))
            let deliveryCount = try tables.count()
            var deliveries: [UnsafeRawBufferPointer] = []
            deliveries.reserveCapacity(min(deliveryCount, bytes.count))
            for _ in 0..<deliveryCount { deliveries.append(try tables.slice(try tables.count())) }
            let (marks, epochs, begins) = try readSourceTable(&tables, writerClock: writerClock)
            guard tables.isAtEnd else { throw DecodingError(description: "repartition record with trailing bytes") }
            var region = Reader(bytes: UnsafeRawBufferPointer(rebasing: bytes[0..<tablesAt]))
            // The events begin after the header, which `reader` has read.
            try region.skip(reader.position)
            return .events(EventsReader(
                origin: origin, writerClock: writerClock, deliveries: deliveries, marks: marks, epochs: epochs, begins: begins,
                left: count, cursor: EventCursor(writerClock: writerClock, sources: marks.count), region: region))
        case .marks:
            let (marks, epochs, begins) = try readSourceTable(&reader, writerClock: writerClock)
            guard reader.isAtEnd else { throw DecodingError(description: "repartition record with trailing bytes") }
            return .marks(Marks(origin: origin, writerClock: writerClock, marks: marks, epochs: epochs, begins: begins))
        case nil:
            throw DecodingError(description: "repartition record of unknown kind \(kind)")
        }
    }

    private static func readSourceTable(_ reader: inout Reader, writerClock: Int64) throws(DecodingError) -> (
        [SourceMark], [UInt32], [Bool]
    ) {
        let count = try reader.count()
        var marks: [SourceMark] = []
        var epochs: [UInt32] = []
        var begins: [Bool] = []
        marks.reserveCapacity(min(count, 1 << 16))
        epochs.reserveCapacity(min(count, 1 << 16))
        begins.reserveCapacity(min(count, 1 << 16))
        for _ in 0..<count {
            let source = try reader.varint()
            let epoch = try reader.varint()
            guard source <= UInt64(Int32.max), epoch <= UInt64(UInt32.max) else {
                throw DecodingError(description: "repartition record naming a source partition or epoch out of range")
            }
            let flags = try reader.byte()
            let watermark = flags & SourceFlag.hasWatermark != 0 ? writerClock &+ (try reader.zigzag()) : nil
            let quietSince = flags & SourceFlag.hasQuietSince != 0 ? writerClock &+ (try reader.zigzag()) : nil
            marks.append(SourceMark(source: Int32(source), watermark: watermark, idle: flags & SourceFlag.idle != 0, quietSince: quietSince))
            epochs.append(UInt32(epoch))
            begins.append(flags & SourceFlag.begins != 0)
        }
        return (marks, epochs, begins)
    }

    /// The headers that say what was cut of an event's original (`Original.cut`), for its dead
    /// letter.
    public static func cutHeaders(_ cut: UnsafeRawBufferPointer) throws(DecodingError) -> [KafkaHeader] {
        var reader = Reader(bytes: cut)
        var headers: [KafkaHeader] = []
        while !reader.isAtEnd {
            let key = String(decoding: try reader.slice(try reader.count()), as: UTF8.self)
            let value = Array(try reader.slice(try reader.count()))
            headers.append(KafkaHeader(key: key, value: value))
        }
        return headers
    }

    @usableFromInline typealias Reader = ByteReader<DecodingError>
}

extension ByteReader where Failure == RepartitionRecord.DecodingError {
    init(bytes: UnsafeRawBufferPointer) {
        self.init(bytes, cutShort: RepartitionRecord.DecodingError(description: "repartition record cut short"))
    }
}

/// A marks record (`RepartitionRecord.encodeMarks`) bound for one repartition partition,
/// stamped with the writer's clock it was written at.
package struct RepartitionMarks: OutgoingRecord {
    package let partition: Int32?
    let bytes: [UInt8]
    package let timestamp: Int64?

    package init(partition: Int32?, bytes: [UInt8], timestamp: Int64?) { (self.partition, self.bytes, self.timestamp) = (partition, bytes, timestamp) }

    package var destination: Destination { .repartition }
    package var headers: [KafkaHeader] { [] }

    package func withBytes<R>(_ body: (_ key: UnsafeRawBufferPointer?, _ value: UnsafeRawBufferPointer?) throws -> R) rethrows -> R {
        try bytes.withUnsafeBytes { try body(nil, $0) }
    }
}
