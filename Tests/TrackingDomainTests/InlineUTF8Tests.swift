import Testing
import TrackingDomain

@Suite("An id's bytes held inline: a delivery id and a broadlog id, one value from the normalizer to the output")
struct InlineUTF8Tests {
    /// Ids around the sixteen bytes held inline, and well past them.
    static let lengths = [0, 1, 7, 8, 15, 16, 17, 31, 32, 200]

    static func id(_ length: Int, last: Character = "z") -> String {
        String(repeating: "d", count: max(0, length - 1)) + (length > 0 ? String(last) : "")
    }

    /// The words as the construction's overlapping loads must give them: the id's first
    /// sixteen bytes, little-endian, zero beyond the id, never a byte of what lies around it.
    @Test("the inline words hold exactly the id's bytes at every length, whatever surrounds the id")
    func wordsAtEveryLength() {
        for length in 0...40 {
            let id = (0..<length).map { UInt8(ascii: "A") + UInt8($0 % 58) }
            var expected: (UInt64, UInt64) = (0, 0)
            for (index, byte) in id.prefix(16).enumerated() {
                if index < 8 { expected.0 |= UInt64(byte) << (8 * index) } else { expected.1 |= UInt64(byte) << (8 * (index - 8)) }
            }
            let surrounded = [UInt8](repeating: 0xFF, count: 9) + id + [UInt8](repeating: 0xFF, count: 9)
            let made = surrounded.withUnsafeBytes { DeliveryID(validUTF8: UnsafeRawBufferPointer(rebasing: $0[9..<(9 + length)])) }
            #expect(made.bytes.low == expected.0 && made.bytes.high == expected.1, "an id of \(length) bytes")
            #expect(made.utf8Count == length)
            made.withUTF8 { #expect(Array($0) == id, "an id of \(length) bytes reads back") }
        }
    }

    @Test("equal ids are equal and hash alike, ids that differ in any byte are not, at every length")
    func equalityAtEveryLength() {
        equalityAtEveryLength(DeliveryID.self)
        equalityAtEveryLength(BroadlogID.self)
    }

    func equalityAtEveryLength<ID: InlineID>(_: ID.Type) {
        for length in Self.lengths {
            let a = ID(Self.id(length))
            let b = Array(Self.id(length).utf8).withUnsafeBytes { ID($0) }
            #expect(a == b)
            #expect(a.hashValue == b.hashValue)
            #expect(a.utf8Count == length)
            #expect(a.description == Self.id(length))
            guard length > 0 else { continue }
            let other = ID(Self.id(length, last: "y"))
            #expect(a != other, "ids of \(length) bytes differing in the last byte")
            #expect(a != ID(Self.id(length + 1)), "an id and its extension")
        }
        // Same first sixteen bytes, different tails.
        let prefix = String(repeating: "a", count: 16)
        #expect(ID(prefix + "b") != ID(prefix + "c"))
        #expect(Set([ID(prefix + "b"), ID(prefix + "c"), ID(prefix + "b")]).count == 2)
    }

    @Test("ids order by their bytes, as the output's emission order and the changelog's do")
    func orderIsByBytes() {
        orderIsByBytes(DeliveryID.self)
        orderIsByBytes(BroadlogID.self)
    }

    func orderIsByBytes<ID: InlineID>(_: ID.Type) {
        let texts = ["", "a", "a0", "ab", "b", "d57fd6", String(repeating: "a", count: 16), String(repeating: "a", count: 17), "é", "😀"]
        let sorted = texts.map { ID($0) }.sorted()
        #expect(sorted.map { $0.description } == texts.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) })
    }

    @Test("bytes that are not UTF-8 are repaired as a String repairs them, so the id prints the same")
    func invalidBytesAreRepaired() {
        invalidBytesAreRepaired(DeliveryID.self)
        invalidBytesAreRepaired(BroadlogID.self)
    }

    func invalidBytesAreRepaired<ID: InlineID>(_: ID.Type) {
        let bytes: [UInt8] = [0x64, 0xFF, 0x31]
        let id = bytes.withUnsafeBytes { ID($0) }
        #expect(id.description == String(decoding: bytes, as: UTF8.self))
        #expect(id == ID(String(decoding: bytes, as: UTF8.self)))
    }

    @Test("bytes of any origin make the id their String makes, at every length, with a byte outside ASCII anywhere or nowhere, whatever surrounds them")
    func anyBytesAtEveryLength() {
        for length in 0...20 {
            for odd in [nil] + (0..<length).map(Optional.some) {
                var id = (0..<length).map { UInt8(ascii: "a") + UInt8($0 % 26) }
                if let odd { id[odd] = 0xE9 }
                let surrounded = [UInt8](repeating: 0xFF, count: 9) + id + [UInt8](repeating: 0xFF, count: 9)
                let made = surrounded.withUnsafeBytes { DeliveryID(UnsafeRawBufferPointer(rebasing: $0[9..<(9 + length)])) }
                #expect(made == DeliveryID(String(decoding: id, as: UTF8.self)), "\(id)")
            }
        }
    }

    @Test("an id is written to JSON quoted and escaped like a String")
    func jsonAsAString() {
        for text in ["d57fd6", "quote\"back\\slash", "tab\tnew\nline", String(repeating: "x", count: 40) + "\u{01}"] {
            var fromString = JSONWriter()
            fromString.string(text)
            var fromDelivery = JSONWriter()
            fromDelivery.string(DeliveryID(text))
            var fromBroadlog = JSONWriter()
            fromBroadlog.string(BroadlogID(text))
            #expect(fromDelivery.bytes == fromString.bytes, "\(text.debugDescription)")
            #expect(fromBroadlog.bytes == fromString.bytes, "\(text.debugDescription)")
        }
    }
}
