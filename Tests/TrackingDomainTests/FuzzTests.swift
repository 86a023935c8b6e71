import Foundation
import Testing
import TrackingDomain
import HitGenerator

/// Property tests over mutated hits: the normalizer must give exactly one well-formed verdict for
/// any bytes, the same verdict every time, and agree with Foundation on what is valid JSON.
@Suite("Fuzzing and differential checks")
struct FuzzTests {
    static let seeds: [[UInt8]] = GoldenCase.all
        .filter { $0.expectedLine?.contains("\"status\":\"ok\"") == true }
        .map(\.input)

    /// One random mutation of a valid hit.
    static func mutate(_ input: [UInt8], other: [UInt8], rng: inout SplitMix64) -> [UInt8] {
        var bytes = input
        let interesting: [UInt8] = Array(#"{}[]",:\ 0-.eE7tfnu"#.utf8) + [0x00, 0x1F, 0x7F, 0x80, 0xBF, 0xC0, 0xC3, 0xE2, 0xED, 0xF0, 0xF4, 0xF5, 0xFF]
        func randomByte() -> UInt8 { Bool.random(using: &rng) ? interesting.randomElement(using: &rng)! : UInt8.random(in: 0...255, using: &rng) }
        let rounds = Int.random(in: 1...3, using: &rng)
        for _ in 0..<rounds {
            let position = bytes.isEmpty ? 0 : Int.random(in: 0..<bytes.count, using: &rng)
            switch Int.random(in: 0..<7, using: &rng) {
            case 0 where !bytes.isEmpty:  // flip one bit
                bytes[position] ^= 1 << UInt8.random(in: 0..<8, using: &rng)
            case 1 where !bytes.isEmpty:  // replace a byte
                bytes[position] = randomByte()
            case 2:  // truncate
                bytes.removeSubrange(position...)
            case 3:  // insert
                bytes.insert(contentsOf: (0..<Int.random(in: 1...4, using: &rng)).map { _ in randomByte() }, at: position)
            case 4 where !bytes.isEmpty:  // delete a range
                let end = min(bytes.count, position + Int.random(in: 1...8, using: &rng))
                bytes.removeSubrange(position..<end)
            case 5 where !other.isEmpty:  // splice a piece of another hit
                let start = Int.random(in: 0..<other.count, using: &rng)
                let end = min(other.count, start + Int.random(in: 1...40, using: &rng))
                bytes.insert(contentsOf: other[start..<end], at: position)
            default:  // deep nesting around a value
                let depth = Int.random(in: 1...60, using: &rng)
                bytes = Array(repeating: UInt8(ascii: "["), count: depth) + bytes + Array(repeating: UInt8(ascii: "]"), count: depth)
            }
        }
        return bytes
    }

    static func foundationAccepts(_ bytes: [UInt8]) -> Bool {
        (try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])) != nil
    }

    @Test("thousands of mutated hits: one well-formed, deterministic verdict each, never a crash")
    func mutatedHitsNeverCrash() throws {
        let seeds = Self.seeds
        try #require(seeds.count > 20)
        var rng = SplitMix64(seed: 0x7EAC_4B1E)
        var reasons: [String: Int] = [:]
        for _ in 0..<6000 {
            let input = Self.mutate(seeds.randomElement(using: &rng)!, other: seeds.randomElement(using: &rng)!, rng: &rng)
            let verdict = Normalizer().normalize(input, kafkaTimestamp: 1_795_300_000_000)
            // Same bytes at another address: same verdict.
            let copy = Array(input)
            #expect(Normalizer().normalize(copy, kafkaTimestamp: 1_795_300_000_000) == verdict)
            let line = verdict.jsonLine
            let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            let status = object["status"] as? String
            #expect(status == "ok" || status == "filtered" || status == "rejected")
            switch verdict {
            case .accepted: reasons["ok", default: 0] += 1
            case .filtered: reasons["filtered", default: 0] += 1
            case .rejected(let reason, let detail):
                reasons[reason.rawValue, default: 0] += 1
                #expect(detail.hasPrefix(reason.rawValue + ": "))
            }
        }
        // The mutations must actually reach the interesting verdicts, or the test proves little.
        for expected in ["ok", "malformed_json", "not_an_object", "too_deep", "missing_delivery_id", "unknown_action"] {
            #expect(reasons[expected, default: 0] > 0, "no mutated input was \(expected): \(reasons)")
        }
    }

    @Test("mutated hits: malformed_json exactly when Foundation cannot parse the bytes")
    func mutatedAgreeWithFoundation() {
        let seeds = Self.seeds
        var rng = SplitMix64(seed: 0xD1FF)
        let normalizer = Normalizer(limits: NormalizerLimits(maxDepth: 10_000))
        var malformed = 0
        for _ in 0..<3000 {
            let input = Self.mutate(seeds.randomElement(using: &rng)!, other: seeds.randomElement(using: &rng)!, rng: &rng)
            let ours = normalizer.normalize(input, kafkaTimestamp: nil).reason != .malformedJSON
            if !ours { malformed += 1 }
            #expect(ours == Self.foundationAccepts(input), "disagreement on \(String(decoding: input, as: UTF8.self).debugDescription)")
        }
        #expect(malformed > 500)
    }

    @Test("random valid JSON documents are never malformed_json, and Foundation agrees they are valid")
    func generatedValidDocuments() {
        var rng = SplitMix64(seed: 2020_12)
        var generator = ValidJSONGenerator()
        for _ in 0..<2000 {
            let document = generator.document(using: &rng)
            let verdict = Normalizer().normalize(document, kafkaTimestamp: nil)
            #expect(verdict.reason != .malformedJSON, "\(String(decoding: document, as: UTF8.self).debugDescription)")
            #expect(Self.foundationAccepts(document))
        }
    }
}

