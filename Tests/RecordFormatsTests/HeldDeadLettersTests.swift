import Kafka
import TrackingDomain
@testable import RecordFormats
import Testing

@Suite("dead letters held until the commit")
struct HeldDeadLettersTests {
    struct Letter: Equatable {
        var key: [UInt8]?
        var value: [UInt8]?
        var headers: [KafkaHeader]
        var timestamp: Int64?
    }

    /// Letters of every shape: a plain one, one whose detail is not ASCII, one without a key or
    /// timestamp and with an empty value, one cut to fit (its cut headers follow), one whose value
    /// is the hit as normalized (no key), one of a negative partition and offset.
    static func outgoing(_ body: ([OutgoingDeadLetter]) -> Void) {
        let key: [UInt8] = Array("device-1".utf8), value: [UInt8] = Array(#"{"hit":1}"#.utf8), empty: [UInt8] = []
        func letter(_ reason: RejectReason, _ detail: String, partition: Int32 = 3, offset: Int64 = 41) -> DeadLetter {
            DeadLetter(reason: reason, detail: detail, sourceTopic: "tracking-hits", sourcePartition: partition, sourceOffset: offset)
        }
        let cut = [KafkaHeader(key: DeadLetterCut.Header.truncated, string: "value"), KafkaHeader(key: DeadLetterCut.Header.valueSize, string: "9")]
        key.withUnsafeBytes { key in
            value.withUnsafeBytes { value in
                empty.withUnsafeBytes { empty in
                    body([
                        OutgoingDeadLetter(letter: letter(.tooLate, "window closed"), key: key, value: value, timestamp: 5),
                        OutgoingDeadLetter(letter: letter(.malformedJSON, "caractère «é» inattendu"), key: key, value: value, timestamp: 6),
                        OutgoingDeadLetter(letter: letter(.tooLarge, ""), key: nil, value: empty, timestamp: nil),
                        OutgoingDeadLetter(letter: letter(.tooLarge, "cut"), key: key, value: value, timestamp: 7, cut: cut),
                        OutgoingDeadLetter(letter: letter(.tooLate, "late"), key: nil, value: nil, timestamp: 8, normalized: Array("{}".utf8)),
                        OutgoingDeadLetter(letter: letter(.tooLate, "odd", partition: -1, offset: -2), key: key, value: nil, timestamp: 9),
                    ])
                }
            }
        }
    }

    static func letter(_ record: some OutgoingRecord) -> Letter {
        record.withBytes { key, value in
            Letter(key: key.map { Array($0) }, value: value.map { Array($0) }, headers: record.headers, timestamp: record.timestamp)
        }
    }

    @Test("a held letter is sent with the bytes, headers and timestamp its letter gives, in order, twice over the same buffer")
    func sameAsTheLetter() {
        var held = HeldDeadLetters()
        Self.outgoing { letters in
            // What the letter says it is: its key, its normalized form or else its value, its headers.
            let expected = letters.map {
                Letter(key: $0.key.map { Array($0) }, value: $0.normalized ?? $0.value.map { Array($0) }, headers: $0.headers, timestamp: $0.timestamp)
            }
            for round in 0..<2 {
                for letter in letters { held.append(letter) }
                #expect(held.count == letters.count)
                var sent: [Letter] = []
                held.drain { letter in
                    var blockHeaders: [KafkaHeader] = []
                    letter.withHeaderBlock { blockHeaders = $0?.headers ?? [] }
                    #expect(blockHeaders == letter.headers)
                    sent.append(Self.letter(letter))
                }
                #expect(sent == expected, "round \(round)")
                #expect(held.isEmpty)
            }
        }
    }

    @Test("a held letter's size, counted from its block, is the size its headers as values give")
    func sizeFromTheBlock() {
        var held = HeldDeadLetters()
        Self.outgoing { letters in
            for letter in letters { held.append(letter) }
            held.drain { letter in
                letter.withBytes { key, value in
                    letter.withHeaderBlock { block in
                        let fromBlock = DeadLetterCut.size(keyBytes: key?.count ?? 0, valueBytes: value?.count ?? 0, headerBlock: block!)
                        #expect(fromBlock == DeadLetterCut.size(keyBytes: key?.count ?? 0, valueBytes: value?.count ?? 0, headers: letter.headers))
                    }
                }
            }
        }
    }
}
