/// Reads the little-endian binary formats trackpipe writes for itself (repartition records,
/// changelog records): bytes, integers and slices, in order, throwing the reader's own error
/// when the data ends too soon.
///
/// Its reads are inlined: each is a bounds check and a load, where a call cost about as much
/// again, several times per repartition event (callgrind).
///
/// Offered for inlining to the modules above (`@usableFromInline`), with the reading of a
/// repartition record's events (`RepartitionRecord.EventsReader`): `position` is set from
/// inlined code, so its setter is internal.
@usableFromInline
struct ByteReader<Failure: Error> {
    @usableFromInline let bytes: UnsafeRawBufferPointer
    /// What to throw when the bytes end before what is read.
    @usableFromInline let cutShort: Failure
    @usableFromInline var position = 0

    init(_ bytes: UnsafeRawBufferPointer, cutShort: Failure) {
        self.bytes = bytes
        self.cutShort = cutShort
    }

    @inlinable
    var isAtEnd: Bool { position == bytes.count }

    @inlinable @inline(__always)
    mutating func byte() throws(Failure) -> UInt8 {
        guard position < bytes.count else { throw cutShort }
        defer { position += 1 }
        return bytes[position]
    }

    @inlinable @inline(__always)
    mutating func integer<T: FixedWidthInteger>(_: T.Type) throws(Failure) -> T {
        let size = MemoryLayout<T>.size
        guard position + size <= bytes.count else { throw cutShort }
        defer { position += size }
        return T(littleEndian: bytes.loadUnaligned(fromByteOffset: position, as: T.self))
    }

    @inlinable @inline(__always)
    mutating func slice(_ count: Int) throws(Failure) -> UnsafeRawBufferPointer {
        guard count >= 0, position + count <= bytes.count else { throw cutShort }
        defer { position += count }
        return UnsafeRawBufferPointer(rebasing: bytes[position..<position + count])
    }

    /// Moves past `count` bytes already read another way.
    @inlinable @inline(__always)
    mutating func skip(_ count: Int) throws(Failure) {
        guard count >= 0, position + count <= bytes.count else { throw cutShort }
        position += count
    }
}