/// Builds random valid JSON texts that exercise the grammar: every escape, multi-byte UTF-8,
/// surrogate pairs, number forms, whitespace, and nesting.
struct ValidJSONGenerator {
    mutating func document(using rng: inout SplitMix64) -> [UInt8] {
        var out: [UInt8] = []
        whitespace(&out, &rng)
        if Int.random(in: 0..<4, using: &rng) == 0 {
            value(&out, depth: 1, &rng)
        } else {
            object(&out, depth: 1, &rng)
        }
        whitespace(&out, &rng)
        return out
    }

    private func whitespace(_ out: inout [UInt8], _ rng: inout SplitMix64) {
        for _ in 0..<Int.random(in: 0...2, using: &rng) {
            out.append([0x20, 0x0A, 0x0D, 0x09].randomElement(using: &rng)!)
        }
    }

    private func object(_ out: inout [UInt8], depth: Int, _ rng: inout SplitMix64) {
        out.append(UInt8(ascii: "{"))
        let keys = ["deliveryId", "broadlogId", "_dId", "_mId", "action", "timestamp", "userInfo", "message", "data", "aps", "url", "k", "é"]
        for index in 0..<Int.random(in: 0...5, using: &rng) {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            whitespace(&out, &rng)
            if Bool.random(using: &rng) {
                out.append(UInt8(ascii: "\"")); out.append(contentsOf: keys.randomElement(using: &rng)!.utf8); out.append(UInt8(ascii: "\""))
            } else {
                string(&out, &rng)
            }
            whitespace(&out, &rng)
            out.append(UInt8(ascii: ":"))
            whitespace(&out, &rng)
            value(&out, depth: depth + 1, &rng)
            whitespace(&out, &rng)
        }
        out.append(UInt8(ascii: "}"))
    }

    private func value(_ out: inout [UInt8], depth: Int, _ rng: inout SplitMix64) {
        let choice = depth >= 8 ? Int.random(in: 2..<7, using: &rng) : Int.random(in: 0..<7, using: &rng)
        switch choice {
        case 0: object(&out, depth: depth, &rng)
        case 1:
            out.append(UInt8(ascii: "["))
            for index in 0..<Int.random(in: 0...4, using: &rng) {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                whitespace(&out, &rng)
                value(&out, depth: depth + 1, &rng)
                whitespace(&out, &rng)
            }
            out.append(UInt8(ascii: "]"))
        case 2, 3: string(&out, &rng)
        case 4: number(&out, &rng)
        case 5: out.append(contentsOf: ["true", "false"].randomElement(using: &rng)!.utf8)
        default: out.append(contentsOf: "null".utf8)
        }
    }

    private func string(_ out: inout [UInt8], _ rng: inout SplitMix64) {
        out.append(UInt8(ascii: "\""))
        for _ in 0..<Int.random(in: 0...12, using: &rng) {
            switch Int.random(in: 0..<10, using: &rng) {
            case 0: out.append(contentsOf: [#"\""#, #"\\"#, #"\/"#, #"\b"#, #"\f"#, #"\n"#, #"\r"#, #"\t"#].randomElement(using: &rng)!.utf8)
            case 1:
                let unit = [UInt16.random(in: 0...0xD7FF, using: &rng), UInt16.random(in: 0xE000...0xFFFF, using: &rng)].randomElement(using: &rng)!
                out.append(contentsOf: "\\u\(hex4(unit))".utf8)
            case 2:
                let high = UInt16.random(in: 0xD800...0xDBFF, using: &rng), low = UInt16.random(in: 0xDC00...0xDFFF, using: &rng)
                out.append(contentsOf: "\\u\(hex4(high))\\u\(hex4(low))".utf8)
            case 3:
                let scalar = [Unicode.Scalar(UInt32.random(in: 0x80...0xD7FF, using: &rng))!,
                              Unicode.Scalar(UInt32.random(in: 0xE000...0x10FFFF, using: &rng)) ?? "é"].randomElement(using: &rng)!
                out.append(contentsOf: String(Character(scalar)).utf8)
            default:
                out.append(UInt8.random(in: 0x20...0x7E, using: &rng) |> { $0 == 0x22 || $0 == 0x5C ? UInt8(ascii: "x") : $0 })
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    private func number(_ out: inout [UInt8], _ rng: inout SplitMix64) {
        var text = Bool.random(using: &rng) ? "-" : ""
        text += Int.random(in: 0..<4, using: &rng) == 0 ? "0" : String(UInt32.random(in: 1...UInt32.max, using: &rng))
        if Bool.random(using: &rng) { text += "." + String(UInt16.random(in: 0...9999, using: &rng)) }
        if Int.random(in: 0..<3, using: &rng) == 0 {
            text += ["e", "E"].randomElement(using: &rng)! + ["", "+", "-"].randomElement(using: &rng)! + String(Int.random(in: 0...30, using: &rng))
        }
        out.append(contentsOf: text.utf8)
    }

    private func hex4(_ unit: UInt16) -> String {
        let digits = String(unit, radix: 16)
        return String(repeating: "0", count: 4 - digits.count) + digits
    }
}

infix operator |>: AdditionPrecedence
private func |> <T, U>(value: T, transform: (T) -> U) -> U { transform(value) }
