import Testing
import TrackingDomain
@testable import Windowing

@Suite struct DeliveryWindowTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var hits: [(BroadlogID, HitAction, Channel, Platform)]
        var expected: WindowAggregate
        var testDescription: String { name }
    }

    static func counts(
        _ i: Int, _ c: Int, _ o: Int, unique ui: Int, _ uc: Int, _ uo: Int, dismissals: Int,
        channels: ChannelCounts, platforms: PlatformCounts
    ) -> WindowAggregate {
        WindowAggregate(
            deliveryId: "d1", windowStart: 0, windowEnd: 60_000, impressions: i, clicks: c, opens: o,
            uniqueImpressions: ui, uniqueClicks: uc, uniqueOpens: uo, dismissals: dismissals,
            channels: channels, platforms: platforms, revision: i + c + o)
    }

    static let cases: [Case] = [
        Case(name: "one impression", hits: [("b1", .impression, .push, .ios)],
             expected: counts(1, 0, 0, unique: 1, 0, 0, dismissals: 0,
                              channels: .init(push: 1), platforms: .init(ios: 1))),
        Case(name: "duplicate impression counts twice, once unique",
             hits: [("b1", .impression, .push, .android), ("b1", .impression, .push, .android)],
             expected: counts(2, 0, 0, unique: 1, 0, 0, dismissals: 0,
                              channels: .init(push: 2), platforms: .init(android: 2))),
        Case(name: "click alone is a dismissal", hits: [("b1", .click, .local, .ios)],
             expected: counts(0, 1, 0, unique: 0, 1, 0, dismissals: 1,
                              channels: .init(local: 1), platforms: .init(ios: 1))),
        Case(name: "click then open is not a dismissal",
             hits: [("b1", .click, .push, .android), ("b1", .open, .push, .android)],
             expected: counts(0, 1, 1, unique: 0, 1, 1, dismissals: 0,
                              channels: .init(push: 2), platforms: .init(android: 2))),
        Case(name: "open before click (out of order) is not a dismissal",
             hits: [("b1", .open, .push, .android), ("b1", .click, .push, .android)],
             expected: counts(0, 1, 1, unique: 0, 1, 1, dismissals: 0,
                              channels: .init(push: 2), platforms: .init(android: 2))),
        Case(name: "open without click is not a dismissal", hits: [("b1", .open, .unknown, .unknown)],
             expected: counts(0, 0, 1, unique: 0, 0, 1, dismissals: 0,
                              channels: .init(unknown: 1), platforms: .init(unknown: 1))),
        Case(name: "mixed recipients",
             hits: [
                ("b1", .impression, .push, .ios), ("b2", .impression, .push, .android),
                ("b3", .impression, .local, .android), ("b1", .click, .push, .ios),
                ("b1", .open, .push, .ios), ("b2", .click, .push, .android),
                ("b2", .click, .push, .android), ("b3", .click, .local, .android),
                ("b4", .open, .unknown, .unknown), ("b1", .impression, .push, .ios),
             ],
             expected: counts(4, 4, 2, unique: 3, 3, 2, dismissals: 2,
                              channels: .init(push: 7, local: 2, unknown: 1),
                              platforms: .init(ios: 4, android: 5, unknown: 1))),
    ]

    @Test(arguments: cases)
    func countsMatchHandComputedResults(_ testCase: Case) {
        var window = DeliveryWindow()
        for (broadlog, action, channel, platform) in testCase.hits {
            _ = window.record(broadlogId: broadlog, action: action, channel: channel, platform: platform, trackDirty: false)
        }
        #expect(window.aggregate(deliveryId: "d1", start: 0, end: 60_000) == testCase.expected)
    }

    @Test func reportsNewEntriesAndDirtinessOnce() {
        var window = DeliveryWindow()
        let first = window.record(broadlogId: "b1", action: .click, channel: .push, platform: .ios, trackDirty: false)
        let second = window.record(broadlogId: "b1", action: .open, channel: .push, platform: .ios, trackDirty: true)
        let third = window.record(broadlogId: "b2", action: .open, channel: .push, platform: .ios, trackDirty: true)
        #expect(first.newEntry && !first.becameDirty)
        #expect(!second.newEntry && second.becameDirty)
        #expect(third.newEntry && !third.becameDirty)
        #expect(window.broadlogs == ["b1": 0b110, "b2": 0b100])
    }
}

