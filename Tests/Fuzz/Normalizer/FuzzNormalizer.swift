import FuzzSupport
import TrackingDomain

/// libFuzzer harness for `Normalizer.normalize(_:kafkaTimestamp:)` with the default limits:
/// the one function that reads every byte producers send. For every input:
///
/// 1. Exactly one verdict, the same for a copy of the bytes at another address.
/// 2. The Kafka timestamp only fills in a missing event time: normalizing with and without it
///    gives the same verdict, except that an accepted event without a time of its own gets it.
/// 3. JSON validity agrees with `JSONReference` below, an independent recursive-descent reader
///    of RFC 8259 with the contract's strictness: the verdict is `too_deep` or `malformed_json`
///    exactly when the reference meets, first in byte order, a container deeper than the limit
///    or an error; `not_an_object` exactly when the valid message is not an object.
/// 4. An accepted event has both ids non-empty and within `maxIdBytes` UTF-8 bytes, and an
///    event time within years 0000–9999 (the Kafka timestamp when the hit has none).
/// 5. An accepted event survives the trip through `JSONWriter`: written back as a flat hit
///    (shape A, with the action's code, its explicit channel and platform, and its time as
///    epoch ms or as RFC 3339 text), it normalizes to the same event as `sdk_context_data`.
///    This checks the writer's escaping against the scanner's decoding for whatever ids the
///    fuzzer finds.
/// 6. A filtered hit is `tracking_off`; a rejection is never `too_late` (the window engine's)
///    nor `too_large` (inputs stay under the 1 MiB limit), and its detail starts with its code.
/// 7. The verdict's JSON line (what `trackpipe normalize` prints) is well-formed JSON: fed back
///    to the normalizer it is read as an object with no ids, so it is `missing_delivery_id`.
/// 8. Repeated names (docs/normalization.md): for a valid object, the verdict is
///    `duplicate_field` exactly when `JSONReference` finds, in an object the contract reads, a
///    name the contract reads given twice with different JSON texts; and when every repeat it
///    finds has its first value's text, the message without those repeats gets the same verdict.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzNormalizer(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    checkNormalizer(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

let normalizer = Normalizer()
/// A Kafka timestamp to fall back on (2026-11-21T06:13:20Z, as in the contract's examples).
let kafkaTime: Int64 = 1_795_300_000_000

func checkNormalizer(_ input: UnsafeRawBufferPointer) {
    let verdict = normalizer.normalize(input, kafkaTimestamp: kafkaTime)
    let copy = Array(input)
    fuzzRequire(normalizer.normalize(copy, kafkaTimestamp: kafkaTime) == verdict, "\(describeInput(input)): a copy gets another verdict")

    let withoutKafka = normalizer.normalize(input, kafkaTimestamp: nil)
    switch (verdict, withoutKafka) {
    case (.accepted(let event), .accepted(var other)) where other.eventTime == nil:
        other.eventTime = kafkaTime
        fuzzRequire(event == other, "\(describeInput(input)): \(event) with the Kafka time, \(other) without")
    default:
        fuzzRequire(verdict == withoutKafka, "\(describeInput(input)): \(verdict) with the Kafka time, \(withoutKafka) without")
    }

    let limits = normalizer.limits
    if input.count <= limits.maxMessageBytes {
        var reader = JSONReference(copy, maxDepth: limits.maxDepth)
        let reference = reader.read()
        let reason: RejectReason? = if case .rejected(let reason, _) = verdict { reason } else { nil }
        let expected: RejectReason? = switch reference {
        case .malformed: .malformedJSON
        case .tooDeep: .tooDeep
        case .valid(isObject: false): .notAnObject
        case .valid(isObject: true): nil
        }
        let structural: Set<RejectReason> = [.malformedJSON, .tooDeep, .notAnObject]
        if let expected {
            fuzzRequire(reason == expected, "\(describeInput(input)): the reference reads \(reference), the normalizer says \(verdict)")
        } else {
            fuzzRequire(reason.map { !structural.contains($0) } ?? true, "\(describeInput(input)): the reference reads an object, the normalizer says \(verdict)")
            checkRepeatedNames(verdict, reader: reader, input: input)
        }
    }

    switch verdict {
    case .accepted(let event):
        checkAccepted(event, input: input)
    case .filtered(let reason):
        fuzzRequire(reason == .trackingOff, "\(describeInput(input)): filtered as \(reason)")
    case .rejected(let reason, let detail):
        fuzzRequire(reason != .tooLate, "\(describeInput(input)): too_late comes from the window engine only")
        fuzzRequire(reason != .tooLarge || input.count > limits.maxMessageBytes, "\(describeInput(input)): too_large under the limit")
        fuzzRequire(!detail.hasPrefix(reason.rawValue), "\(describeInput(input)): detail \(detail.debugDescription) starts with \(reason.rawValue), which RejectReason.written(detail:) writes before it")
    }

    var writer = JSONWriter()
    verdict.writeJSONLine(into: &writer)
    let line = writer.bytes
    let reread = normalizer.normalize(line, kafkaTimestamp: nil)
    if case .rejected(.missingDeliveryId, _) = reread {} else {
        fuzzRequire(false, "\(describeInput(input)): its verdict line \(String(decoding: line, as: UTF8.self)) reads back as \(reread)")
    }
}

