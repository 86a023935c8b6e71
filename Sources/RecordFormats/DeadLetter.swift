import Kafka
import TrackingDomain

/// Why a message did not become a counted hit, and where it came from. The dead-letter record
/// itself carries the original key and value bytes unchanged (so a fixed message can be
/// sent again as is); this context travels in headers, as Kafka Connect's dead-letter queues do.
public struct DeadLetter: Sendable, Equatable {
    public var reason: RejectReason
    /// What is wrong and what to do; its header gives it after the reason's code.
    public var detail: String
    public var sourceTopic: String
    public var sourcePartition: Int32
    public var sourceOffset: Int64

    public init(reason: RejectReason, detail: String, sourceTopic: String, sourcePartition: Int32, sourceOffset: Int64) {
        self.reason = reason
        self.detail = detail
        self.sourceTopic = sourceTopic
        self.sourcePartition = sourcePartition
        self.sourceOffset = sourceOffset
    }

    public enum Header {
        public static let reason = "trackpipe.error.reason"
        public static let detail = "trackpipe.error.detail"
        public static let sourceTopic = "trackpipe.source.topic"
        public static let sourcePartition = "trackpipe.source.partition"
        public static let sourceOffset = "trackpipe.source.offset"
        /// `true`: the value is not the message but the hit as trackpipe normalized it (JSON, as
        /// `trackpipe normalize` writes events), and the key is absent: a `too_late` hit whose
        /// original did not cross the shuffle (docs/tracking-hits.md, section 4).
        public static let normalized = "trackpipe.original.normalized"
    }

    public var headers: [KafkaHeader] {
        [
            KafkaHeader(key: Header.reason, string: reason.rawValue),
            KafkaHeader(key: Header.detail, string: reason.written(detail: detail)),
            KafkaHeader(key: Header.sourceTopic, string: sourceTopic),
            KafkaHeader(key: Header.sourcePartition, string: String(sourcePartition)),
            KafkaHeader(key: Header.sourceOffset, string: String(sourceOffset)),
        ]
    }

    /// `headers`, byte for byte, as a block of header bytes (`KafkaHeaderBlock`) appended to
    /// `bytes`: as values, each of the five headers was a String and an array made and freed
    /// per letter.
    package func appendHeaderBlock(to bytes: inout [UInt8]) {
        var code = self.reason.rawValue, detail = self.detail
        KafkaHeaderBlock.append(name: Header.reason, string: code, to: &bytes)
        code.withUTF8 { reason in
            detail.withUTF8 { detail in
                // `RejectReason.written(detail:)`: the code, ": ", the detail.
                KafkaHeaderBlock.append(name: Header.detail, valueCount: reason.count + 2 + detail.count, to: &bytes) { bytes in
                    bytes.append(contentsOf: reason)
                    bytes.append(UInt8(ascii: ":"))
                    bytes.append(UInt8(ascii: " "))
                    bytes.append(contentsOf: detail)
                }
            }
        }
        KafkaHeaderBlock.append(name: Header.sourceTopic, string: sourceTopic, to: &bytes)
        KafkaHeaderBlock.append(name: Header.sourcePartition, string: String(sourcePartition), to: &bytes)
        KafkaHeaderBlock.append(name: Header.sourceOffset, string: String(sourceOffset), to: &bytes)
    }

    /// Reads the context back from a dead-letter record's headers; nil if any is missing, or the
    /// reason is none this version gives.
    public init?(headers: [KafkaHeader]) {
        func value(_ key: String) -> String? { headers.last(where: { $0.key == key })?.stringValue }
        guard let reason = value(Header.reason).flatMap(RejectReason.init(rawValue:)), let detail = value(Header.detail), let topic = value(Header.sourceTopic),
            let partition = value(Header.sourcePartition).flatMap({ Int32($0) }),
            let offset = value(Header.sourceOffset).flatMap({ Int64($0) })
        else { return nil }
        let code = reason.written(detail: "")
        self.init(reason: reason, detail: detail.hasPrefix(code) ? String(detail.dropFirst(code.count)) : detail, sourceTopic: topic, sourcePartition: partition, sourceOffset: offset)
    }
}

/// The dead letter of an input record the normalize stage rejected: the record's key, value
/// and timestamp lent as they were read, so that a fixed message is sent again as it arrived, and
/// the context in headers.
package struct InputDeadLetter: DeadLetterRecord {
    let letter: DeadLetter
    let record: PolledRecord

    package init(letter: DeadLetter, record: PolledRecord) { (self.letter, self.record) = (letter, record) }

    package var headers: [KafkaHeader] { letter.headers }
    package var timestamp: Int64? { record.timestamp }

    /// Its headers as one block: a rejected hit of the normalize stage is sent at once, and a
    /// block costs one buffer where the headers as values cost a String and an array each.
    package func withHeaderBlock<R>(_ body: (KafkaHeaderBlock?) throws -> R) rethrows -> R {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(256 + letter.detail.utf8.count + letter.sourceTopic.utf8.count)
        letter.appendHeaderBlock(to: &bytes)
        return try bytes.withUnsafeBytes { try body(KafkaHeaderBlock($0)) }
    }

    package func withBytes<R>(_ body: (_ key: UnsafeRawBufferPointer?, _ value: UnsafeRawBufferPointer?) throws -> R) rethrows -> R {
        try body(record.key, record.value)
    }
}

/// A dead letter that owns its bytes, for one sent after the record it is about is gone: a
/// letter the broker refused for its size comes back from librdkafka as a copy, to be sent
/// again cut to a smaller limit (by the rule of every dead letter). The aggregate stage's
/// letters held until the commit are `HeldDeadLetters`, which owns them in one buffer.
package struct OwnedDeadLetter: DeadLetterRecord, Sendable {
    package var headers: [KafkaHeader]
    var key: [UInt8]?
    var value: [UInt8]?
    package var timestamp: Int64?

    package init(_ refused: RefusedRecord) {
        headers = refused.headers
        key = refused.key
        value = refused.value
        timestamp = refused.timestamp
    }

    package func withBytes<R>(_ body: (_ key: UnsafeRawBufferPointer?, _ value: UnsafeRawBufferPointer?) throws -> R) rethrows -> R {
        try key.withOptionalBytes { key in try value.withOptionalBytes { value in try body(key, value) } }
    }
}

/// A dead letter ready to send: the original bytes and the context headers.
public struct OutgoingDeadLetter {
    public var letter: DeadLetter
    public var key: UnsafeRawBufferPointer?
    public var value: UnsafeRawBufferPointer?
    public var timestamp: Int64?
    /// What was cut of an original too large to cross the shuffle whole (`DeadLetterCut`'s
    /// headers); empty when `key` and `value` are whole.
    public var cut: [KafkaHeader] = []
    /// The hit as trackpipe normalized it, sent instead of an original that did not cross the
    /// shuffle (`OriginalRule`'s exceptions); `key` and `value` are then nil.
    public var normalized: [UInt8]?

    package init(
        letter: DeadLetter, key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?, timestamp: Int64?, cut: [KafkaHeader] = [],
        normalized: [UInt8]? = nil
    ) {
        (self.letter, self.key, self.value, self.timestamp, self.cut, self.normalized) = (letter, key, value, timestamp, cut, normalized)
    }

    /// The headers to send: the context, then what was cut, or that the value is the hit as
    /// normalized.
    public var headers: [KafkaHeader] {
        if normalized != nil { return letter.headers + [KafkaHeader(key: DeadLetter.Header.normalized, string: "true")] }
        return cut.isEmpty ? letter.headers : letter.headers + cut
    }
}
