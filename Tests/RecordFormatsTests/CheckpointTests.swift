import Foundation
@testable import RecordFormats
import Testing

/// The `seen` map of a checkpoint, pinned byte for byte: it lives in commit metadata that the
/// next release reads back, so its encoding must not drift.
@Suite("checkpoint: the seen map's encoding")
struct CheckpointTests {
    static let identity = GroupIdentity(group: "g", inputTopic: nil, windowSizes: [60_000], repartitionTopic: "g-repartition", stateTopic: "g-state")

    /// Maps whose encodings end on each of the three base64 remainders, with gaps between
    /// sources, several incarnations, offsets of every varint width, and a source never counted
    /// (offset -1).
    static let examples: [([Int32: SourceFloor], String)] = [
        ([0: SourceFloor(incarnation: 1, offset: 20_000)], "AQEAAAAAAAAAAQChnAE"),
        ([3: SourceFloor(incarnation: 0, offset: -1), 4: SourceFloor(incarnation: 0, offset: 16_383)], "AQAAAAAAAAAAAgMAAICAAQ"),
        (
            [
                0: SourceFloor(incarnation: 0xDEAD_BEEF_0123_4567, offset: 1 << 42 - 2),
                7: SourceFloor(incarnation: 0xDEAD_BEEF_0123_4567, offset: 300),
                2: SourceFloor(incarnation: 9, offset: 16_383),
                399: SourceFloor(incarnation: .max, offset: 5),
            ], "AwkAAAAAAAAAAQKAgAFnRSMB776t3gIA______9_Bq0C__________8BjwMG"
        ),
    ]

    @Test("each example encodes to its pinned text and decodes back to its map")
    func pinned() {
        for (seen, text) in Self.examples {
            #expect(Checkpoint.encode(seen) == text, "\(seen)")
            #expect(Checkpoint.decode(text) == seen, "\(text)")
            let checkpoint = Checkpoint(evictedBefore: 1, processedMark: 2, seen: seen, changelog: 3, identity: Self.identity)
            #expect(checkpoint.encoded.hasSuffix(" seen=\(text)"))
            #expect(Checkpoint(decoding: checkpoint.encoded, group: "g") == checkpoint)
        }
    }

    @Test("the map's base64url is Foundation's base64 in the URL alphabet, without padding, for every length and byte")
    func base64url() {
        var generator = SystemRandomNumberGenerator()
        for count in 0..<64 {
            let bytes = (0..<count).map { index in index < 3 ? UInt8(255 - index) : UInt8.random(in: 0...255, using: &generator) }
            let foundation = Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            #expect(Checkpoint.base64url(bytes) == foundation, "\(bytes)")
        }
    }

    @Test("text that is not base64url without padding, or bytes that end early or run on, decode to nil")
    func malformed() {
        for text in ["", "A", "AB=", "AB+/", "AB CD", "%%%"] { #expect(Checkpoint.decode(text) == nil, "\(text)") }
        let valid = Self.examples[2].1
        #expect(Checkpoint.decode(valid.dropLast(2)) == nil, "cut short")
        #expect(Checkpoint.decode(valid + "AA") == nil, "bytes after the map")
    }
}
