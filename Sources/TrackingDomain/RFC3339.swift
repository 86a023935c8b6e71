/// RFC 3339 timestamps, as hits carry them and as aggregates are keyed
/// (`d57fd6@2026-11-22T10:00:00Z`). Implemented here rather than with Foundation's
/// `ISO8601DateFormatter` because the normalizer must stay allocation-free and the formats
/// are narrow: always UTC out, any `Z`/`±hh:mm` zone in.
public enum RFC3339 {
    /// The earliest instant RFC 3339 can write (`0000-01-01T00:00:00Z`), in epoch ms.
    public static let minEpochMillis: Int64 = -62_167_219_200_000
    /// The latest instant RFC 3339 can write (`9999-12-31T23:59:59.999Z`), in epoch ms.
    public static let maxEpochMillis: Int64 = 253_402_300_799_999

    /// Formats as UTC, `2026-11-22T10:00:00Z`, with `.123` only when the milliseconds are not zero,
    /// so whole-second window bounds read naturally. Instants outside years 0000–9999 are clamped
    /// to that range (the normalizer never produces them).
    public static func format(epochMillis: Int64) -> String {
        let clamped = min(max(epochMillis, minEpochMillis), maxEpochMillis)
        let days = floorDiv(clamped, 86_400_000)
        var msOfDay = clamped - days * 86_400_000
        let (year, month, day) = civil(fromDays: days)
        let hour = msOfDay / 3_600_000
        msOfDay -= hour * 3_600_000
        let minute = msOfDay / 60_000
        msOfDay -= minute * 60_000
        let second = msOfDay / 1000
        let millis = msOfDay - second * 1000

        var out: [UInt8] = []
        out.reserveCapacity(24)
        func put(_ value: Int64, digits: Int) {
            var divisor: Int64 = 1
            for _ in 1..<digits { divisor *= 10 }
            var rest = value
            while divisor > 0 {
                out.append(UInt8(ascii: "0") + UInt8(rest / divisor))
                rest %= divisor
                divisor /= 10
            }
        }
        put(year, digits: 4); out.append(UInt8(ascii: "-"))
        put(month, digits: 2); out.append(UInt8(ascii: "-"))
        put(day, digits: 2); out.append(UInt8(ascii: "T"))
        put(hour, digits: 2); out.append(UInt8(ascii: ":"))
        put(minute, digits: 2); out.append(UInt8(ascii: ":"))
        put(second, digits: 2)
        if millis != 0 {
            out.append(UInt8(ascii: "."))
            put(millis, digits: 3)
        }
        out.append(UInt8(ascii: "Z"))
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±hh:mm)` (the whole buffer, no quotes) to epoch ms.
    /// Digits of a second beyond milliseconds are truncated, not rounded, so an event never moves
    /// into the next window. `T` and `Z` may be lower case (RFC 3339 §5.6 note); a leap second
    /// (`:60`) is read as the start of the next second, as POSIX clocks do.
    /// Returns nil for anything else, including impossible dates such as February 30.
    ///
    /// Timestamps as apps send them go through `parseCommon`; `parseFull` decides the rest
    /// (longer fractions and everything it rejects).
    public static func parse(_ bytes: UnsafeRawBufferPointer) -> Int64? {
        if let millis = parseCommon(bytes) { return millis }
        return parseFull(bytes)
    }

    /// `parse` for the layouts apps write — a fraction of at most nine digits, if any, and a
    /// `Z` or `±hh:mm` zone — at fixed positions, straight-line: the full parser's digit and
    /// number closures returned an optional per digit, and a string timestamp cost 655
    /// instructions, 376 this way, 262 with the date, the time and the fraction checked a word
    /// at a time (callgrind, the bench's mix of layouts). Nil means "not this layout, or not valid": the
    /// full parser then decides, so this never rejects what `parseFull` accepts, and what it
    /// accepts it reads as `parseFull` does (`RFC3339Tests` compares the two on edge cases).
    static func parseCommon(_ bytes: UnsafeRawBufferPointer) -> Int64? {
        let count = bytes.count
        guard count >= 20, count <= 35, let base = bytes.baseAddress else { return nil }
        let p = base.assumingMemoryBound(to: UInt8.self)
        // A digit's value, or more than 9 for any other byte.
        @inline(__always) func d(_ i: Int) -> UInt32 { UInt32(p[i] &- 0x30) }
        @inline(__always) func two(_ i: Int) -> UInt32 { d(i) > 9 || d(i + 1) > 9 ? .max : d(i) * 10 + d(i + 1) }
        // `YYYY-MM-DDTHH:MM:SS` as three words (bytes 0..<8, 8..<16 and 11..<19), each checked
        // at once: XOR with the layout ('0' where a digit goes) leaves a digit's value, at most
        // 9, and 0 for the right separator; adding 0x76 (0x7F at a separator) to a lane sets
        // its top bit exactly when it holds more. A byte at a time, a call cost 46 instructions
        // more (376 -> 330 with the days, callgrind, live hits).
        @inline(__always) func word(_ i: Int) -> UInt64 { UInt64(littleEndian: base.loadUnaligned(fromByteOffset: i, as: UInt64.self)) }
        let date = word(0) ^ 0x2D30_302D_3030_3030  // "0000-00-", little-endian
        let dayHour = (word(8) | 0x20_0000) ^ 0x3030_3A30_3074_3030  // "00t00:00", T in either case
        let time = word(11) ^ 0x3030_3A30_303A_3030  // "00:00:00"
        let tops: UInt64 = 0x8080_8080_8080_8080
        guard (date | (date &+ 0x7F76_767F_7676_7676)) & tops == 0,
              (dayHour | (dayHour &+ 0x7676_7F76_767F_7676)) & tops == 0,
              (time | (time &+ 0x7676_7F76_767F_7676)) & tops == 0
        else { return nil }
        @inline(__always) func pair(_ word: UInt64, _ lane: Int) -> UInt32 {
            UInt32(truncatingIfNeeded: word &>> (8 * lane) & 0xFF) * 10 + UInt32(truncatingIfNeeded: word &>> (8 * lane + 8) & 0xFF)
        }
        let month = pair(date, 5), day = pair(dayHour, 0)
        let hour = pair(time, 0), minute = pair(time, 3), second = pair(time, 6)
        guard month >= 1, month <= 12, day >= 1, hour <= 23, minute <= 59, second <= 60 else { return nil }
        let year = Int64(pair(date, 0) * 100 + pair(date, 2))
        guard Int64(day) <= daysInMonth(year: year, month: Int64(month)) else { return nil }

        let last = p[count - 1]
        let zoneStart = last | 0x20 == UInt8(ascii: "z") ? count - 1 : count - 6
        var offsetMinutes: Int64 = 0
        if zoneStart == count - 6 {
            let zone = p[zoneStart], offsetHour = two(zoneStart + 1), offsetMinute = two(zoneStart + 4)
            guard zone == UInt8(ascii: "+") || zone == UInt8(ascii: "-"), p[zoneStart + 3] == UInt8(ascii: ":"),
                  offsetHour <= 23, offsetMinute <= 59
            else { return nil }
            offsetMinutes = Int64(offsetHour * 60 + offsetMinute)
            if zone == UInt8(ascii: "-") { offsetMinutes = -offsetMinutes }
        }
        var millis: UInt32 = 0
        if zoneStart != 19 {
            // A fraction: a dot and one to nine digits, the first three of which are the ms.
            let digits = zoneStart - 20
            guard p[19] == UInt8(ascii: "."), digits >= 1, digits <= 9, d(20) <= 9 else { return nil }
            // The fraction's last eight bytes (all of it but the first digit at most) checked
            // as one word like the date, the bytes before them (the time's) left out: a digit at
            // a time cost about 12 instructions a digit.
            let fraction = (word(zoneStart - 8) ^ 0x3030_3030_3030_3030) & UInt64.max &<< (8 * (8 - min(digits, 8)))
            guard (fraction | (fraction &+ 0x7676_7676_7676_7676)) & tops == 0 else { return nil }
            millis = d(20) * 100 + (digits > 1 ? d(21) * 10 : 0) + (digits > 2 ? d(22) : 0)
        }
        let days = daysFromCivil(year: year, month: Int64(month), day: Int64(day))
        let local = days * 86_400_000 + Int64(hour * 3_600_000 + minute * 60_000 + second * 1000 + millis)
        let utc = local - offsetMinutes * 60_000
        guard utc >= minEpochMillis, utc <= maxEpochMillis else { return nil }
        return utc
    }

    /// The reference reading of `parse`'s grammar, a digit at a time: any fraction length.
    static func parseFull(_ bytes: UnsafeRawBufferPointer) -> Int64? {
        let count = bytes.count
        guard count >= 20 else { return nil }
        func digit(_ index: Int) -> Int64? {
            let byte = bytes[index]
            guard byte >= 0x30, byte <= 0x39 else { return nil }
            return Int64(byte - 0x30)
        }
        func number(_ index: Int, _ width: Int) -> Int64? {
            var value: Int64 = 0
            for offset in 0..<width {
                guard let d = digit(index + offset) else { return nil }
                value = value * 10 + d
            }
            return value
        }
        guard let year = number(0, 4), bytes[4] == UInt8(ascii: "-"),
              let month = number(5, 2), bytes[7] == UInt8(ascii: "-"),
              let day = number(8, 2), bytes[10] == UInt8(ascii: "T") || bytes[10] == UInt8(ascii: "t"),
              let hour = number(11, 2), bytes[13] == UInt8(ascii: ":"),
              let minute = number(14, 2), bytes[16] == UInt8(ascii: ":"),
              let second = number(17, 2)
        else { return nil }
        guard (1...12).contains(month), day >= 1, day <= daysInMonth(year: year, month: month),
              hour <= 23, minute <= 59, second <= 60
        else { return nil }

        var index = 19
        var millis: Int64 = 0
        if bytes[index] == UInt8(ascii: ".") {
            index += 1
            let fractionStart = index
            while index < count, let d = digit(index) {
                if index - fractionStart < 3 { millis = millis * 10 + d }
                index += 1
            }
            guard index > fractionStart else { return nil }
            for _ in min(index - fractionStart, 3)..<3 { millis *= 10 }
        }
        guard index < count else { return nil }
        var offsetMinutes: Int64 = 0
        switch bytes[index] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            index += 1
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            let sign: Int64 = bytes[index] == UInt8(ascii: "-") ? -1 : 1
            guard count - index == 6, let offsetHour = number(index + 1, 2),
                  bytes[index + 3] == UInt8(ascii: ":"), let offsetMinute = number(index + 4, 2),
                  offsetHour <= 23, offsetMinute <= 59
            else { return nil }
            offsetMinutes = sign * (offsetHour * 60 + offsetMinute)
            index += 6
        default:
            return nil
        }
        guard index == count else { return nil }

        let days = daysFromCivil(year: year, month: month, day: day)
        let local = days * 86_400_000 + hour * 3_600_000 + minute * 60_000 + second * 1000 + millis
        let utc = local - offsetMinutes * 60_000
        guard utc >= minEpochMillis, utc <= maxEpochMillis else { return nil }
        return utc
    }

    /// Convenience for callers holding bytes in another collection (tests, the CLI).
    public static func parse<Bytes: Collection>(_ bytes: Bytes) -> Int64? where Bytes.Element == UInt8 {
        let array = Array(bytes)
        return array.withUnsafeBytes { parse($0) }
    }

    static func floorDiv(_ a: Int64, _ b: Int64) -> Int64 {
        let q = a / b
        return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
    }

    static func isLeap(_ year: Int64) -> Bool {
        year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
    }

    static func daysInMonth(year: Int64, month: Int64) -> Int64 {
        switch month {
        case 2: isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 in the proleptic Gregorian calendar (eras of 400 years), for the
    /// years 0000–9999 a timestamp can write and a valid month and day.
    ///
    /// Counted from the era before year 0, so that every quotient is of a small non-negative
    /// number (a multiply and a shift) instead of a floor division of any Int64: 76 -> 50
    /// instructions a call (callgrind, live hits), one call for every string timestamp.
    static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = UInt32(truncatingIfNeeded: (month <= 2 ? year - 1 : year) + 400)  // 399...10_399
        let era = y / 400
        let yearOfEra = y - era * 400
        let m = UInt32(truncatingIfNeeded: month)
        let monthIndex = m > 2 ? m - 3 : m + 9
        let dayOfYear = (153 * monthIndex + 2) / 5 + UInt32(truncatingIfNeeded: day) - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return Int64(era) * 146_097 + Int64(dayOfEra) - 719_468 - 146_097
    }

    /// The proleptic Gregorian date of a day counted from 1970-01-01 (Howard Hinnant's
    /// civil-from-days, eras of 400 years), for any Int64 day a timestamp can reach.
    /// Public so that the hit generator writes its timestamps with this calendar instead of a
    /// copy of it; `RFC3339Tests` checks it against Foundation's calendar, which keeps the
    /// generator's output independently verified.
    public static func civil(fromDays days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = days + 719_468
        let era = floorDiv(z, 146_097)
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        return (year, month, day)
    }
}
