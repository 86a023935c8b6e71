/// Finds messages of the input topic by their position, for the `too_late` dead letters of
/// hits that crossed the shuffle without their original bytes (see `RepartitionRecord`).
///
/// The aggregate stage asks for all it needs at once: at a commit for the dead letters it held
/// until then, or for a batch's when it sends them at once. A position the result lacks is no
/// longer in the input (its retention passed, or the topic was deleted); a lookup that cannot
/// reach the topic within its bound throws, and the letters go with the hit as normalized,
/// naming the position (a commit, and above all a revoke, must not wait on the input's leader).
public protocol OriginalLookup: Sendable {
    func messages(at positions: Set<InputPosition>) throws -> [InputPosition: InputMessage]
}

/// Where a message sits in a topic.
public struct InputPosition: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32
    public var offset: Int64

    public init(topic: String, partition: Int32, offset: Int64) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
    }

    public static func < (a: Self, b: Self) -> Bool {
        (a.topic, a.partition, a.offset) < (b.topic, b.partition, b.offset)
    }

    public var description: String { "\(topic)[\(partition)]@\(offset)" }
}

/// A message as it is stored: its key, value and timestamp.
public struct InputMessage: Sendable, Equatable {
    public var key: [UInt8]?
    public var value: [UInt8]?
    public var timestamp: Int64?

    public init(key: [UInt8]?, value: [UInt8]?, timestamp: Int64?) {
        self.key = key
        self.value = value
        self.timestamp = timestamp
    }
}

/// A dead letter whose original bytes stayed in the input topic: where to read them, what they
/// must look like to be the same message, and what to send if they are gone.
public struct LeftOriginal: Sendable {
    public var position: InputPosition
    public var shape: RepartitionRecord.OriginalShape
    public var timestamp: Int64?
    /// The hit as trackpipe normalized it (JSON), sent in the message's place if the input no
    /// longer holds it.
    public var standIn: [UInt8]

    /// Whether `message` is the one this dead letter is about.
    func matches(_ message: InputMessage) -> Bool {
        message.key?.count == shape.keyLength && message.value?.count == shape.valueLength && message.timestamp == timestamp
    }

    /// The detail of a dead letter sent with the stand-in because the input could not be read.
    func unreadableNote(_ error: String) -> String {
        "; the original message at \(position) could not be read back (\(error)), so the value is the hit as trackpipe normalized it; the whole message is still in the input at that position"
    }

    /// The detail of a dead letter sent with the stand-in.
    func missingNote(found: Bool) -> String {
        "; the original message was \(found ? "replaced" : "no longer") at \(position)\(found ? " by another (the topic was recreated)" : " (its retention passed, or the topic was recreated)"), so the value is the hit as trackpipe normalized it"
    }
}
