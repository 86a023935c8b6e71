import TrackingDomain

/// RFC 3339 timestamps in any zone offset and with any number of fraction digits, as apps send
/// them (the normalizer's `RFC3339.format` writes only UTC with milliseconds). The calendar is
/// the domain's `RFC3339.civil(fromDays:)` rather than a second copy of the same algorithm; what
/// keeps the generator an independent check of the normalizer is that the calendar is tested
/// against Foundation's (`RFC3339Tests`), and that parsing uses the inverse, `daysFromCivil`.
package enum CivilTime {
    /// `2026-11-22T10:00:00.120+02:00` style text for epoch ms, in the given offset (minutes).
    package static func rfc3339(epochMillis: Int64, offsetMinutes: Int, fractionDigits: Int) -> String {
        let local = epochMillis + Int64(offsetMinutes) * 60_000
        let millis = ((local % 1000) + 1000) % 1000
        let seconds = (local - millis) / 1000
        let days = floorDiv(seconds, 86_400)
        let secondOfDay = seconds - days * 86_400
        let (year, month, day) = RFC3339.civil(fromDays: days)
        var text =
            "\(pad(Int(year), 4))-\(pad(Int(month), 2))-\(pad(Int(day), 2))T\(pad(Int(secondOfDay / 3600), 2)):\(pad(Int(secondOfDay / 60 % 60), 2)):\(pad(Int(secondOfDay % 60), 2))"
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

    private static func pad(_ value: Int, _ width: Int) -> String {
        let text = String(value)
        return String(repeating: "0", count: max(0, width - text.count)) + text
    }
}
