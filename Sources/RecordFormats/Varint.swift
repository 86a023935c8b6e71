/// Variable-length integers, as Kafka's own records and protobuf write them: seven bits a byte,
/// low bits first, the high bit saying another byte follows (LEB128). Signed values go through
/// zigzag first, so that small negative numbers stay short too. The repartition record is made
/// of small numbers (deltas, indices, lengths), which this writes in one or two bytes instead of
/// four or eight.
@usableFromInline
enum Varint {
    /// The most bytes one value takes.
    static let maxBytes = 10

    @inline(__always)
    static func zigzag(_ value: Int64) -> UInt64 {
        UInt64(bitPattern: (value &<< 1) ^ (value >> 63))
    }

    @inlinable @inline(__always)
    static func unzigzag(_ value: UInt64) -> Int64 {
        Int64(bitPattern: value >> 1) ^ -Int64(bitPattern: value & 1)
    }

    /// How many bytes `value` takes.
    static func size(of value: UInt64) -> Int {
        var size = 1
        var value = value
        while value >= 0x80 {
            size += 1
            value >>= 7
        }
        return size
    }

    /// Writes `value` at `at` (`maxBytes` of room must be there) and returns where it ends.
    @inline(__always)
    static func write(_ value: UInt64, to raw: UnsafeMutableRawPointer, at: Int) -> Int {
        var value = value
        var at = at
        while value >= 0x80 {
            raw.storeBytes(of: UInt8(truncatingIfNeeded: value) | 0x80, toByteOffset: at, as: UInt8.self)
            value >>= 7
            at += 1
        }
        raw.storeBytes(of: UInt8(truncatingIfNeeded: value), toByteOffset: at, as: UInt8.self)
        return at + 1
    }

    static func append(_ value: UInt64, to bytes: inout [UInt8]) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(truncatingIfNeeded: value))
    }
}

extension ByteReader {
    /// A varint; more than ten bytes, or bits beyond 64, are a malformed record.
    ///
    /// Most of a repartition event's numbers take one byte, and its time's delta two: read here
    /// inline, the rest by `longVarint`. Called, every varint cost a call of about 25
    /// instructions, five or more an event, and a two-byte one about 60, once an event
    /// (callgrind).
    @inlinable @inline(__always)
    mutating func varint() throws(Failure) -> UInt64 {
        if position + 1 < bytes.count {
            let first = bytes[position]
            if first < 0x80 {
                try skip(1)
                return UInt64(first)
            }
            let second = bytes[position + 1]
            if second < 0x80 {
                try skip(2)
                return UInt64(first & 0x7F) | UInt64(second) << 7
            }
        }
        return try longVarint()
    }

    /// A varint of any length (`varint`).
    @usableFromInline
    mutating func longVarint() throws(Failure) -> UInt64 {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let byte = try self.byte()
            guard shift < 64, shift < 63 || byte <= 1 else { throw cutShort }
            value |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 { return value }
            shift += 7
        }
    }

    @inlinable @inline(__always)
    mutating func zigzag() throws(Failure) -> Int64 {
        Varint.unzigzag(try varint())
    }

    /// A varint that must fit an `Int` count or length.
    @inlinable @inline(__always)
    mutating func count() throws(Failure) -> Int {
        let value = try varint()
        guard value <= UInt64(Int32.max) else { throw cutShort }
        return Int(value)
    }
}
