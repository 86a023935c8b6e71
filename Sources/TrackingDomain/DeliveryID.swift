/// A delivery's id, the aggregation key: its UTF-8 bytes, the first sixteen held inline.
///
/// One value from the normalizer to the output record: the repartition writer tables it, the
/// reader makes one per record's table entry straight from the bytes, and the window engine
/// hashes, compares and keys its state by it, so that no stage decodes the id into a `String`
/// and back. Ids seen in campaigns are a few hex digits, so an id is two words and a count:
/// carried, compared and hashed without touching the heap. A longer id (up to the normalizer's
/// `maxIdBytes`) keeps its whole bytes beside the inline words.
///
/// The bytes are valid UTF-8: an id made from bytes that are not is repaired as `String` repairs
/// them, so that it prints, and is written to JSON, as before.
public struct DeliveryID: Sendable, Hashable, Comparable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The first sixteen bytes, little-endian, zero beyond the id.
    @usableFromInline let low: UInt64
    @usableFromInline let high: UInt64
    public let utf8Count: Int
    /// Every byte, for an id longer than sixteen; nil otherwise.
    @usableFromInline let spilled: [UInt8]?

    @usableFromInline static let inlineBytes = 16

    /// An id from bytes known to be valid UTF-8 (the JSON scanner validated them).
    @inlinable
    public init(validUTF8 bytes: UnsafeRawBufferPointer) {
        self.init(unchecked: bytes)
    }

    /// An id from bytes of any origin (a record of an internal topic): invalid UTF-8 is
    /// repaired.
    public init(_ bytes: UnsafeRawBufferPointer) {
        if Self.isASCII(bytes) {
            self.init(unchecked: bytes)
        } else {
            self.init(String(decoding: bytes, as: UTF8.self))
        }
    }

    public init(_ text: String) {
        var text = text
        self = text.withUTF8 { DeliveryID(unchecked: UnsafeRawBufferPointer($0)) }
    }

    public init(stringLiteral value: String) {
        self.init(value)
    }

    @inlinable
    init(unchecked bytes: UnsafeRawBufferPointer) {
        var words: (UInt64, UInt64) = (0, 0)
        let inline = min(bytes.count, Self.inlineBytes)
        if inline > 0 {
            withUnsafeMutableBytes(of: &words) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[0..<inline])) }
        }
        low = UInt64(littleEndian: words.0)
        high = UInt64(littleEndian: words.1)
        utf8Count = bytes.count
        spilled = bytes.count > Self.inlineBytes ? Array(bytes) : nil
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

    public var isEmpty: Bool { utf8Count == 0 }

    public var description: String { withUTF8 { String(decoding: $0, as: UTF8.self) } }

    @inlinable
    public static func == (a: DeliveryID, b: DeliveryID) -> Bool {
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
    public static func < (a: DeliveryID, b: DeliveryID) -> Bool {
        a.withUTF8 { x in b.withUTF8 { y in x.lexicographicallyPrecedes(y) } }
    }
}
