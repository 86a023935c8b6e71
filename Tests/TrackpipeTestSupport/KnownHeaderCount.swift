import Kafka

extension HeaderCount {
    /// A count given by a test for a record it makes by hand (the pointer carries the number).
    public static func known(_ count: Int) -> HeaderCount {
        HeaderCount(of: UnsafeRawPointer(bitPattern: count)) { Int(bitPattern: $0) }
    }
}
