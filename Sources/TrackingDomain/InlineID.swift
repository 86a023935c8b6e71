/// An id made of its UTF-8 bytes held inline (`InlineUTF8`): what `DeliveryID` and
/// `BroadlogID` share, written once. Each id is a type of its own, so that a broadlog id cannot
/// be passed where a delivery id is meant.
public protocol InlineID: Sendable, Hashable, Comparable, CustomStringConvertible, ExpressibleByStringLiteral
where StringLiteralType == String {
    var bytes: InlineUTF8 { get }
    init(bytes: InlineUTF8)
}

extension InlineID {
    /// An id from bytes known to be valid UTF-8 (the JSON scanner validated them).
    @inlinable
    public init(validUTF8 bytes: UnsafeRawBufferPointer) {
        self.init(bytes: InlineUTF8(unchecked: bytes))
    }

    /// An id from bytes of any origin (a record of an internal topic): invalid UTF-8 is
    /// repaired.
    @inlinable
    public init(_ bytes: UnsafeRawBufferPointer) {
        self.init(bytes: InlineUTF8(bytes))
    }

    public init(_ text: String) {
        self.init(bytes: InlineUTF8(text))
    }

    public init(stringLiteral value: String) {
        self.init(value)
    }

    public var utf8Count: Int { bytes.utf8Count }


    /// The id's bytes for the length of `body`.
    @inlinable
    public func withUTF8<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try bytes.withUTF8(body)
    }

    public var description: String { bytes.description }

    @inlinable
    public static func == (a: Self, b: Self) -> Bool { a.bytes == b.bytes }

    @inlinable
    public func hash(into hasher: inout Hasher) { bytes.hash(into: &hasher) }

    /// By bytes, which for UTF-8 is the order of the code points.
    public static func < (a: Self, b: Self) -> Bool { a.bytes < b.bytes }
}
