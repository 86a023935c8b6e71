import TrackingDomain
import Windowing

/// An events record's events, read one at a time.
///
/// Their reading is offered to the modules that use it for inlining (`@inlinable`, with
/// `ByteReader`'s reads): the aggregate stage makes its own event of each one read, and called,
/// every event was stored into a `RepartitionRecord.Event` of 153 bytes and loaded back.
/// `RepartitionInput.decode` cost 434 instructions a hit with `next` called, 347 inlined
/// (callgrind, two stages, 200,000 live hits).
extension RepartitionRecord {
    /// An events record being read: its header and tables (as `Events` holds them), then its
    /// events in order, one per `next`.
    ///
    /// Why: the aggregate stage makes its own events of a record's as it reads them. Gathered
    /// into an array first (`decode`), every event was built, copied into the array and read
    /// again, and the array allocated and freed per record: `RepartitionInput.decode` cost 628
    /// instructions a hit, 444 read this way (callgrind, two stages, 200,000 live hits).
    public struct EventsReader {
        public let origin: Origin
        public let writerClock: Int64
        public let deliveries: [UnsafeRawBufferPointer]
        public let marks: [SourceMark]
        public let epochs: [UInt32]
        public let begins: [Bool]
        /// How many events the record says are left to read.
        public var remaining: Int { left }
        @usableFromInline var left: Int
        @usableFromInline var cursor: EventCursor
        @usableFromInline var region: Reader

        /// The next event, while `remaining` is above 0. Not an optional: wrapped in one, each
        /// event (153 bytes) was copied three times over, 63 instructions a hit (callgrind).
        @inlinable @inline(__always)
        public mutating func next() throws(DecodingError) -> Event {
            precondition(left > 0, "no event left to read")
            left -= 1
            return try cursor.read(&region, deliveries: deliveries, sources: marks)
        }

        /// Once every event is read: the events must end where the tables begin.
        public func finish() throws(DecodingError) {
            guard region.isAtEnd else { throw DecodingError(description: "repartition record with bytes between its events and its tables") }
        }
    }

    /// Reads events in order: each one's offset and time are deltas from the one before.
    @usableFromInline
    struct EventCursor {
        @usableFromInline var previousTime: Int64
        @usableFromInline var previousOffsets: [Int64]
        @usableFromInline var source = -1

        init(writerClock: Int64, sources: Int) {
            previousTime = writerClock
            previousOffsets = Array(repeating: -1, count: sources)
        }

        @inlinable @inline(__always)
        mutating func read(
            _ reader: inout Reader, deliveries: [UnsafeRawBufferPointer], sources: [SourceMark]
        ) throws(DecodingError) -> Event {
            let head = try reader.byte()
            let second = try reader.byte()
            guard let action = HitAction(rawValue: head & 3), let channel = Channel(rawValue: head >> 2 & 3),
                let platform = Platform(rawValue: head >> 4 & 3), let shape = HitShape(rawValue: second & 7)
            else { throw DecodingError(description: "repartition event with an unknown action, channel, platform or shape code") }
            var delivery = Int(second >> 3)
            if delivery == RepartitionRecord.inlineDeliveries { delivery += try reader.count() }
            guard delivery < deliveries.count else { throw DecodingError(description: "repartition event naming a delivery its record does not list") }
            if head & Head.newSource != 0 {
                source = try reader.count()
            }
            guard source >= 0, source < sources.count else {
                throw DecodingError(description: "repartition event of a source partition its record does not list")
            }
            let offset = previousOffsets[source] &+ (try reader.zigzag()) &+ 1
            previousOffsets[source] = offset
            let eventTime = previousTime &+ (try reader.zigzag())
            previousTime = eventTime
            let broadlog = try reader.slice(try reader.count())
            var original: Original?
            if head & Head.original != 0 {
                let stamp = try reader.varint()
                let timestamp = stamp == 0 ? nil : eventTime &+ Varint.unzigzag(stamp - 1)
                let key = try Self.optional(&reader)
                let value = try Self.optional(&reader)
                let cut = try reader.slice(try reader.count())
                original = Original(key: key, value: value, timestamp: timestamp, cut: cut)
            }
            return Event(
                sourcePartition: sources[source].source, sourceOffset: offset, eventTime: eventTime, action: action, channel: channel,
                platform: platform, shape: shape, delivery: delivery, deliveryId: deliveries[delivery], broadlogId: broadlog,
                original: original)
        }

        @inlinable
        static func optional(_ reader: inout Reader) throws(DecodingError) -> UnsafeRawBufferPointer? {
            let length = try reader.count()
            return length == 0 ? nil : try reader.slice(length - 1)
        }
    }
}
