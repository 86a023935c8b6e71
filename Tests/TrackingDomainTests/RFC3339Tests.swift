import Testing
import TrackingDomain
import HitGenerator

@Suite("RFC 3339")
struct RFC3339Tests {
    @Test("formats UTC with milliseconds only when they are not zero")
    func format() {
        #expect(RFC3339.format(epochMillis: 1_795_341_600_000) == "2026-11-22T10:00:00Z")
        #expect(RFC3339.format(epochMillis: 1_795_341_600_120) == "2026-11-22T10:00:00.120Z")
        #expect(RFC3339.format(epochMillis: 1_795_341_600_007) == "2026-11-22T10:00:00.007Z")
        #expect(RFC3339.format(epochMillis: 0) == "1970-01-01T00:00:00Z")
        #expect(RFC3339.format(epochMillis: -1) == "1969-12-31T23:59:59.999Z")
        #expect(RFC3339.format(epochMillis: 951_782_400_000) == "2000-02-29T00:00:00Z")
        #expect(RFC3339.format(epochMillis: RFC3339.maxEpochMillis) == "9999-12-31T23:59:59.999Z")
        #expect(RFC3339.format(epochMillis: RFC3339.minEpochMillis) == "0000-01-01T00:00:00Z")
    }

    @Test("parse reads offsets and truncates fractions to milliseconds")
    func parse() {
        #expect(RFC3339.parse("2026-11-22T10:00:00Z".utf8) == 1_795_341_600_000)
        #expect(RFC3339.parse("2026-11-22T15:30:00+05:30".utf8) == 1_795_341_600_000)
        #expect(RFC3339.parse("2026-11-22T02:00:00-08:00".utf8) == 1_795_341_600_000)
        #expect(RFC3339.parse("2026-11-22T10:00:00.1Z".utf8) == 1_795_341_600_100)
        #expect(RFC3339.parse("2026-11-22T10:00:00.123456789Z".utf8) == 1_795_341_600_123)
        #expect(RFC3339.parse("2026-11-22T10:00:00.9999Z".utf8) == 1_795_341_600_999)
        #expect(RFC3339.parse("1969-12-31T23:59:59.999Z".utf8) == -1)
        for bad in ["", "2026-11-22", "2026-11-22T10:00:00", "2026-11-22T10:00Z", "2026-02-29T00:00:00Z",
                    "2026-11-22T10:00:00+05", "2026-11-22T10:00:00+24:00", "2026-11-22T10:00:00ZZ", "２026-11-22T10:00:00Z"] {
            #expect(RFC3339.parse(bad.utf8) == nil, "\(bad) must not parse")
        }
    }

    @Test("format then parse is the identity across the whole range", arguments: [
        Int64(0), 1, 999, 1_795_341_600_120, -62_135_596_800_000, 4_102_444_800_000, 253_402_300_799_999, -62_167_219_200_000,
    ])
    func roundTrip(_ millis: Int64) {
        #expect(RFC3339.parse(RFC3339.format(epochMillis: millis).utf8) == millis)
    }

    @Test("round trip holds for pseudo-random instants")
    func randomRoundTrip() {
        var rng = SplitMix64(seed: 3339)
        for _ in 0..<5000 {
            let millis = Int64.random(in: RFC3339.minEpochMillis...RFC3339.maxEpochMillis, using: &rng)
            #expect(RFC3339.parse(RFC3339.format(epochMillis: millis).utf8) == millis)
        }
    }
}
