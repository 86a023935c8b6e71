import Testing
import TrackingDomain
@testable import Windowing

@Suite struct CategoryCountsTests {
    /// The raw value is the storage slot: a fourth case, or two cases sharing a raw value, would
    /// silently merge counts, so this holds both dimensions to 0, 1, 2.
    @Test func everyCategoryHasItsOwnSlot() {
        #expect(Channel.allCases.map(\.rawValue) == [0, 1, 2])
        #expect(Platform.allCases.map(\.rawValue) == [0, 1, 2])
    }

    @Test func eachCaseCountsApart() {
        for channel in Channel.allCases {
            var counts = ChannelCounts()
            counts[channel] += 5
            #expect(Channel.allCases.map { counts[$0] } == Channel.allCases.map { $0 == channel ? 5 : 0 })
            #expect(Channel.allCases.reduce(0) { $0 + counts[$1] } == 5)
        }
        for platform in Platform.allCases {
            var counts = PlatformCounts()
            counts[platform] += 3
            #expect(Platform.allCases.map { counts[$0] } == Platform.allCases.map { $0 == platform ? 3 : 0 })
        }
    }

    @Test func initializersAndDescriptionUseTheCategoryNames() {
        var channels = ChannelCounts(push: 1, local: 2, unknown: 3)
        channels[.local] += 10
        #expect(channels == ChannelCounts(push: 1, local: 12, unknown: 3))
        #expect(channels.description == "[push: 1, local: 12, unknown: 3]")
        let platforms = PlatformCounts(ios: 4, android: 5)
        #expect(platforms.description == "[ios: 4, android: 5, unknown: 0]")
        #expect(Platform.allCases.reduce(0) { $0 + platforms[$1] } == 9)
        #expect(PlatformCounts() == PlatformCounts(ios: 0, android: 0, unknown: 0))
    }
}
