import Foundation

/// Durations as people write them in flags and environment variables: `500ms`, `10s`, `1m`,
/// `1h`, `1d`, or combined like `1h30m`. A bare number is refused, because "60" could be
/// seconds or milliseconds and guessing wrong shifts every window.
enum DurationText {
    static func milliseconds(_ text: String) throws(DurationError) -> Int64 {
        let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
        guard !trimmed.isEmpty else { throw DurationError(text: text, problem: .empty) }
        // Said plainly: no setting takes a negative duration, and "-5s" otherwise reads as a typo.
        if trimmed.hasPrefix("-") { throw DurationError(text: text, problem: .negative) }
        if trimmed.allSatisfy({ $0.isASCII && $0.isNumber }) { throw DurationError(text: text, problem: .noUnit) }
        var total: Int64 = 0
        var rest = Substring(trimmed)
        while !rest.isEmpty {
            let digits = rest.prefix(while: { $0.isASCII && $0.isNumber })
            guard !digits.isEmpty else { throw DurationError(text: text, problem: .notADuration) }
            guard let value = Int64(digits) else { throw DurationError(text: text, problem: .tooLong) }
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
            default: throw DurationError(text: text, problem: .notADuration)
            }
            let (product, overflow) = value.multipliedReportingOverflow(by: scale)
            let (sum, sumOverflow) = total.addingReportingOverflow(product)
            guard !overflow, !sumOverflow else { throw DurationError(text: text, problem: .tooLong) }
            total = sum
        }
        return total
    }
}

/// Why a text is not a duration. `reason` leaves the text out, for callers that name the flag or
/// environment variable and its value themselves.
struct DurationError: Error, CustomStringConvertible, Equatable {
    enum Problem: Sendable, Equatable {
        case empty, negative, noUnit, notADuration, tooLong
    }

    var text: String
    var problem: Problem

    static let howToWrite = "write a number with a unit, like 500ms, 10s, 1m, 1h or 1h30m"

    var reason: String {
        switch problem {
        case .empty: "empty; \(Self.howToWrite)"
        case .negative: "durations cannot be negative; \(Self.howToWrite)"
        case .noUnit: "a number without a unit; write \(text.trimmingCharacters(in: .whitespaces))s or \(text.trimmingCharacters(in: .whitespaces))ms (a bare number could mean either)"
        case .notADuration: "not a duration; \(Self.howToWrite)"
        case .tooLong: "too long a duration (the limit is about 292 million years)"
        }
    }

    var description: String { "'\(text)': \(reason)" }
}