/// Property 8, for a message the reference read as a valid object.
func checkRepeatedNames(_ verdict: Verdict, reader: JSONReference, input: UnsafeRawBufferPointer) {
    let isDuplicateField = if case .rejected(.duplicateField, _) = verdict { true } else { false }
    fuzzRequire(
        isDuplicateField == reader.repeatsWithAnotherValue,
        "\(describeInput(input)): the reference \(reader.repeatsWithAnotherValue ? "finds" : "finds no") name repeated with another value, the normalizer says \(verdict)")
    guard !reader.repeatsWithAnotherValue, !reader.sameValueRepeats.isEmpty else { return }
    var without: [UInt8] = []
    var next = 0
    // A repeat inside a repeated container goes with it.
    for cut in reader.sameValueRepeats.sorted(by: { $0.lowerBound < $1.lowerBound }) where cut.lowerBound >= next {
        without += input[next..<cut.lowerBound]
        next = cut.upperBound
    }
    without += input[next...]
    let once = normalizer.normalize(without, kafkaTimestamp: kafkaTime)
    fuzzRequire(once == verdict, "\(describeInput(input)): \(verdict), but without its repeats \(String(decoding: without, as: UTF8.self).debugDescription) gives \(once)")
}

func checkAccepted(_ event: TrackingEvent, input: UnsafeRawBufferPointer) {
    let limit = normalizer.limits.maxIdBytes
    for id in [event.deliveryId.description, event.broadlogId.description] {
        fuzzRequire(!id.isEmpty && id.utf8.count <= limit, "\(describeInput(input)): accepted with id \(id.debugDescription)")
    }
    let time = event.eventTime ?? .min
    fuzzRequire(time >= RFC3339.minEpochMillis && time <= RFC3339.maxEpochMillis, "\(describeInput(input)): event time \(String(describing: event.eventTime))")

    var expected = event
    expected.shape = .sdkContextData
    for asText in [false, true] {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("deliveryId"); writer.string(event.deliveryId)
        writer.key("broadlogId"); writer.string(event.broadlogId)
        writer.key("action"); writer.string(String(event.action.campaignCode))
        if event.channel != .unknown { writer.key("channel"); writer.string(event.channel.name) }
        if event.platform != .unknown { writer.key("platform"); writer.string(event.platform.name) }
        writer.key("timestamp")
        if asText { writer.string(RFC3339.format(epochMillis: time)) } else { writer.int(time) }
        writer.endObject()
        let rewritten = normalizer.normalize(writer.bytes, kafkaTimestamp: nil)
        fuzzRequire(rewritten == .accepted(expected), "\(describeInput(input)): accepted as \(event), but \(writer.string) gives \(rewritten)")
    }
}

