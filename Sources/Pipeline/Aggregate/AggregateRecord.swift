import RecordFormats
import Runner
import Kafka
import TrackingDomain
import Windowing

/// The output record of one window emission (spec section 5): key `<deliveryId>@<windowStart>`,
/// a JSON value with the counts. Keys are stable across revisions, so a compacted output topic
/// (or any "last value per key" reader) always holds the full counts.
public enum AggregateRecord {
    public static func key(_ aggregate: WindowAggregate) -> String {
        "\(aggregate.deliveryId)@\(RFC3339.format(epochMillis: aggregate.windowStart))"
    }

    /// After the delivery id, nothing of the value needs escaping (times in RFC 3339, names of
    /// ours, numbers): it is written straight into the writer's bytes, each `,"name":` made
    /// once. Through `JSONWriter.key` and `int`, each name was scanned for characters to escape
    /// and each value checked for its comma, about 10,000 of a record's 15,500 instructions
    /// (callgrind).
    public static func writeValue(_ aggregate: WindowAggregate, into writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("deliveryId"); writer.string(aggregate.deliveryId)
        var bytes: [UInt8] = []
        swap(&bytes, &writer.bytes)
        appendTime(aggregate.windowStart, Members.windowStart, to: &bytes)
        appendTime(aggregate.windowEnd, Members.windowEnd, to: &bytes)
        let counts = Members.counts
        append(aggregate.impressions, counts[0], to: &bytes)
        append(aggregate.clicks, counts[1], to: &bytes)
        append(aggregate.opens, counts[2], to: &bytes)
        append(aggregate.uniqueImpressions, counts[3], to: &bytes)
        append(aggregate.uniqueClicks, counts[4], to: &bytes)
        append(aggregate.uniqueOpens, counts[5], to: &bytes)
        append(aggregate.dismissals, counts[6], to: &bytes)
        append(aggregate.channels, Members.channels, to: &bytes)
        append(aggregate.platforms, Members.platforms, to: &bytes)
        append(aggregate.revision, Members.revision, to: &bytes)
        swap(&bytes, &writer.bytes)
        writer.endObject()
    }

    /// Each `,"name":` the value writes after the delivery id, in its order.
    private enum Members {
        static let windowStart = member("windowStart")
        static let windowEnd = member("windowEnd")
        static let counts = ["impressions", "clicks", "opens", "uniqueImpressions", "uniqueClicks", "uniqueOpens", "dismissals"].map { member($0) }
        /// `,"channels":{` then `"push":`, `,"local":`...: an object of the counts by category,
        /// named as `CountedCategory.name` says.
        static let channels = categories("channels", Channel.allCases)
        static let platforms = categories("platforms", Platform.allCases)
        static let revision = member("revision")

        static func member(_ name: String, first: Bool = false) -> [UInt8] { Array(((first ? "" : ",") + "\"\(name)\":").utf8) }

        static func categories<Category: CountedCategory>(_ name: String, _ all: [Category]) -> [(Category, [UInt8])] {
            all.enumerated().map { index, category in
                (category, (index == 0 ? member(name) + [UInt8(ascii: "{")] : []) + member(category.name, first: index == 0))
            }
        }
    }

    private static func appendTime(_ epochMillis: Int64, _ member: [UInt8], to bytes: inout [UInt8]) {
        bytes += member
        bytes.append(UInt8(ascii: "\""))
        var time = RFC3339.format(epochMillis: epochMillis)
        time.withUTF8 { bytes.append(contentsOf: $0) }
        bytes.append(UInt8(ascii: "\""))
    }

    private static func append<Category: CountedCategory>(_ counts: CategoryCounts<Category>, _ members: [(Category, [UInt8])], to bytes: inout [UInt8]) {
        for (category, member) in members { append(counts[category], member, to: &bytes) }
        bytes.append(UInt8(ascii: "}"))
    }

    /// `member`, then `value` in decimal, as `JSONWriter.int` writes it.
    private static func append(_ value: Int, _ member: [UInt8], to bytes: inout [UInt8]) {
        bytes += member
        JSONWriter.appendDecimal(Int64(value), to: &bytes)
    }
}

/// One window's aggregate record (`AggregateRecord`), bound for the output topic. The producer
/// places it by key, so that every revision of a window lands in one partition, in order.
struct AggregateOutput: OutgoingRecord {
    let key: String
    let windowSize: Int64?
    /// The JSON counts, lent from the emitter's writer (reused for the next window).
    let value: [UInt8]

    var destination: Destination { .output }
    var partition: Int32? { nil }
    var headers: [KafkaHeader] { [] }
    /// The producer's clock: the record is about a window, not a moment.
    var timestamp: Int64? { nil }

    func withBytes<R>(_ body: (_ key: UnsafeRawBufferPointer?, _ value: UnsafeRawBufferPointer?) throws -> R) rethrows -> R {
        var key = key
        return try key.withUTF8 { key in try value.withUnsafeBytes { value in try body(UnsafeRawBufferPointer(key), value) } }
    }
}

/// Sends aggregate records to the output, one JSON writer reused for every value, and notes in
/// the stage's report how long after its window's end each went out.
struct AggregateEmitter: Sendable {
    private var writer = JSONWriter()

    mutating func emit(
        _ aggregates: [WindowAggregate], now: Int64, report: inout StageReport, into sink: inout some RecordSink
    ) throws {
        for aggregate in aggregates {
            writer.removeAll()
            AggregateRecord.writeValue(aggregate, into: &writer)
            try sink.send(
                AggregateOutput(key: AggregateRecord.key(aggregate), windowSize: aggregate.key.size, value: writer.bytes))
            report.emitDelays.append(max(0, Double(now - aggregate.windowEnd) / 1000))
        }
        report.accounting.emitted += aggregates.count
    }
}
