import Kafka

extension HeaderCount {
    /// A count given by a test for a record it makes by hand (the pointer carries the number).
    package static func known(_ count: Int) -> HeaderCount {
        HeaderCount(of: UnsafeRawPointer(bitPattern: count)) { Int(bitPattern: $0) }
    }
}
