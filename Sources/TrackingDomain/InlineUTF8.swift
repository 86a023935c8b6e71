/// An id's UTF-8 bytes, the first sixteen held inline: what `DeliveryID` and `BroadlogID` are.
///
/// Why: ids seen in campaigns are a few hex digits, so an id is two words and a count, carried,
/// compared and hashed without touching the heap, and made straight from the bytes the scanner
/// validated or a record holds, with no `String` decoded on the way. A longer id (up to the
/// normalizer's `maxIdBytes`) keeps its whole bytes beside the inline words.
///
/// The bytes are valid UTF-8: an id made from bytes that are not is repaired as `String` repairs
/// them, so that it prints, and is written to JSON, as before.
public struct InlineUTF8: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The first sixteen bytes, little-endian, zero beyond the id.
    @usableFromInline package let low: UInt64
    @usableFromInline package let high: UInt64
    public let utf8Count: Int
    /// Every byte, for an id longer than sixteen; nil otherwise.
    @usableFromInline package let spilled: [UInt8]?

    @usableFromInline static let inlineBytes = 16

    /// From bytes of any origin (a record of an internal topic): invalid UTF-8 is repaired.
    /// Inlined where it is used, an ASCII id of up to sixteen bytes (the usual) checked on its
    /// words, which hold every byte of it: the aggregate stage makes ids of every event it reads
    /// back from the repartition topic, and called, checked byte by byte, each cost about 35
    /// instructions more (callgrind). Such an id is made of the words just checked: read again
    /// by `init(unchecked:)`, each cost 35 instructions more (callgrind, two stages).
    @inlinable @inline(__always)
    public init(_ bytes: UnsafeRawBufferPointer) {
        if bytes.count <= Self.inlineBytes {
            let (low, high) = Self.words(bytes)
            if (low | high) & 0x8080_8080_8080_8080 == 0 {
                self.init(low: low, high: high, utf8Count: bytes.count)
                return
            }
        }
        self = Self.checked(bytes)
    }

    /// `init(_:)` for a longer id or one not in ASCII.
    @usableFromInline @inline(never)
    static func checked(_ bytes: UnsafeRawBufferPointer) -> InlineUTF8 {
        isASCII(bytes) ? InlineUTF8(unchecked: bytes) : InlineUTF8(String(decoding: bytes, as: UTF8.self))
    }

    public init(_ text: String) {
        var text = text
        self = text.withUTF8 { InlineUTF8(unchecked: UnsafeRawBufferPointer($0)) }
    }

    /// From bytes known to be valid UTF-8.
    @inlinable
    init(unchecked bytes: UnsafeRawBufferPointer) {
        utf8Count = bytes.count
        (low, high) = Self.words(bytes)
        spilled = bytes.count > Self.inlineBytes ? Array(bytes) : nil
    }

    /// The first sixteen bytes as words, little-endian, zero beyond the bytes.
    ///
    /// The words are read with at most four loads, overlapping where the bytes are not a
    /// multiple of their size, instead of a `memcpy` into zeroed words: 56 instructions an id
    /// before, 35 now (callgrind), for two ids every hit.
    @inlinable @inline(__always)
    static func words(_ bytes: UnsafeRawBufferPointer) -> (low: UInt64, high: UInt64) {
        let count = bytes.count
        guard let base = bytes.baseAddress, count > 0 else { return (0, 0) }
        @inline(__always) func word(_ offset: Int) -> UInt64 {
            UInt64(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        }
        if count >= 8 {
            // Bytes 8..<count sit at the top of the word that ends them (or of the next one).
            return (word(0), count > inlineBytes ? word(8) : count == 8 ? 0 : word(count - 8) >> (8 * (16 - count)))
        }
        if count >= 4 {
            @inline(__always) func half(_ offset: Int) -> UInt64 {
                UInt64(UInt32(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
            }
            return (half(0) | half(count - 4) << (8 * (count - 4)), 0)
        }
        @inline(__always) func byte(_ offset: Int) -> UInt64 { UInt64(base.load(fromByteOffset: offset, as: UInt8.self)) }
        return (byte(0) | byte(count / 2) << (8 * (count / 2)) | byte(count - 1) << (8 * (count - 1)), 0)
    }

    /// An id of at most sixteen bytes from its words, as `low` and `high` hold them (zero
    /// beyond the id): a table that keeps ids as words hands them back without copying bytes.
    @inlinable
    package init(low: UInt64, high: UInt64, utf8Count: Int) {
        precondition(utf8Count <= Self.inlineBytes, "only an id of at most sixteen bytes is all words")
        self.low = low
        self.high = high
        self.utf8Count = utf8Count
        spilled = nil
    }

    private static func isASCII(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var any: UInt8 = 0
        for byte in bytes { any |= byte }
        return any < 0x80
    }

    /// The id's bytes for the length of `body`.
    @inlinable
    public func withUTF8<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        if let spilled { return try spilled.withUnsafeBytes(body) }
        var words = (low.littleEndian, high.littleEndian)
        return try withUnsafeBytes(of: &words) { try body(UnsafeRawBufferPointer(rebasing: $0[0..<utf8Count])) }
    }

    public var description: String { withUTF8 { String(decoding: $0, as: UTF8.self) } }

    @inlinable
    public static func == (a: InlineUTF8, b: InlineUTF8) -> Bool {
        a.low == b.low && a.high == b.high && a.utf8Count == b.utf8Count
            && (a.utf8Count <= inlineBytes || a.spilled == b.spilled)
    }

    /// The bytes the id has, a word at a time: an id of up to eight bytes, the usual, costs
    /// one round of the hasher. The count is left out, so ids that differ only by trailing NUL
    /// bytes (a JSON `\u0000`) share a hash: a handful at most, told apart by `==`.
    @inlinable
    public func hash(into hasher: inout Hasher) {
        hasher.combine(low)
        if utf8Count > 8 { hasher.combine(high) }
        if let spilled { spilled.withUnsafeBytes { hasher.combine(bytes: UnsafeRawBufferPointer(rebasing: $0[Self.inlineBytes...])) } }
    }

    /// By bytes, which for UTF-8 is the order of the code points.
    public static func < (a: InlineUTF8, b: InlineUTF8) -> Bool {
        a.withUTF8 { x in b.withUTF8 { y in x.lexicographicallyPrecedes(y) } }
    }
}
