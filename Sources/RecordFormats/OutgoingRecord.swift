import Kafka

/// A record a stage sends, as a value that knows where it goes and writes its own bytes. Each
/// kind of record is a type of its own, so that what differs between kinds (where they go, how
/// a record too large is treated) is decided by the type that knows, once, rather than by every
/// sink comparing destinations.
///
/// A record lends its key and value rather than handing over arrays: most records are views of
/// bytes that already exist (the input record a dead letter is about, the buffer an events
/// record was written into), and a sink that keeps them copies them itself.
public protocol OutgoingRecord {
    var destination: Destination { get }
    /// Of an `.output` record, the size (ms) of the window it is about: a pipeline of several
    /// sizes writes each size to a topic of its own. nil: the one output topic.
    var windowSize: Int64? { get }
    /// nil: the producer chooses by key.
    var partition: Int32? { get }
    var headers: [KafkaHeader] { get }
    /// Epoch ms; nil: the producer stamps the current time.
    var timestamp: Int64? { get }

    /// Lends the key and value for the length of `body` (nil: the record has none; a nil value
    /// is a tombstone).
    func withBytes<R>(_ body: (_ key: UnsafeRawBufferPointer?, _ value: UnsafeRawBufferPointer?) throws -> R) rethrows -> R

    /// Lends the headers as bytes for the length of `body`, for a record that keeps them so
    /// (`headers` then decodes them); nil: the record has only `headers`.
    func withHeaderBlock<R>(_ body: (KafkaHeaderBlock?) throws -> R) rethrows -> R

    /// What a record of this type with these parts (`key` and `value` as `withBytes` lends them)
    /// becomes where a record may take at most `limit` bytes. A type decides it for all its
    /// records: whether losing bytes is acceptable depends on what the record is for, which the
    /// sink cannot know.
    static func fit(key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?, headers: [KafkaHeader], limit: Int) -> RecordFit
}

extension OutgoingRecord {
    public var windowSize: Int64? { nil }

    public func withHeaderBlock<R>(_ body: (KafkaHeaderBlock?) throws -> R) rethrows -> R { try body(nil) }

    /// Never cut: the records trackpipe reads back (state, repartitioned events) or publishes
    /// (aggregates) are worth nothing with bytes missing, so one the producer refuses for its
    /// size stops the run with what to change instead.
    public static func fit(key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?, headers: [KafkaHeader], limit: Int) -> RecordFit {
        .neverCut
    }
}

/// What a record becomes where a record may take at most a given number of bytes.
public enum RecordFit: Sendable, Equatable {
    /// Sent whole, whatever its size (the type is never cut).
    case neverCut
    /// Sent whole: it fits. The producer refusing it for its size all the same (it counts the
    /// overhead its own way) is answered by trying a smaller limit.
    case fits
    /// Sent cut: the first bytes of the key and value that the cut keeps, with its headers.
    case cut(DeadLetterCut)

    /// Whether a smaller limit could make the record smaller.
    package var cuts: Bool { self != .neverCut }
}

/// A record for the dead-letter topic. A dead letter is cut to fit rather than refused: it
/// exists to be looked at, its headers say where the whole message still is, and one that
/// cannot be written would stop the worker on that one message for good (`DeadLetterCut`).
public protocol DeadLetterRecord: OutgoingRecord {}

extension DeadLetterRecord {
    public var destination: Destination { .deadLetter }
    /// Nothing reads dead letters by partition: the producer places them (by key).
    public var partition: Int32? { nil }

    public static func fit(key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?, headers: [KafkaHeader], limit: Int) -> RecordFit {
        DeadLetterCut.fitting(key: key, value: value, headers: headers, limit: limit).map(RecordFit.cut) ?? .fits
    }
}

extension Optional where Wrapped == [UInt8] {
    /// The bytes as a buffer for the length of `body`, or nil.
    package func withOptionalBytes<R>(_ body: (UnsafeRawBufferPointer?) throws -> R) rethrows -> R {
        guard let self else { return try body(nil) }
        return try self.withUnsafeBytes { try body($0) }
    }
}