/// An independent reading of a message as JSON (RFC 8259): recursive descent over the bytes,
/// sharing no code with `JSONScanner`. Strict like the contract: UTF-8 only (checked by the
/// standard library's decoder), no lone surrogate escapes, no leading zeros, no BOM, nothing
/// after the value. It stops at the first of a syntax error and a container opened deeper than
/// `maxDepth` (the top-level value is depth 1), as the normalizer does, so at most `maxDepth`
/// frames of recursion.
///
/// On the way it notes, in the objects the contract reads, the names the contract reads that
/// are given more than once (names compared decoded, values by their JSON text): every
/// occurrence of a container is looked into, which finds what the normalizer finds in the
/// first, since a second one with the same text holds the same names.
struct JSONReference {
    enum Reading: Equatable {
        case valid(isObject: Bool)
        case malformed
        case tooDeep
    }

    private enum Stop: Error { case malformed, tooDeep }

    /// The objects the contract reads (docs/normalization.md, "Repeated names").
    private enum ContractObject { case top, container, message }

    private static let contractNames: Set<[UInt8]> = Set([
        "_dId", "deliveryId", "_mId", "broadlogId", "action", "actionName", "timestamp", "channel", "platform", "url",
        "_acsDeliveryTracking", "aps", "contextData", "userInfo", "message", "NOTIFICATION_USER_INFO",
    ].map { Array($0.utf8) })
    private static let topLevelContainers: Set<[UInt8]> = Set(["contextData", "userInfo", "NOTIFICATION_USER_INFO"].map { Array($0.utf8) })

    private let bytes: [UInt8]
    private let maxDepth: Int
    private var index = 0
    /// A name the contract reads, given twice with different JSON texts in an object it reads.
    private(set) var repeatsWithAnotherValue = false
    /// Each later occurrence of such a name with the same text as the first, from the comma
    /// before it to the end of its value: what can be cut out to leave one occurrence.
    private(set) var sameValueRepeats: [Range<Int>] = []

    init(_ bytes: [UInt8], maxDepth: Int) {
        self.bytes = bytes
        self.maxDepth = maxDepth
    }

    mutating func read() -> Reading {
        do throws(Stop) {
            skipWhitespace()
            let isObject = peek == UInt8(ascii: "{")
            try value(depth: 1, object: .top)
            skipWhitespace()
            guard index == bytes.count else { throw Stop.malformed }
            return .valid(isObject: isObject)
        } catch {
            return error == .tooDeep ? .tooDeep : .malformed
        }
    }

    private var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func skipWhitespace() {
        while let b = peek, b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D { index += 1 }
    }

    private mutating func take(_ byte: UInt8) throws(Stop) {
        guard peek == byte else { throw .malformed }
        index += 1
    }

    /// `object`: which object the contract reads this value is, if it is an object.
    private mutating func value(depth: Int, object: ContractObject? = nil) throws(Stop) {
        guard let b = peek else { throw .malformed }
        switch b {
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            guard depth <= maxDepth else { throw .tooDeep }
            let close = b == UInt8(ascii: "{") ? UInt8(ascii: "}") : UInt8(ascii: "]")
            index += 1
            skipWhitespace()
            if peek == close { index += 1; return }
            var firstTexts: [[UInt8]: ArraySlice<UInt8>] = [:]
            var memberStart = index
            while true {
                var name: [UInt8] = []
                if close == UInt8(ascii: "}") {
                    name = try string()
                    skipWhitespace()
                    try take(UInt8(ascii: ":"))
                    skipWhitespace()
                }
                let counts = object != nil && (Self.contractNames.contains(name) || object == .message && name == Array("data".utf8))
                let inner: ContractObject? =
                    switch object {
                    case .top where name == Array("message".utf8): .message
                    case .top where Self.topLevelContainers.contains(name): .container
                    case .message where name == Array("data".utf8): .container
                    default: nil
                    }
                let valueStart = index
                try value(depth: depth + 1, object: inner)
                if counts {
                    let text = bytes[valueStart..<index]
                    if let first = firstTexts[name] {
                        if first == text {
                            sameValueRepeats.append(memberStart..<index)
                        } else {
                            repeatsWithAnotherValue = true
                        }
                    } else {
                        firstTexts[name] = text
                    }
                }
                skipWhitespace()
                if peek == UInt8(ascii: ",") {
                    memberStart = index
                    index += 1
                    skipWhitespace()
                    continue
                }
                try take(close)
                return
            }
        case UInt8(ascii: "\""):
            _ = try string()
        case UInt8(ascii: "t"): try literal("true")
        case UInt8(ascii: "f"): try literal("false")
        case UInt8(ascii: "n"): try literal("null")
        default:
            try number()
        }
    }

