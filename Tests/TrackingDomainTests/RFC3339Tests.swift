import Foundation
import Testing
@testable import TrackingDomain
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

    /// `parse` reads the usual layouts with `parseCommon` and leaves everything else to
    /// `parseFull`: the fast path must never accept what the full parser rejects, nor read a
    /// time differently. Edge cases of every field, each position's byte replaced by bytes that
    /// are near misses, and random instants in each layout.
    @Test("the fast path for common timestamps agrees with the full parser")
    func fastPathAgreesWithFullParser() {
        let handWritten = [
            "2026-11-22T10:00:00Z", "2026-11-22t10:00:00z", "2026-11-22T10:00:00.120Z", "2026-11-22T10:00:00.1Z",
            "2026-11-22T10:00:00.12Z", "2026-11-22T10:00:00.123456789Z", "2026-11-22T10:00:00.1234567890Z",
            "2026-11-22T10:00:00.Z", "2026-11-22T10:00:00.120+05:30", "2026-11-22T10:00:00-08:00",
            "2026-11-22T10:00:00+23:59", "2026-11-22T10:00:00-23:59", "2026-11-22T10:00:00+24:00",
            "2026-11-22T10:00:00+05:60", "2026-11-22T10:00:00+0530", "2026-11-22T10:00:00.120+05:30Z",
            "2024-02-29T00:00:00Z", "2023-02-29T00:00:00Z", "2000-02-29T00:00:00Z", "1900-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z", "2026-12-31T23:59:60Z", "2026-12-31T23:59:61Z", "2026-12-31T24:00:00Z",
            "2026-12-31T23:60:00Z", "2026-00-10T00:00:00Z", "2026-13-10T00:00:00Z", "2026-01-00T00:00:00Z",
            "2026-01-32T00:00:00Z", "0000-01-01T00:00:00Z", "0000-01-01T00:00:00+00:01", "0000-01-01T00:00:00-00:01",
            "9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.999-00:01", "9999-12-31T23:59:60Z",
            "2026-11-22T10:00:00", "2026-11-22T10:00:00ZZ", "2026-11-22 10:00:00Z", "2026-11-22T10:00:00.12a4Z",
            "2026-11-22T10:00:00.120+05:3", "2026-11-22T10:00:00.1234567890123456789Z",
        ]
        var cases = handWritten
        var rng = SplitMix64(seed: 20261122)
        for _ in 0..<300 {
            let millis = Int64.random(in: RFC3339.minEpochMillis...RFC3339.maxEpochMillis, using: &rng)
            let base = String(RFC3339.format(epochMillis: millis).prefix(19))
            let fraction = ["", ".5", ".12", ".123", ".123456", ".123456789"][Int.random(in: 0..<6, using: &rng)]
            let zone = ["Z", "z", "+00:00", "-00:00", "+05:30", "-08:00", "+14:00"][Int.random(in: 0..<7, using: &rng)]
            cases.append(base + fraction + zone)
        }
        let nearMisses: [UInt8] = [0x00, 0x2F, 0x3A, UInt8(ascii: "0"), UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "+"),
                                   UInt8(ascii: ":"), UInt8(ascii: "."), UInt8(ascii: "T"), UInt8(ascii: "t"), UInt8(ascii: "Z"), 0xD0]
        for text in handWritten + cases.suffix(30) {
            let bytes = Array(text.utf8)
            for index in bytes.indices {
                for byte in nearMisses {
                    var mutated = bytes
                    mutated[index] = byte
                    cases.append(String(decoding: mutated, as: UTF8.self))
                }
            }
        }
        for text in cases {
            Array(text.utf8).withUnsafeBytes { bytes in
                let full = RFC3339.parseFull(bytes)
                let fast = RFC3339.parseCommon(bytes)
                #expect(fast == nil || fast == full, "\(text): the fast path reads \(String(describing: fast)), the full parser \(String(describing: full))")
                #expect(RFC3339.parse(bytes) == full, "\(text)")
            }
        }
        // The layouts apps send are read by the fast path itself: the random instants too.
        for text in cases[handWritten.count..<(handWritten.count + 300)] {
            Array(text.utf8).withUnsafeBytes { bytes in
                #expect(RFC3339.parseCommon(bytes) != nil && RFC3339.parseCommon(bytes) == RFC3339.parseFull(bytes), "\(text)")
            }
        }
        for text in ["2026-11-22T10:00:00Z", "2026-11-22T10:00:00.120Z", "2026-11-22T10:00:00.120+05:30", "2026-11-22T10:00:00.123456789Z"] {
            #expect(Array(text.utf8).withUnsafeBytes { RFC3339.parseCommon($0) } != nil, "\(text)")
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

    /// The calendar is shared by the normalizer's formatting and the generator's timestamps
    /// (`CivilTime`), so it is checked here against an implementation that shares nothing with
    /// it: every day of 1900-2100, and every 97th day of 1600-2500 (Foundation's Gregorian
    /// calendar turns Julian before 1582, so earlier days cannot be compared this way).
    @Test("civil(fromDays:) agrees with Foundation's Gregorian calendar")
    func civilMatchesFoundation() throws {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = try #require(TimeZone(identifier: "UTC"))
        func check(_ day: Int64) -> Bool {
            let parts = calendar.dateComponents([.year, .month, .day], from: Date(timeIntervalSince1970: Double(day) * 86_400))
            let ours = RFC3339.civil(fromDays: day)
            return ours.year == Int64(parts.year!) && ours.month == Int64(parts.month!) && ours.day == Int64(parts.day!)
        }
        var mismatches: [Int64] = []
        for day in Int64(-25_567)...Int64(47_482) where !check(day) { mismatches.append(day) }
        for day in stride(from: Int64(-135_140), through: 194_359, by: 97) where !check(day) { mismatches.append(day) }
        #expect(mismatches.isEmpty, "first days that differ: \(mismatches.prefix(5))")
        #expect(RFC3339.civil(fromDays: 0) == (1970, 1, 1))
        #expect(RFC3339.civil(fromDays: -719_528) == (0, 1, 1))
        #expect(RFC3339.civil(fromDays: 2_932_896) == (9999, 12, 31))
    }

    /// `daysFromCivil` counts from the era before year 0 with unsigned quotients: it must be
    /// the inverse of `civil(fromDays:)` (checked above against Foundation) on every day a
    /// timestamp can write.
    @Test("daysFromCivil is the inverse of civil(fromDays:) on every day of years 0000-9999")
    func daysFromCivilInvertsCivil() {
        var mismatches: [Int64] = []
        for day in Int64(-719_528)...Int64(2_932_896) {
            let (year, month, dayOfMonth) = RFC3339.civil(fromDays: day)
            if RFC3339.daysFromCivil(year: year, month: month, day: dayOfMonth) != day { mismatches.append(day) }
        }
        #expect(mismatches.isEmpty, "first days that differ: \(mismatches.prefix(5))")
    }

    @Test("the generator's zoned timestamps read back as the same instant")
    func generatorTimestampsParse() {
        var rng = SplitMix64(seed: 1582)
        for _ in 0..<2000 {
            let millis = Int64.random(in: 0...4_102_444_800_000, using: &rng)
            for offset in [0, 120, -330, 330, -480, 60, 14 * 60, -12 * 60] {
                #expect(RFC3339.parse(CivilTime.rfc3339(epochMillis: millis, offsetMinutes: offset, fractionDigits: 3).utf8) == millis)
            }
        }
    }
}
