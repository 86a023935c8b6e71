import Testing
@testable import TrackingDomain

/// Behaviour that golden files cannot express well: configurable limits, API conveniences,
/// and properties that must hold across many inputs.
@Suite("Normalizer")
struct NormalizerTests {
    let hit = #"{"deliveryId":"d57fd6","broadlogId":"h1685a5","action":"7","timestamp":1795300000000}"#

    /// `integerMillis` reads eight digits at a time; this is the digit-at-a-time reading it
    /// replaced, as the reference.
    static func referenceMillis(_ literal: [UInt8]) -> Int64? {
        var index = 0
        let negative = literal.first == UInt8(ascii: "-")
        if negative { index = 1 }
        guard index < literal.count, literal.count - index <= 18 else { return nil }
        var value: Int64 = 0
        for byte in literal[index...] {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int64(byte - UInt8(ascii: "0"))
        }
        if negative { value = -value }
        return value >= RFC3339.minEpochMillis && value <= RFC3339.maxEpochMillis ? value : nil
    }

    @Test("integer timestamps read eight digits at a time as a digit at a time, at every length and with any byte off")
    func integerMillisAgreesWithReference() {
        var literals: [[UInt8]] = []
        let digits = Array("918273645501928374655".utf8)
        for length in 0...20 {
            literals.append(Array(digits.prefix(length)))
            literals.append([UInt8(ascii: "-")] + digits.prefix(length))
        }
        literals += ["1795300000000", "253402300799999", "253402300800000", "-62167219200000", "-62167219200001",
                     "000000000000000001", "999999999999999999", "-0", "+1795300000000", "17953e0000000"].map { Array($0.utf8) }
        // Bytes next to the digits' range, and ones whose nibbles only look like a digit's.
        let offBytes: [UInt8] = [0x2F, 0x3A, 0x3F, 0x40, 0x20, 0x00, 0xB0, 0xB9, 0x39 &+ 0x80, 0x2E, 0x65, 0x2D]
        for length in [8, 9, 13, 16, 17, 18] {
            for position in 0..<length {
                for byte in offBytes {
                    var literal = Array(digits.prefix(length))
                    literal[position] = byte
                    literals.append(literal)
                }
            }
        }
        for literal in literals {
            let read = literal.withUnsafeBytes { HitReader.integerMillis($0) }
            #expect(read == Self.referenceMillis(literal), "\(String(decoding: literal, as: UTF8.self))")
        }
    }

    /// `channel(named:)` and `platform(named:)` compare a folded word; this is the byte-by-byte
    /// comparison they replaced, as the reference.
    static func referenceEqualsIgnoringASCIICase(_ bytes: [UInt8], _ lowercase: String) -> Bool {
        let l = Array(lowercase.utf8)
        guard bytes.count == l.count else { return false }
        for i in 0..<bytes.count {
            var b = bytes[i]
            if b >= UInt8(ascii: "A") && b <= UInt8(ascii: "Z") { b |= 0x20 }
            if b != l[i] { return false }
        }
        return true
    }

    @Test("explicit channel and platform names are read as a word as byte by byte: every case, every byte off, every length")
    func channelAndPlatformNamesAgreeWithReference() {
        let names = ["push", "local", "ios", "android"]
        var candidates: [[UInt8]] = [[], Array("pushlocal".utf8), Array("androids".utf8), Array("andro".utf8)]
        for name in names {
            let bytes = Array(name.utf8)
            // Every mix of upper and lower case.
            for mask in 0..<(1 << bytes.count) {
                candidates.append(bytes.enumerated().map { mask & (1 << $0.offset) != 0 ? $0.element & ~0x20 : $0.element })
            }
            // Every byte at every position, and the name cut, extended or padded with NUL.
            for position in 0..<bytes.count {
                for byte in 0...UInt8.max {
                    var changed = bytes
                    changed[position] = byte
                    candidates.append(changed)
                }
            }
            candidates += [Array(bytes.dropLast()), Array(bytes.dropFirst()), bytes + [0], [0] + bytes, bytes + bytes.suffix(1), bytes + [0x20]]
        }
        for candidate in candidates {
            let text = String(decoding: candidate, as: UTF8.self)
            let channel = candidate.withUnsafeBytes { HitReader.channel(named: $0) }
            let expectedChannel: Channel? = Self.referenceEqualsIgnoringASCIICase(candidate, "push") ? .push
                : Self.referenceEqualsIgnoringASCIICase(candidate, "local") ? .local : nil
            #expect(channel == expectedChannel, "\(candidate) \(text)")
            let platform = candidate.withUnsafeBytes { HitReader.platform(named: $0) }
            let expectedPlatform: Platform? = Self.referenceEqualsIgnoringASCIICase(candidate, "ios") ? .ios
                : Self.referenceEqualsIgnoringASCIICase(candidate, "android") ? .android : nil
            #expect(platform == expectedPlatform, "\(candidate) \(text)")
        }
    }

