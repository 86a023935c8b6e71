/// Calendar arithmetic for writing RFC 3339 timestamps in any zone offset, kept apart from the
/// normalizer's RFC 3339 code on purpose: the generator and the tests' reference model must not
/// share code with what they test.
public enum CivilTime {
    /// `2026-11-22T10:00:00.120+02:00` style text for epoch ms, in the given offset (minutes).
    public static func rfc3339(epochMillis: Int64, offsetMinutes: Int, fractionDigits: Int) -> String {
        let local = epochMillis + Int64(offsetMinutes) * 60_000
        let millis = ((local % 1000) + 1000) % 1000
        let seconds = (local - millis) / 1000
        let days = floorDiv(seconds, 86_400)
        let secondOfDay = seconds - days * 86_400
        let (year, month, day) = civil(fromDays: days)
        var text =
            "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(Int(secondOfDay / 3600), 2)):\(pad(Int(secondOfDay / 60 % 60), 2)):\(pad(Int(secondOfDay % 60), 2))"
        if fractionDigits > 0 {
            // Digits past milliseconds carry no information and must be truncated by the reader.
            let digits = pad(Int(millis), 3) + String(repeating: "7", count: max(0, fractionDigits - 3))
            text += "." + digits.prefix(fractionDigits)
        }
        if offsetMinutes == 0 {
            text += "Z"
        } else {
            let sign = offsetMinutes > 0 ? "+" : "-"
            text += "\(sign)\(pad(abs(offsetMinutes) / 60, 2)):\(pad(abs(offsetMinutes) % 60, 2))"
        }
        return text
    }

    private static func floorDiv(_ a: Int64, _ b: Int64) -> Int64 { a >= 0 ? a / b : -((-a + b - 1) / b) }

    /// Howard Hinnant's days-from-civil inverse.
    private static func civil(fromDays days: Int64) -> (Int, Int, Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        let y = yoe + era * 400 + (m <= 2 ? 1 : 0)
        return (Int(y), Int(m), Int(d))
    }

    private static func pad(_ value: Int, _ width: Int) -> String {
        let text = String(value)
        return String(repeating: "0", count: max(0, width - text.count)) + text
    }
}
