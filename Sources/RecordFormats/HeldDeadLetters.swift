import Kafka

/// Dead letters held until the next commit (the aggregate stage sends them once the state that
/// judged them is written), every letter's key, value and headers in one buffer that keeps its
/// room from one commit to the next.
///
/// Held as `OwnedDeadLetter`s, a letter cost two arrays for its key and value and, for its five
/// headers, five Strings made into five arrays and an array of them: about 5,300 instructions to
/// hold and 2,600 to free at the commit, a third of what a dead letter cost (callgrind, one
/// stage). Here it costs the copy of its bytes.
package struct HeldDeadLetters: Sendable {
    /// Where one letter's parts lie in `bytes`.
    private struct Held: Sendable {
        var key: Range<Int>?
        var value: Range<Int>?
        var headers: Range<Int>
        var timestamp: Int64?
    }

    private var bytes: [UInt8] = []
    private var letters: [Held] = []

    package init() {}

    package var count: Int { letters.count }
    package var isEmpty: Bool { letters.isEmpty }

    /// Keeps a copy of `letter`: its key and value (or the hit as normalized), and the headers
    /// `OutgoingDeadLetter.headers` gives, byte for byte.
    package mutating func append(_ letter: OutgoingDeadLetter) {
        let key = letter.key.map { keep($0) }
        let value = letter.normalized.map { normalized in normalized.withUnsafeBytes { keep($0) } } ?? letter.value.map { keep($0) }
        let start = bytes.count
        appendHeaders(of: letter)
        letters.append(Held(key: key, value: value, headers: start..<bytes.count, timestamp: letter.timestamp))
    }

    private mutating func keep(_ part: UnsafeRawBufferPointer) -> Range<Int> {
        let start = bytes.count
        bytes.append(contentsOf: part)
        return start..<bytes.count
    }

    /// `OutgoingDeadLetter.headers`, written without a String or an array per header.
    private mutating func appendHeaders(of outgoing: OutgoingDeadLetter) {
        outgoing.letter.appendHeaderBlock(to: &bytes)
        if outgoing.normalized != nil {
            KafkaHeaderBlock.append(name: DeadLetter.Header.normalized, string: "true", to: &bytes)
        } else {
            for header in outgoing.cut { KafkaHeaderBlock.append(header, to: &bytes) }
        }
    }

    /// Lends each letter to `body` in the order they were held, then forgets them all, keeping
    /// the room for the next commit's. A letter lives for the length of its call only.
    package mutating func drain(_ body: (HeldDeadLetter) throws -> Void) rethrows {
        try bytes.withUnsafeBytes { bytes in
            func part(_ range: Range<Int>?) -> UnsafeRawBufferPointer? { range.map { UnsafeRawBufferPointer(rebasing: bytes[$0]) } }
            for letter in letters {
                try body(
                    HeldDeadLetter(
                        key: part(letter.key), value: part(letter.value), headerBlock: KafkaHeaderBlock(UnsafeRawBufferPointer(rebasing: bytes[letter.headers])),
                        timestamp: letter.timestamp))
            }
        }
        bytes.removeAll(keepingCapacity: true)
        letters.removeAll(keepingCapacity: true)
    }
}

/// One held dead letter, lent by `HeldDeadLetters.drain`: its bytes lie in the holder's buffer.
package struct HeldDeadLetter: DeadLetterRecord {
    let key: UnsafeRawBufferPointer?
    let value: UnsafeRawBufferPointer?
    let headerBlock: KafkaHeaderBlock
    package let timestamp: Int64?

    /// Decoded from the block: for what reads headers by name (a sink of tests, a cut).
    package var headers: [KafkaHeader] { headerBlock.headers }

    package func withBytes<R>(_ body: (_ key: UnsafeRawBufferPointer?, _ value: UnsafeRawBufferPointer?) throws -> R) rethrows -> R {
        try body(key, value)
    }

    package func withHeaderBlock<R>(_ body: (KafkaHeaderBlock?) throws -> R) rethrows -> R { try body(headerBlock) }
}
