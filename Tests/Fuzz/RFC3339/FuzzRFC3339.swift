import FuzzSupport
import TrackingDomain

/// libFuzzer harness for `RFC3339.parse` and `RFC3339.format`: the event-time parser reads
/// attacker-controlled strings, and `format` writes every window key, so both must be total
/// and agree with each other. For every input:
///
/// 1. `parse` returns nil or an instant within `minEpochMillis...maxEpochMillis` (it promises
///    that every parsed time can be formatted).
/// 2. Round trip: `parse(format(t)) == t` for the parsed `t`, and `format` is a fixed point
///    (formatting the re-parsed instant gives the same text).
/// 3. A UTC input (`Z`, `z`, `+00:00`, `-00:00`) that is not a leap second formats back to its
///    own text made canonical: `T` and `Z` upper case, the fraction cut to milliseconds and
///    left out when zero. `parse` counts days with `daysFromCivil` and `format` splits them with
///    `civil(fromDays:)`, so this checks the two calendar directions against the input's digits.
/// 4. An offset `±hh:mm` moves the instant by exactly that much against the same local time
///    written with `Z` (when both are in range).
/// 5. The first eight bytes, folded into the representable range as an instant `m`, give
///    `parse(format(m)) == m`, so formatting is fuzzed over the whole range, not only at
///    instants someone wrote down.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRFC3339(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    checkRFC3339(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

func checkRFC3339(_ input: UnsafeRawBufferPointer) {
    if input.count >= 8 {
        var raw: UInt64 = 0
        for index in 0..<8 { raw = raw << 8 | UInt64(input[index]) }
        let span = UInt64(RFC3339.maxEpochMillis - RFC3339.minEpochMillis) + 1
        let instant = RFC3339.minEpochMillis + Int64(raw % span)
        let text = RFC3339.format(epochMillis: instant)
        fuzzRequire(RFC3339.parse(Array(text.utf8)) == instant, "format(\(instant)) = \(text) does not parse back")
    }

    guard let millis = RFC3339.parse(input) else { return }
    fuzzRequire(millis >= RFC3339.minEpochMillis && millis <= RFC3339.maxEpochMillis,
                "\(describeInput(input)) parsed to \(millis), outside years 0000-9999")

    let formatted = RFC3339.format(epochMillis: millis)
    let reparsed = RFC3339.parse(Array(formatted.utf8))
    fuzzRequire(reparsed == millis, "\(describeInput(input)) -> \(millis) -> \(formatted) -> \(String(describing: reparsed))")
    fuzzRequire(RFC3339.format(epochMillis: reparsed ?? millis) == formatted, "format is not a fixed point for \(formatted)")

    // Parsing succeeded, so the layout is fixed: 19 bytes of date and time, an optional
    // fraction, then the zone.
    let bytes = Array(input)
    var zoneStart = 19
    var fraction: [UInt8] = []
    if bytes[19] == UInt8(ascii: ".") {
        zoneStart = 20
        while bytes[zoneStart] >= UInt8(ascii: "0") && bytes[zoneStart] <= UInt8(ascii: "9") {
            fraction.append(bytes[zoneStart])
            zoneStart += 1
        }
    }
    let zone = String(decoding: bytes[zoneStart...], as: UTF8.self)
    let isLeapSecond = bytes[17] == UInt8(ascii: "6")

    if !isLeapSecond && (zone == "Z" || zone == "z" || zone == "+00:00" || zone == "-00:00") {
        var canonical = Array(bytes[0..<19])
        canonical[10] = UInt8(ascii: "T")
        var millisDigits = Array(fraction.prefix(3))
        while millisDigits.count < 3 { millisDigits.append(UInt8(ascii: "0")) }
        if millisDigits != Array("000".utf8) {
            canonical.append(UInt8(ascii: "."))
            canonical.append(contentsOf: millisDigits)
        }
        canonical.append(UInt8(ascii: "Z"))
        let expected = String(decoding: canonical, as: UTF8.self)
        fuzzRequire(formatted == expected, "\(describeInput(input)) formats as \(formatted), expected \(expected)")
    }

    if zone.count == 6 {
        let sign: Int64 = bytes[zoneStart] == UInt8(ascii: "-") ? -1 : 1
        func digits(_ at: Int) -> Int64 { Int64(bytes[at] - 0x30) * 10 + Int64(bytes[at + 1] - 0x30) }
        let offsetMillis = sign * (digits(zoneStart + 1) * 60 + digits(zoneStart + 4)) * 60_000
        let asUTC = Array(bytes[0..<zoneStart]) + [UInt8(ascii: "Z")]
        if let local = RFC3339.parse(asUTC) {
            fuzzRequire(millis == local - offsetMillis,
                        "\(describeInput(input)) is \(millis), but its local time in UTC is \(local) and the offset \(offsetMillis) ms")
        }
    }
}

@main
enum FuzzRFC3339Main {
    static func main() {
        fuzzMain(testOneInput: fuzzRFC3339, check: checkRFC3339)
    }
}
