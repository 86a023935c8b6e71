/// A delivery's id, the aggregation key: its UTF-8 bytes, the first sixteen held inline
/// (`InlineUTF8`).
///
/// One value from the normalizer to the output record: the repartition writer tables it, the
/// reader makes one per record's table entry straight from the bytes, and the window engine
/// hashes, compares and keys its state by it, so that no stage decodes the id into a `String`
/// and back.
public struct DeliveryID: InlineID {
    public let bytes: InlineUTF8

    @inlinable
    public init(bytes: InlineUTF8) {
        self.bytes = bytes
    }
}
