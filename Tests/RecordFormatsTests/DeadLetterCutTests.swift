import Kafka
@testable import RecordFormats
import Testing

@Suite("dead letters cut to fit the dead-letter topic")
struct DeadLetterCutTests {
    @Test("SHA-256 matches the FIPS 180-4 examples, across the one- and two-block paddings")
    func sha256() {
        #expect(sha256Hex([]) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(sha256Hex(Array("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(
            sha256Hex(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8))
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        #expect(sha256Hex(Array(repeating: UInt8(ascii: "a"), count: 1_000_000)) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    let headers = DeadLetter(reason: .tooLarge, detail: "…", sourceTopic: "hits", sourcePartition: 3, sourceOffset: 42).headers

    func cut(key: [UInt8]?, value: [UInt8]?, limit: Int) -> DeadLetterCut? {
        key.withOptionalBytes { k in value.withOptionalBytes { v in DeadLetterCut.fitting(key: k, value: v, headers: headers, limit: limit) } }
    }

    func header(_ cut: DeadLetterCut, _ name: String) -> String? { cut.headers.last { $0.key == name }?.stringValue }

    @Test("a letter that fits is left as it is")
    func fits() {
        #expect(cut(key: Array("device-1".utf8), value: Array(repeating: 1, count: 900_000), limit: 1_000_000) == nil)
    }

    @Test("a value too large is cut to what fits, and the headers give its size, digest and where the whole message is")
    func valueCut() throws {
        let value = (0..<1_500_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let result = try #require(cut(key: Array("device-1".utf8), value: value, limit: 1_000_000))
        #expect(result.keyBytes == 8, "the small key is kept whole")
        #expect(result.valueBytes < value.count && result.valueBytes > 990_000)
        #expect(DeadLetterCut.size(keyBytes: result.keyBytes, valueBytes: result.valueBytes, headers: result.headers) <= 1_000_000)
        #expect(header(result, DeadLetterCut.Header.truncated) == "value")
        #expect(header(result, DeadLetterCut.Header.valueSize) == "1500000")
        #expect(header(result, DeadLetterCut.Header.valueSHA256) == sha256Hex(value))
        #expect(header(result, DeadLetterCut.Header.keySize) == nil, "the key was not cut")
        let context = try #require(DeadLetter(headers: result.headers))
        #expect(context.sourceTopic == "hits" && context.sourcePartition == 3 && context.sourceOffset == 42)
        #expect(header(result, DeadLetter.Header.detail) == "too_large: …" && context.detail == "…", "the header writes the code before the detail")
    }

    @Test("a huge key and value share the room: the key up to an eighth, the value the rest")
    func bothCut() throws {
        let key = Array(repeating: UInt8(ascii: "k"), count: 600_000)
        let value = Array(repeating: UInt8(ascii: "v"), count: 600_000)
        let result = try #require(cut(key: key, value: value, limit: 100_000))
        #expect(header(result, DeadLetterCut.Header.truncated) == "key,value")
        #expect(result.keyBytes > 10_000 && result.keyBytes <= 12_500)
        #expect(result.valueBytes > 80_000)
        #expect(DeadLetterCut.size(keyBytes: result.keyBytes, valueBytes: result.valueBytes, headers: result.headers) <= 100_000)
        #expect(header(result, DeadLetterCut.Header.keySHA256) == sha256Hex(key))
        #expect(header(result, DeadLetterCut.Header.keySize) == "600000")
    }

    @Test("a key too large beside a small value takes the value's unused room")
    func keyCut() throws {
        let key = Array(repeating: UInt8(ascii: "k"), count: 300_000)
        let value = Array(#"{"deliveryId":"d1"}"#.utf8)
        let result = try #require(cut(key: key, value: value, limit: 200_000))
        #expect(result.valueBytes == value.count)
        #expect(header(result, DeadLetterCut.Header.truncated) == "key")
        #expect(result.keyBytes > 190_000)
        #expect(DeadLetterCut.size(keyBytes: result.keyBytes, valueBytes: result.valueBytes, headers: result.headers) <= 200_000)
    }

    @Test("a limit below what the headers take keeps no key or value, and still says what they were")
    func nothingFits() throws {
        let result = try #require(cut(key: Array("k".utf8), value: Array(repeating: 0, count: 5_000), limit: 300))
        #expect(result.keyBytes == 0 && result.valueBytes == 0)
        #expect(header(result, DeadLetterCut.Header.truncated) == "key,value")
        #expect(header(result, DeadLetterCut.Header.valueSize) == "5000")
    }
}

/// The SHA-256 of `bytes` as the dead letters' headers write it.
private func sha256Hex(_ bytes: [UInt8]) -> String { bytes.withUnsafeBytes { SHA256.hex($0) } }
