/// A broadlog's id, the recipient's message, which unique counts count: its UTF-8 bytes, the
/// first sixteen held inline (`InlineUTF8`).
///
/// One value from the normalizer to the window's table of broadlogs and the changelog that
/// writes it: the scanner makes it from the bytes it validated, the repartition reader from the
/// record's bytes, and the window engine's table keeps its words as they are, so that no stage
/// decodes the id into a `String` (made three times, that was 2–4 % of a hit's instructions).
public struct BroadlogID: InlineID {
    public let bytes: InlineUTF8

    @inlinable
    public init(bytes: InlineUTF8) {
        self.bytes = bytes
    }

    /// An id of at most sixteen bytes, from its words (see `InlineUTF8.init(low:high:utf8Count:)`).
    @inlinable
    package init(low: UInt64, high: UInt64, utf8Count: Int) {
        bytes = InlineUTF8(low: low, high: high, utf8Count: utf8Count)
    }
}
