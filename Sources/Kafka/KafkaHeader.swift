/// A record header. Values are bytes because Kafka's are; `nil` is a header with no value.
public struct KafkaHeader: Sendable, Hashable {
    public var key: String
    public var value: [UInt8]?

    public init(key: String, value: [UInt8]?) {
        self.key = key
        self.value = value
    }

    public init(key: String, string: String) {
        self.init(key: key, value: Array(string.utf8))
    }

    /// The value as UTF-8 text, for headers that carry text.
    public var stringValue: String? { value.map { String(decoding: $0, as: UTF8.self) } }
}

/// Headers encoded one after the other in bytes someone else owns, lent for a produce call: a
/// record that keeps many sets of headers (the dead letters held until a commit) keeps them in
/// one reusable buffer instead of a `KafkaHeader` per header, with a String and an array each,
/// allocated and freed per letter.
///
/// Each header is its name's length (UInt16, little-endian), its name's bytes and a NUL (so that
/// the producer passes the name to librdkafka where it lies), then its value's length (UInt32,
/// little-endian; `UInt32.max`: no value) and the value's bytes.
public struct KafkaHeaderBlock {
    public let bytes: UnsafeRawBufferPointer

    public init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    private static let noValue = UInt32.max

    /// Each header: its name (NUL-terminated, `nameCount` bytes before the NUL) and its value
    /// (nil: none), pointing into `bytes`.
    public func forEach(_ body: (_ name: UnsafePointer<CChar>, _ nameCount: Int, _ value: UnsafeRawBufferPointer?) throws -> Void) rethrows {
        guard let base = bytes.baseAddress else { return }
        var at = 0
        while at < bytes.count {
            let nameCount = Int(UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt16.self)))
            let name = (base + at + 2).assumingMemoryBound(to: CChar.self)
            at += 2 + nameCount + 1
            let length = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt32.self))
            at += 4
            if length == Self.noValue {
                try body(name, nameCount, nil)
            } else {
                try body(name, nameCount, UnsafeRawBufferPointer(start: base + at, count: Int(length)))
                at += Int(length)
            }
        }
    }

    /// How many headers it holds.
    public var count: Int {
        var count = 0
        forEach { _, _, _ in count += 1 }
        return count
    }

    /// The headers as values, for what reads them by name or keeps them (a client without a
    /// native producer, a record cut to fit).
    public var headers: [KafkaHeader] {
        var headers: [KafkaHeader] = []
        forEach { name, nameCount, value in
            let key = String(decoding: UnsafeRawBufferPointer(start: name, count: nameCount), as: UTF8.self)
            headers.append(KafkaHeader(key: key, value: value.map { Array($0) }))
        }
        return headers
    }

    /// Appends a header named `name` to `bytes` with a value of `valueCount` bytes, which `value`
    /// appends (nil: the header has no value, and `value` is not called). Appended piece by
    /// piece through a buffer of each piece, a header cost about 740 instructions, most of what
    /// holding a dead letter cost (callgrind).
    public static func append(name: String, valueCount: Int?, to bytes: inout [UInt8], value: (inout [UInt8]) -> Void = { _ in }) {
        var name = name
        name.withUTF8 { name in
            let nameCount = min(name.count, Int(UInt16.max))
            // Its name and value length written on the stack and appended in one copy: byte by
            // byte, they cost twice as much.
            withUnsafeTemporaryAllocation(byteCount: 2 + nameCount + 1 + 4, alignment: 1) { head in
                // Safe: the allocation has at least seven bytes.
                let raw = head.baseAddress!
                raw.storeBytes(of: UInt16(nameCount).littleEndian, as: UInt16.self)
                if let base = name.baseAddress { (raw + 2).copyMemory(from: base, byteCount: nameCount) }
                raw.storeBytes(of: 0, toByteOffset: 2 + nameCount, as: UInt8.self)
                raw.storeBytes(of: UInt32(valueCount ?? Int(noValue)).littleEndian, toByteOffset: 3 + nameCount, as: UInt32.self)
                bytes.append(contentsOf: UnsafeRawBufferPointer(head))
            }
        }
        guard let valueCount else { return }
        let start = bytes.count
        value(&bytes)
        precondition(bytes.count - start == valueCount, "a header's value of another length than announced")
    }

    /// Appends a header whose value is `value`'s UTF-8 bytes.
    public static func append(name: String, string value: String, to bytes: inout [UInt8]) {
        var value = value
        value.withUTF8 { value in append(name: name, valueCount: value.count, to: &bytes) { $0.append(contentsOf: value) } }
    }

    /// Appends `header` to `bytes`.
    public static func append(_ header: KafkaHeader, to bytes: inout [UInt8]) {
        append(name: header.key, valueCount: header.value?.count, to: &bytes) { bytes in
            if let value = header.value { bytes += value }
        }
    }
}
