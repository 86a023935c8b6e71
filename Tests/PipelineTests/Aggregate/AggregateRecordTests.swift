import Testing
import TrackingDomain
@testable import Windowing
@testable import Pipeline

/// The bytes of an aggregate record, pinned: every field in its order, as consumers of the
/// output topic have read them since the first release.
@Suite("Aggregate record")
struct AggregateRecordTests {
    @Test("key and value of one window, byte for byte")
    func bytes() {
        let aggregate = WindowAggregate(
            deliveryId: DeliveryID("d57fd6"), windowStart: 1_795_341_600_000, windowEnd: 1_795_341_660_000, impressions: 3, clicks: 2,
            opens: 1, uniqueImpressions: 2, uniqueClicks: 2, uniqueOpens: 1, dismissals: 1,
            channels: ChannelCounts(push: 5, local: 1, unknown: 0), platforms: PlatformCounts(ios: 2, android: 3, unknown: 1), revision: 6)
        var writer = JSONWriter()
        AggregateRecord.writeValue(aggregate, into: &writer)
        #expect(AggregateRecord.key(aggregate) == "d57fd6@2026-11-22T10:00:00Z")
        #expect(
            String(decoding: writer.bytes, as: UTF8.self)
                == #"{"deliveryId":"d57fd6","windowStart":"2026-11-22T10:00:00Z","windowEnd":"2026-11-22T10:01:00Z","impressions":3,"clicks":2,"opens":1,"uniqueImpressions":2,"uniqueClicks":2,"uniqueOpens":1,"dismissals":1,"channels":{"push":5,"local":1,"unknown":0},"platforms":{"ios":2,"android":3,"unknown":1},"revision":6}"#)
    }

    /// The value as `JSONWriter` writes each member: what `writeValue` writes straight into its bytes.
    static func reference(_ aggregate: WindowAggregate) -> [UInt8] {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("deliveryId"); writer.string(aggregate.deliveryId)
        writer.key("windowStart"); writer.string(RFC3339.format(epochMillis: aggregate.windowStart))
        writer.key("windowEnd"); writer.string(RFC3339.format(epochMillis: aggregate.windowEnd))
        for (name, count) in [
            ("impressions", aggregate.impressions), ("clicks", aggregate.clicks), ("opens", aggregate.opens),
            ("uniqueImpressions", aggregate.uniqueImpressions), ("uniqueClicks", aggregate.uniqueClicks),
            ("uniqueOpens", aggregate.uniqueOpens), ("dismissals", aggregate.dismissals),
        ] {
            writer.key(name); writer.int(count)
        }
        writer.key("channels"); writer.beginObject()
        for channel in Channel.allCases { writer.key(channel.name); writer.int(aggregate.channels[channel]) }
        writer.endObject()
        writer.key("platforms"); writer.beginObject()
        for platform in Platform.allCases { writer.key(platform.name); writer.int(aggregate.platforms[platform]) }
        writer.endObject()
        writer.key("revision"); writer.int(aggregate.revision)
        writer.endObject()
        return writer.bytes
    }

    @Test("the value written in place is what the JSON writer writes, for numbers of every size and sign and an id to escape, in a writer reused after a line")
    func sameAsTheWriter() {
        let values = [0, 9, 10, 1_234_567, Int.max, -1, Int.min]
        var writer = JSONWriter()
        for (index, value) in values.enumerated() {
            let aggregate = WindowAggregate(
                deliveryId: DeliveryID(index % 2 == 0 ? "d57fd6" : #"a"b\c"#), windowStart: -60_000 * Int64(index), windowEnd: 1_795_341_660_000,
                impressions: value, clicks: 0 &- value, opens: index, uniqueImpressions: value / 3, uniqueClicks: 1, uniqueOpens: 0, dismissals: value,
                channels: ChannelCounts(push: value, local: index, unknown: -index), platforms: PlatformCounts(ios: 0, android: value, unknown: 7),
                revision: value)
            writer.removeAll()
            AggregateRecord.writeValue(aggregate, into: &writer)
            #expect(writer.bytes == Self.reference(aggregate), "\(value)")
            writer.endLine()
            AggregateRecord.writeValue(aggregate, into: &writer)
            #expect(writer.bytes == Self.reference(aggregate) + [0x0A] + Self.reference(aggregate), "after a line: \(value)")
        }
    }
}