    private mutating func literal(_ word: String) throws(Stop) {
        for byte in word.utf8 { try take(byte) }
    }

    private mutating func digits() throws(Stop) {
        guard let b = peek, b >= UInt8(ascii: "0"), b <= UInt8(ascii: "9") else { throw .malformed }
        while let b = peek, b >= UInt8(ascii: "0"), b <= UInt8(ascii: "9") { index += 1 }
    }

    private mutating func number() throws(Stop) {
        if peek == UInt8(ascii: "-") { index += 1 }
        if peek == UInt8(ascii: "0") {
            index += 1
        } else {
            try digits()
        }
        if peek == UInt8(ascii: ".") {
            index += 1
            try digits()
        }
        if peek == UInt8(ascii: "e") || peek == UInt8(ascii: "E") {
            index += 1
            if peek == UInt8(ascii: "+") || peek == UInt8(ascii: "-") { index += 1 }
            try digits()
        }
    }

    private mutating func hex4() throws(Stop) -> UInt32 {
        var unit: UInt32 = 0
        for _ in 0..<4 {
            guard let b = peek, let digit = Self.hexDigits.firstIndex(of: b) else { throw .malformed }
            unit = unit * 16 + UInt32(digit % 16)
            index += 1
        }
        return unit
    }

    /// Both cases; a digit's value is its index modulo 16.
    private static let hexDigits = Array("0123456789abcdef0123456789ABCDEF".utf8)

    /// Reads a string and returns its contents decoded, as UTF-8.
    private mutating func string() throws(Stop) -> [UInt8] {
        try take(UInt8(ascii: "\""))
        var decoded: [UInt8] = []
        while true {
            guard let b = peek else { throw .malformed }
            switch b {
            case UInt8(ascii: "\""):
                index += 1
                return decoded
            case UInt8(ascii: "\\"):
                index += 1
                guard let e = peek else { throw .malformed }
                index += 1
                switch e {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded.append(e)
                case UInt8(ascii: "b"): decoded.append(0x08)
                case UInt8(ascii: "f"): decoded.append(0x0C)
                case UInt8(ascii: "n"): decoded.append(0x0A)
                case UInt8(ascii: "r"): decoded.append(0x0D)
                case UInt8(ascii: "t"): decoded.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if (0xDC00...0xDFFF).contains(scalar) { throw .malformed }
                    if (0xD800...0xDBFF).contains(scalar) {
                        try take(UInt8(ascii: "\\"))
                        try take(UInt8(ascii: "u"))
                        let low = try hex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw .malformed }
                        scalar = 0x10000 + (scalar - 0xD800) << 10 + (low - 0xDC00)
                    }
                    decoded += Array(String(Character(Unicode.Scalar(scalar)!)).utf8)
                default:
                    throw .malformed
                }
            case 0..<0x20:
                throw .malformed
            case 0x20..<0x80:
                decoded.append(b)
                index += 1
            default:
                // One multi-byte sequence: its length from the lead byte, its validity (no
                // overlongs, no surrogates, nothing above U+10FFFF) from the standard library.
                let length = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2
                guard index + length <= bytes.count,
                      String(validating: bytes[index..<(index + length)], as: UTF8.self) != nil
                else { throw .malformed }
                decoded += bytes[index..<(index + length)]
                index += length
            }
        }
    }
}

@main
enum FuzzNormalizerMain {
    static func main() {
        fuzzMain(testOneInput: fuzzNormalizer, check: checkNormalizer)
    }
}

extension HitAction {
    /// The Campaign SDK code the apps send for this action (`"7"`, `"2"`, `"1"`), to write a hit
    /// back the way an app would.
    fileprivate var campaignCode: Int {
        switch self {
        case .impression: 7
        case .click: 2
        case .open: 1
        }
    }
}
