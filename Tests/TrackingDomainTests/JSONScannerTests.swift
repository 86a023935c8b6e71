import HitGenerator
import Testing
@testable import TrackingDomain

/// The scanner's word-at-a-time string path against the byte-at-a-time rule it stands for.
@Suite("JSON scanner")
struct JSONScannerTests {
    /// The rule, one byte at a time: what ends a string's plain run.
    static func isSpecial(_ byte: UInt8) -> Bool {
        byte < 0x20 || byte >= 0x80 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\")
    }

    @Test("the lowest byte flagged in a word is the first byte that ends a plain run, in every word tried")
    func specialBytesFindTheFirstSpecialByte() {
        var rng = SplitMix64(seed: 0x5CA1_AB1E)
        // Mostly plain ASCII with one or two specials at random places, and some random words.
        let specials: [UInt8] = [0x00, 0x1F, 0x20, 0x21, 0x22, 0x23, 0x5B, 0x5C, 0x5D, 0x7F, 0x80, 0xC3, 0xFF]
        for round in 0..<200_000 {
            var bytes = (0..<8).map { _ in UInt8.random(in: 0x20...0x7E, using: &rng) }
            if round % 5 == 0 {
                bytes = (0..<8).map { _ in UInt8.random(in: 0...255, using: &rng) }
            } else {
                for _ in 0..<Int.random(in: 0...2, using: &rng) {
                    bytes[Int.random(in: 0..<8, using: &rng)] = specials.randomElement(using: &rng)!
                }
            }
            let word = bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
            let flagged = JSONScanner.specialBytes(word)
            let expected = bytes.firstIndex(where: Self.isSpecial)
            if flagged == 0 {
                #expect(expected == nil, "\(bytes): nothing flagged, but byte \(expected!) ends the run")
            } else {
                #expect(flagged.trailingZeroBitCount / 8 == expected, "\(bytes): flagged \(flagged.trailingZeroBitCount / 8), expected \(String(describing: expected))")
            }
        }
    }

    @Test("every byte value at every place of strings up to 24 bytes: valid or not as byte-at-a-time scanning says")
    func everyByteAtEveryPlace() {
        for length in 1...24 {
            for place in 0..<length {
                for value in 0...255 {
                    var content = Array(repeating: UInt8(ascii: "a"), count: length)
                    content[place] = UInt8(value)
                    let message = Array(#"{"k":""#.utf8) + content + Array(#""}"#.utf8)
                    let verdict = Normalizer().normalize(message, kafkaTimestamp: 1)
                    // The key is unknown, so the hit lacks ids; only the JSON's validity matters.
                    var malformed = false
                    if case .rejected(.malformedJSON, _) = verdict { malformed = true }
                    let byte = UInt8(value)
                    // Alone in plain ASCII: a quote ends the string early (then garbage follows), a
                    // backslash starts an escape of the next 'a' (invalid), control characters are
                    // refused, and a lone byte of 0x80 and up is invalid UTF-8.
                    let expectMalformed = Self.isSpecial(byte)
                    #expect(malformed == expectMalformed, "length \(length), byte 0x\(String(value, radix: 16)) at \(place): \(verdict)")
                }
            }
        }
    }

    /// Calls `body` with a scanner over `bytes` (the whole buffer is the message).
    static func withScanner<R>(_ bytes: [UInt8], _ body: (JSONScanner) -> R) -> R {
        bytes.withUnsafeBufferPointer { buffer in
            // An empty array may have no base address; any valid pointer serves for no bytes.
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 1) { spare in
                body(JSONScanner(base: buffer.baseAddress ?? UnsafePointer(spare.baseAddress!), count: bytes.count, maxDepth: 64))
            }
        }
    }

    /// Byte at a time: the index of the first byte from `start` on that `stops`, or the end.
    static func runEnd(_ bytes: [UInt8], from start: Int, stopsAt stops: (UInt8) -> Bool) -> Int {
        bytes[start...].firstIndex(where: stops) ?? bytes.count
    }

    static func isNotDigit(_ byte: UInt8) -> Bool { !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) }

    @Test("runs of plain string bytes and of digits end where byte-at-a-time scanning ends them: every start, every stop byte at every place, the end of the message mid-word")
    func runEndsMatchTheByteLoop() {
        // Stop bytes and near misses for both scans, over fillers of plain ASCII and of digits.
        let probes: [UInt8] = [0x00, 0x09, 0x1F, 0x20, 0x21, 0x22, 0x23, 0x2F, 0x30, 0x39, 0x3A, 0x5B, 0x5C, 0x5D, 0x7F, 0x80, 0xB0, 0xB9, 0xC3, 0xFF]
        for filler in [UInt8(ascii: "a"), UInt8(ascii: "7")] {
            for length in 0...24 {
                // No stop byte at all: the run goes to the end of the message.
                var messages = [Array(repeating: filler, count: length)]
                for place in 0..<length {
                    for probe in probes {
                        var bytes = Array(repeating: filler, count: length)
                        bytes[place] = probe
                        messages.append(bytes)
                    }
                }
                for bytes in messages {
                    for start in 0...length {
                        let (plain, digits) = Self.withScanner(bytes) { ($0.plainRunEnd(from: start), $0.digitRunEnd(from: start)) }
                        #expect(plain == Self.runEnd(bytes, from: start, stopsAt: Self.isSpecial), "plain run of \(bytes) from \(start)")
                        #expect(digits == Self.runEnd(bytes, from: start, stopsAt: Self.isNotDigit), "digit run of \(bytes) from \(start)")
                    }
                }
            }
        }
    }

    @Test("every byte value in a word: marked as a non-digit exactly when it is one")
    func nonDigitBytesMarksExactlyTheNonDigits() {
        for value in 0...255 {
            for place in 0..<8 {
                var bytes = Array("01234567".utf8)
                bytes[place] = UInt8(value)
                let word = bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
                let marks = JSONScanner.nonDigitBytes(word)
                let expected = bytes.enumerated().reduce(UInt64(0)) { marks, byte in
                    Self.isNotDigit(byte.element) ? marks | 0x80 << (8 * UInt64(byte.offset)) : marks
                }
                #expect(marks == expected, "\(bytes)")
            }
        }
    }

    @Test("keys are told by word compares as by comparing their bytes: every name, every one-byte change of it, every length")
    func keysMatchByTheirBytes() {
        let keys = (1...HitKey.data.rawValue).map { HitKey(rawValue: $0)! }
        func reference(_ bytes: [UInt8]) -> HitKey {
            keys.first { Array($0.name.utf8) == bytes } ?? .other
        }
        func matched(_ bytes: [UInt8]) -> HitKey {
            bytes.withUnsafeBufferPointer { HitKey.match($0.baseAddress!, $0.count) }
        }
        var candidates: [[UInt8]] = (1...24).map { Array(repeating: UInt8(ascii: "a"), count: $0) }
        for key in keys {
            let name = Array(key.name.utf8)
            candidates.append(name)
            candidates.append(Array(name.dropLast()))
            candidates.append(Array(name.dropFirst()))
            candidates.append(name + [UInt8(ascii: "x")])
            for place in name.indices {
                for change: UInt8 in [0x00, 0x01, 0x20, 0x80] {
                    var changed = name
                    changed[place] ^= change == 0 ? 0xFF : change
                    candidates.append(changed)
                }
            }
        }
        for bytes in candidates where !bytes.isEmpty {
            #expect(matched(bytes) == reference(bytes), "\(String(decoding: bytes, as: UTF8.self))")
        }
        for key in keys {
            #expect(matched(Array(key.name.utf8)) == key)
        }
    }
}
