import Testing
@testable import Windowing

@Suite struct EventTimeMathTests {
    @Test(arguments: [
        // (time, size, expected start)
        (Int64(0), Int64(60_000), Int64(0)),
        (59_999, 60_000, 0),
        (60_000, 60_000, 60_000),
        (1_795_300_000_450, 60_000, 1_795_299_960_000),
        (-1, 60_000, -60_000),
        (-60_000, 60_000, -60_000),
        (-60_001, 60_000, -120_000),
        // 7 minutes does not divide a day: windows run across midnight, aligned to the epoch.
        (86_400_000, 420_000, 86_100_000),
        (86_519_999, 420_000, 86_100_000),
        (86_520_000, 420_000, 86_520_000),
        (172_800_000, 420_000, 172_620_000),
    ])
    func windowStartIsFlooredToTheEpoch(time: Int64, size: Int64, expected: Int64) {
        #expect(EventTimeMath.windowStart(of: time, size: size) == expected)
    }

    @Test func extremeTimesSaturateInsteadOfTrapping() {
        #expect(EventTimeMath.windowStart(of: .min, size: 60_000) == .min)
        let start = EventTimeMath.windowStart(of: .max, size: 60_000)
        #expect(start <= .max && start > .max - 60_000)
        #expect(EventTimeMath.add(.max - 5, 10) == .max)
        #expect(EventTimeMath.add(.min + 5, -10) == .min)
        #expect(EventTimeMath.add(3, 4) == 7)
    }
}
