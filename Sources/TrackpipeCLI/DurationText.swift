import Foundation

/// Durations as people write them in flags and environment variables: `500ms`, `10s`, `1m`,
/// `1h`, `1d`, or combined like `1h30m`. A bare number is refused, because "60" could be
/// seconds or milliseconds and guessing wrong shifts every window.
enum DurationText {
    static func milliseconds(_ text: String) throws -> Int64 {
        let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
        guard !trimmed.isEmpty else { throw DurationError(text: text) }
        var total: Int64 = 0
        var rest = Substring(trimmed)
        while !rest.isEmpty {
            let digits = rest.prefix(while: { $0.isASCII && $0.isNumber })
            guard !digits.isEmpty, let value = Int64(digits) else { throw DurationError(text: text) }
            rest = rest.dropFirst(digits.count)
            let unit = rest.prefix(while: { $0.isLetter })
            rest = rest.dropFirst(unit.count)
            let scale: Int64
            switch unit {
            case "ms": scale = 1
            case "s": scale = 1_000
            case "m": scale = 60_000
            case "h": scale = 3_600_000
            case "d": scale = 86_400_000
            default: throw DurationError(text: text)
            }
            let (product, overflow) = value.multipliedReportingOverflow(by: scale)
            guard !overflow else { throw DurationError(text: text) }
            total += product
        }
        return total
    }
}

struct DurationError: Error, CustomStringConvertible {
    var text: String
    var description: String {
        "'\(text)' is not a duration: write a number with a unit, like 500ms, 10s, 1m, 1h or 1h30m"
    }
}
