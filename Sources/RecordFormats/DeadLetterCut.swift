import Kafka

/// A dead letter cut to what the dead-letter topic takes.
///
/// A dead letter carries the original key and value unchanged, so that a fixed message can be
/// sent again as it was. A message can be larger than the dead-letter topic accepts, though (a
/// 1.5 MB hit is exactly what `too_large` catches, and a broker takes about 1 MB by default),
/// and a dead letter that cannot be written would stop the worker on that one message for good.
/// So such a letter keeps as much of the key and value as fits, from their start, and says in
/// headers what was cut: each part's original size and SHA-256, beside the source topic,
/// partition and offset that every dead letter carries, where the whole message still is.
public struct DeadLetterCut: Sendable, Equatable {
    /// How many bytes of the key and value the letter keeps (their first ones).
    package var keyBytes: Int
    package var valueBytes: Int
    /// The letter's headers followed by the ones that describe the cut.
    package var headers: [KafkaHeader]

    package enum Header {
        /// Which parts were cut: `key`, `value` or `key,value`.
        package static let truncated = "trackpipe.original.truncated"
        package static let keySize = "trackpipe.original.key.size"
        package static let valueSize = "trackpipe.original.value.size"
        package static let keySHA256 = "trackpipe.original.key.sha256"
        package static let valueSHA256 = "trackpipe.original.value.sha256"
    }

    /// Bytes a record costs beyond its key, value and header bytes, with room to spare: the
    /// record batch's header (61 bytes in format v2), the record's own varints and attributes,
    /// and per header two length varints. librdkafka refuses a record over `message.max.bytes`
    /// counted this way before it is sent, and puts no more than that in one batch.
    static let recordOverhead = 256
    static let headerOverhead = 10

    /// The bytes the record takes on the wire, as far as the limit is concerned: the one count,
    /// whichever way its headers are held.
    static func size(keyBytes: Int, valueBytes: Int, headerBytes: Int, headerCount: Int) -> Int {
        recordOverhead + keyBytes + valueBytes + headerBytes + headerCount * headerOverhead
    }

    /// The same, of headers as values.
    package static func size(keyBytes: Int, valueBytes: Int, headers: [KafkaHeader]) -> Int {
        let headerBytes = headers.reduce(0) { $0 + $1.key.utf8.count + ($1.value?.count ?? 0) }
        return size(keyBytes: keyBytes, valueBytes: valueBytes, headerBytes: headerBytes, headerCount: headers.count)
    }

    /// The same, of headers lent as bytes.
    package static func size(keyBytes: Int, valueBytes: Int, headerBlock: KafkaHeaderBlock) -> Int {
        var headerBytes = 0, headerCount = 0
        headerBlock.forEach { _, nameCount, value in
            headerBytes += nameCount + (value?.count ?? 0)
            headerCount += 1
        }
        return size(keyBytes: keyBytes, valueBytes: valueBytes, headerBytes: headerBytes, headerCount: headerCount)
    }

    /// The cut that makes a letter of this key, value and headers fit `limit` bytes, or nil when
    /// it fits as it is. The key keeps up to an eighth of the room (it names the device; a key
    /// larger than that is the odd part) and the value the rest, and what either does not need
    /// goes to the other. Headers are never cut: with a limit below what they take alone, the
    /// letter keeps no key or value at all.
    package static func fitting(
        key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?, headers: [KafkaHeader], limit: Int
    ) -> DeadLetterCut? {
        let keyCount = key?.count ?? 0, valueCount = value?.count ?? 0
        guard size(keyBytes: keyCount, valueBytes: valueCount, headers: headers) > limit else { return nil }
        // The headers the cut adds, at their largest (64 hex digits, up to 20 size digits).
        let noHash = String(repeating: "0", count: 64)
        var added: [KafkaHeader] = [KafkaHeader(key: Header.truncated, string: "key,value")]
        if key != nil { added += original(Header.keySize, Header.keySHA256, size: keyCount, sha256: noHash) }
        if value != nil { added += original(Header.valueSize, Header.valueSHA256, size: valueCount, sha256: noHash) }
        let room = max(0, limit - size(keyBytes: 0, valueBytes: 0, headers: headers + added))
        var keyKept = min(keyCount, room / 8)
        let valueKept = min(valueCount, room - keyKept)
        keyKept = min(keyCount, room - valueKept)

        var cut: [String] = []
        var described: [KafkaHeader] = []
        if let key, keyKept < keyCount {
            cut.append("key")
            described += original(Header.keySize, Header.keySHA256, size: keyCount, sha256: SHA256.hex(key))
        }
        if let value, valueKept < valueCount {
            cut.append("value")
            described += original(Header.valueSize, Header.valueSHA256, size: valueCount, sha256: SHA256.hex(value))
        }
        return DeadLetterCut(
            keyBytes: keyKept, valueBytes: valueKept,
            headers: headers + [KafkaHeader(key: Header.truncated, string: cut.joined(separator: ","))] + described)
    }

    /// The two headers that describe a part that was cut: its original size and SHA-256.
    private static func original(_ sizeHeader: String, _ hashHeader: String, size: Int, sha256: String) -> [KafkaHeader] {
        [KafkaHeader(key: sizeHeader, string: String(size)), KafkaHeader(key: hashHeader, string: sha256)]
    }
}