    @Test("a message over maxMessageBytes is too_large before anything else, even if it is not JSON")
    func tooLargeComesFirst() {
        let normalizer = Normalizer(limits: NormalizerLimits(maxMessageBytes: 64))
        let big = Array(repeating: UInt8(ascii: "x"), count: 65)
        guard case .rejected(.tooLarge, let detail) = normalizer.normalize(big, kafkaTimestamp: nil) else {
            Issue.record("expected too_large"); return
        }
        #expect(detail.contains("65 bytes") && detail.contains("64"))
        let exactlyAtLimit = Array(hit.utf8)
        let fits = Normalizer(limits: NormalizerLimits(maxMessageBytes: exactlyAtLimit.count))
        #expect(fits.normalize(exactlyAtLimit, kafkaTimestamp: nil).isAccepted)
    }

    @Test("the default limit accepts a 1 MiB message and rejects one byte more")
    func defaultSizeLimit() {
        let prefix = #"{"deliveryId":"d","broadlogId":"b","action":"7","pad":""#
        let suffix = #""}"#
        let padding = 1_048_576 - prefix.utf8.count - suffix.utf8.count
        let atLimit = prefix + String(repeating: "x", count: padding) + suffix
        #expect(Normalizer().normalize(Array(atLimit.utf8), kafkaTimestamp: nil).isAccepted)
        let over = prefix + String(repeating: "x", count: padding + 1) + suffix
        #expect(Normalizer().normalize(Array(over.utf8), kafkaTimestamp: nil).reason == .tooLarge)
    }

    @Test("maxDepth counts the top-level object as depth 1")
    func depthLimit() {
        let normalizer = Normalizer(limits: NormalizerLimits(maxDepth: 3))
        let depth3 = #"{"deliveryId":"d","broadlogId":"b","action":"7","x":{"y":[1]}}"#
        let depth4 = #"{"deliveryId":"d","broadlogId":"b","action":"7","x":{"y":[[1]]}}"#
        #expect(normalizer.normalize(Array(depth3.utf8), kafkaTimestamp: nil).isAccepted)
        #expect(normalizer.normalize(Array(depth4.utf8), kafkaTimestamp: nil).reason == .tooDeep)
        // Nesting through the containers the normalizer reads counts the same way.
        let deepContainer = #"{"action":"7","message":{"data":{"_dId":"d","_mId":"b","x":{}}}}"#
        #expect(normalizer.normalize(Array(deepContainer.utf8), kafkaTimestamp: nil).reason == .tooDeep)
    }

    @Test("a raised maxDepth handles very deep nesting without exhausting the stack")
    func veryDeepNesting() {
        let depth = 200_000
        let normalizer = Normalizer(limits: NormalizerLimits(maxMessageBytes: 1 << 24, maxDepth: depth + 10))
        let deep = #"{"deliveryId":"d","broadlogId":"b","action":"7","x":"# + String(repeating: "[", count: depth) + String(repeating: "]", count: depth) + "}"
        #expect(normalizer.normalize(Array(deep.utf8), kafkaTimestamp: nil).isAccepted)
        let mismatched = #"{"x":"# + String(repeating: "[{\"a\":", count: 100) + "1" + String(repeating: "}]", count: 99) + "]}}"
        #expect(normalizer.normalize(Array(mismatched.utf8), kafkaTimestamp: nil).reason == .malformedJSON)
    }

