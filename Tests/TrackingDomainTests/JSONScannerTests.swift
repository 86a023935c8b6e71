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
}
