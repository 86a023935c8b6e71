import Foundation
import TrackpipeTestSupport

/// An aggregate record read back from the simulated output topic, the way a consumer of the
/// topic would: the key as text, the value as JSON (Foundation's parser, not the worker's
/// writer).
struct OutputRecord {
    var key: String
    var revision: Int
    var index: Int
    var stamp: WriteStamp
    var value: [UInt8]

    /// The counts, as the reference model states them; nil when the value is not a JSON object.
    var counts: ReferenceAggregates.Counts? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(value)) as? [String: Any] else { return nil }
        return ReferenceAggregates.counts(fromJSON: object)
    }

    /// The `revision` field, found by a scan (every record is checked for it, so no full parse).
    static func revision(in value: [UInt8]) -> Int? {
        let needle = Array("\"revision\":".utf8)
        guard value.count > needle.count else { return nil }
        var start = value.count - needle.count
        while start >= 0 {
            if value[start] == needle[0], value[start..<start + needle.count].elementsEqual(needle) {
                var number = 0
                var index = start + needle.count
                var digits = 0
                while index < value.count, let digit = Self.digit(value[index]) {
                    number = number * 10 + digit
                    index += 1
                    digits += 1
                }
                return digits > 0 ? number : nil
            }
            start -= 1
        }
        return nil
    }

    private static func digit(_ byte: UInt8) -> Int? {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") ? Int(byte - UInt8(ascii: "0")) : nil
    }
}
