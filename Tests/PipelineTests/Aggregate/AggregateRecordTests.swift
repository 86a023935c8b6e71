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
}
