/// Reads the little-endian binary formats trackpipe writes for itself (repartition records,
/// changelog records): bytes, integers and slices, in order, throwing the reader's own error
/// when the data ends too soon.
struct ByteReader<Failure: Error> {
    let bytes: UnsafeRawBufferPointer
    /// What to throw when the bytes end before what is read.
    let cutShort: Failure
    private(set) var position = 0

    init(_ bytes: UnsafeRawBufferPointer, cutShort: Failure) {
        self.bytes = bytes
        self.cutShort = cutShort
    }

    var isAtEnd: Bool { position == bytes.count }

    mutating func byte() throws(Failure) -> UInt8 {
        guard position < bytes.count else { throw cutShort }
        defer { position += 1 }
        return bytes[position]
    }

    mutating func integer<T: FixedWidthInteger>(_: T.Type) throws(Failure) -> T {
        let size = MemoryLayout<T>.size
        guard position + size <= bytes.count else { throw cutShort }
        defer { position += size }
        return T(littleEndian: bytes.loadUnaligned(fromByteOffset: position, as: T.self))
    }

    mutating func slice(_ count: Int) throws(Failure) -> UnsafeRawBufferPointer {
        guard count >= 0, position + count <= bytes.count else { throw cutShort }
        defer { position += count }
        return UnsafeRawBufferPointer(rebasing: bytes[position..<position + count])
    }
}

extension ByteReader {
    /// An unsigned LEB128 varint of at most ten bytes.
    mutating func varint() throws(Failure) -> UInt64 {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while shift < 64 {
            let next = try byte()
            value |= UInt64(next & 0x7F) << shift
            if next & 0x80 == 0 { return value }
            shift += 7
        }
        throw cutShort
    }
}