    @Test("maxIdBytes counts UTF-8 bytes of the decoded id")
    func idLimitCountsBytes() {
        let normalizer = Normalizer(limits: NormalizerLimits(maxIdBytes: 4))
        // "é" is two bytes: "éé" is 4 bytes (fits), "ééa" is 5 (too long).
        #expect(normalizer.normalize(Array(#"{"deliveryId":"éé","broadlogId":"b","action":"7"}"#.utf8), kafkaTimestamp: nil).isAccepted)
        #expect(normalizer.normalize(Array(#"{"deliveryId":"\u00e9\u00e9a","broadlogId":"b","action":"7"}"#.utf8), kafkaTimestamp: nil).reason == .idTooLong)
    }

    @Test("the Kafka timestamp is used only when the hit has none")
    func kafkaTimestampFallback() {
        let withTime = Normalizer().normalize(Array(hit.utf8), kafkaTimestamp: 42)
        #expect(withTime.event?.eventTime == 1_795_300_000_000)
        let without = #"{"deliveryId":"d57fd6","broadlogId":"h1685a5","action":"7"}"#
        #expect(Normalizer().normalize(Array(without.utf8), kafkaTimestamp: 42).event?.eventTime == 42)
        #expect(Normalizer().normalize(Array(without.utf8), kafkaTimestamp: nil).event?.eventTime == nil)
    }

    @Test("ids keep every byte: escapes decode to the same String as the literal characters")
    func idsByteForByte() {
        let escaped = #"{"deliveryId":"\ud83d\ude00\u00e9\"","broadlogId":"\t","action":1}"#
        let event = Normalizer().normalize(Array(escaped.utf8), kafkaTimestamp: nil).event
        #expect(event?.deliveryId == "😀é\"")
        #expect(event?.broadlogId == "\t")
        #expect(event?.deliveryId.withUTF8 { Array($0) } == [0xF0, 0x9F, 0x98, 0x80, 0xC3, 0xA9, 0x22])
    }

    @Test("the Collection and UnsafeRawBufferPointer entry points agree, including for non-contiguous input")
    func entryPointsAgree() {
        let bytes = Array(hit.utf8)
        let viaBuffer = bytes.withUnsafeBytes { Normalizer().normalize($0, kafkaTimestamp: nil) }
        #expect(viaBuffer == Normalizer().normalize(bytes, kafkaTimestamp: nil))
        #expect(viaBuffer == Normalizer().normalize(hit.utf8, kafkaTimestamp: nil))
        #expect(viaBuffer == Normalizer().normalize(bytes.lazy.map { $0 }, kafkaTimestamp: nil))
        let empty = UnsafeRawBufferPointer(start: nil, count: 0)
        #expect(Normalizer().normalize(empty, kafkaTimestamp: nil).reason == .malformedJSON)
    }

    @Test("every rejection detail tells the sender what to do, and leaves its code to RejectReason.written(detail:)")
    func detailsAreActionable() {
        let inputs = [
            "", "[]", #"{"actionName":"x"}"#, #"{"url":"x"}"#, #"{"_dId":"a","deliveryId":"b"}"#,
            #"{"action":"7"}"#, #"{"deliveryId":"d"}"#, #"{"deliveryId":"d","broadlogId":"b"}"#,
            #"{"deliveryId":"d","broadlogId":"b","action":"7","timestamp":"x"}"#,
            #"{"deliveryId":"d","broadlogId":"b","action":"7","action":"1"}"#,
        ]
        for input in inputs {
            guard case .rejected(let reason, let detail) = Normalizer().normalize(Array(input.utf8), kafkaTimestamp: nil) else {
                Issue.record("\(input) was not rejected"); continue
            }
            #expect(!detail.hasPrefix(reason.rawValue), "written after its code once, by RejectReason.written(detail:)")
            #expect(detail.contains(";"), "\(detail) should say what to do after the problem")
        }
    }
}

extension Verdict {
    var isAccepted: Bool { if case .accepted = self { true } else { false } }
    var event: TrackingEvent? { if case .accepted(let event) = self { event } else { nil } }
    var reason: RejectReason? { if case .rejected(let reason, _) = self { reason } else { nil } }
}
