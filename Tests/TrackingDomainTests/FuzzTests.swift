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
                #expect(object["detail"] as? String == reason.written(detail: detail) && !detail.hasPrefix(reason.rawValue))
            }
        }
        // The mutations must actually reach the interesting verdicts, or the test proves little.
        for expected in ["ok", "malformed_json", "not_an_object", "too_deep", "duplicate_field", "missing_delivery_id", "unknown_action"] {
            #expect(reasons[expected, default: 0] > 0, "no mutated input was \(expected): \(reasons)")
        }
    }

    /// The differential holds for hits that repeat a name too: Foundation reads them (keeping
    /// one of the values) and so does the scanner, which then rejects the hit as
    /// `duplicate_field`, not as `malformed_json` (`repeatedContractNames` checks that).
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

    /// The names the contract reads in each object it reads (docs/normalization.md, "Repeated
    /// names"); `data` counts only in `message`.
    static let contractNames = [
        "_dId", "deliveryId", "_mId", "broadlogId", "action", "actionName", "timestamp", "channel", "platform", "url",
        "_acsDeliveryTracking", "aps", "contextData", "userInfo", "message", "NOTIFICATION_USER_INFO",
    ]

    /// Values a repeat may carry: each is a different JSON text, some of them different texts
    /// of one value (`"7"`, `7`, `"\u0037"`, `7.0`).
    static let repeatValues = [
        #""7""#, "7", #""\u0037""#, "7.0", #""1""#, #""2""#, #""on""#, #""off""#, #""ON""#, "null", "true", #""""#,
        #""d57fd6""#, #""h1685a5""#, "1795300000000", #""2026-11-22T10:00:00Z""#, #""push""#, #""ios""#,
        #""android""#, #""tracking""#, #""https://t.example.com/r/?id=h1,d1,7""#, "{}", #"{"_dId":"d","_mId":"b"}"#, "[]",
    ]

    @Test("a name the contract reads, given twice: duplicate_field unless both are the same JSON text, and then the verdict of one")
    func repeatedContractNames() throws {
        let seeds = GoldenCase.all
            .filter { $0.expectedLine?.contains("\"status\":\"rejected\"") == false }
            .compactMap { OrderedJSON.read($0.input) }
            .filter { !$0.repeatsAName }
        try #require(seeds.count > 40)
        // Every object the contract reads in every seed, by place, so that each place gets its share.
        var objects: [String: [(hit: OrderedJSON, path: [Int])]] = [:]
        for hit in seeds {
            for (path, place) in hit.contractObjects { objects[place, default: []].append((hit, path)) }
        }
        let places = ["top", "contextData", "userInfo", "message", "message.data", "NOTIFICATION_USER_INFO"]
        #expect(Set(objects.keys) == Set(places))
        var rng = SplitMix64(seed: 0xD0_B1E5)
        for _ in 0..<3000 {
            let place = places.randomElement(using: &rng)!
            guard let (hit, path) = objects[place]?.randomElement(using: &rng) else { continue }
            let name = (Self.contractNames + (place == "message" ? ["data"] : [])).randomElement(using: &rng)!
            let members = hit.members(at: path)
            // The hit with the name once: as it is, or with the name added.
            var once = hit
            let value: String
            if let existing = members.first(where: { $0.name == name }) {
                value = existing.value.text
            } else {
                value = Self.repeatValues.randomElement(using: &rng)!
                once = hit.inserting(name: name, value: value, at: Int.random(in: 0...members.count, using: &rng), in: path)
            }
            let position = Int.random(in: 0...(members.count + 1), using: &rng)
            let twiceSame = once.inserting(name: name, value: value, at: position, in: path)
            let other = Self.repeatValues.filter { $0 != value }.randomElement(using: &rng)!
            let twiceDifferent = once.inserting(name: name, value: other, at: position, in: path)

            let onceVerdict = Normalizer().normalize(Array(once.text.utf8), kafkaTimestamp: 1_795_300_000_000)
            let sameVerdict = Normalizer().normalize(Array(twiceSame.text.utf8), kafkaTimestamp: 1_795_300_000_000)
            #expect(sameVerdict == onceVerdict, "\(twiceSame.text) against \(once.text)")
            let differentVerdict = Normalizer().normalize(Array(twiceDifferent.text.utf8), kafkaTimestamp: 1_795_300_000_000)
            #expect(differentVerdict.reason == .duplicateField, "\(twiceDifferent.text): \(differentVerdict)")
            // Foundation reads the ambiguous hit as valid JSON, taking one of the two values.
            #expect(Self.foundationAccepts(Array(twiceDifferent.text.utf8)))
        }
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

/// A valid JSON text read as a tree that keeps every object's members in order (repeats
/// included) and every other value's text as written, so that a test can add a member to one
/// object and write the hit back.
indirect enum OrderedJSON {
    case object([Member])
    case other(String)

    struct Member {
        /// The name decoded, and as written (with its quotes and escapes).
        var name: String
        var nameText: String
        var value: OrderedJSON
    }

    static func read(_ bytes: [UInt8]) -> OrderedJSON? {
        var reader = Reader(bytes: bytes)
        return reader.value()
    }

    /// The JSON text, without whitespace between an object's members.
    var text: String {
        switch self {
        case .object(let members): "{" + members.map { $0.nameText + ":" + $0.value.text }.joined(separator: ",") + "}"
        case .other(let text): text
        }
    }

    /// The objects the contract reads, as paths of member indices, with how details name them.
    var contractObjects: [(path: [Int], place: String)] {
        guard case .object(let members) = self else { return [] }
        var objects: [(path: [Int], place: String)] = [([], "top")]
        for (index, member) in members.enumerated() {
            guard case .object(let inner) = member.value else { continue }
            switch member.name {
            case "contextData", "userInfo", "NOTIFICATION_USER_INFO":
                objects.append(([index], member.name))
            case "message":
                objects.append(([index], "message"))
                for (dataIndex, data) in inner.enumerated() where data.name == "data" {
                    if case .object = data.value { objects.append(([index, dataIndex], "message.data")) }
                }
            default:
                break
            }
        }
        return objects
    }

    /// Whether any object in the tree gives a name twice.
    var repeatsAName: Bool {
        guard case .object(let members) = self else { return false }
        return Set(members.map(\.name)).count < members.count || members.contains { $0.value.repeatsAName }
    }

    func members(at path: [Int]) -> [Member] {
        guard case .object(let members) = self else { return [] }
        guard let first = path.first else { return members }
        return members[first].value.members(at: Array(path.dropFirst()))
    }

    func inserting(name: String, value: String, at position: Int, in path: [Int]) -> OrderedJSON {
        guard case .object(var members) = self else { return self }
        if let first = path.first {
            members[first].value = members[first].value.inserting(name: name, value: value, at: position, in: Array(path.dropFirst()))
        } else {
            members.insert(Member(name: name, nameText: "\"\(name)\"", value: .other(value)), at: min(position, members.count))
        }
        return .object(members)
    }

    /// Reads valid JSON only (the golden inputs that are not rejected).
    private struct Reader {
        let bytes: [UInt8]
        var index = 0

        mutating func value() -> OrderedJSON? {
            skipWhitespace()
            guard index < bytes.count else { return nil }
            if bytes[index] == UInt8(ascii: "{") { return object() }
            let start = index
            skipScalarOrArray()
            return .other(String(decoding: bytes[start..<index], as: UTF8.self))
        }

        private mutating func object() -> OrderedJSON? {
            index += 1
            var members: [Member] = []
            skipWhitespace()
            if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            }
            while true {
                skipWhitespace()
                let start = index
                skipString()
                let nameText = String(decoding: bytes[start..<index], as: UTF8.self)
                guard let name = (try? JSONSerialization.jsonObject(with: Data(nameText.utf8), options: .fragmentsAllowed)) as? String else { return nil }
                skipWhitespace()
                index += 1  // :
                guard let value = value() else { return nil }
                members.append(Member(name: name, nameText: nameText, value: value))
                skipWhitespace()
                let separator = bytes[index]
                index += 1
                if separator == UInt8(ascii: "}") { return .object(members) }
            }
        }

        private mutating func skipWhitespace() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        private mutating func skipString() {
            index += 1
            while bytes[index] != UInt8(ascii: "\"") {
                index += bytes[index] == UInt8(ascii: "\\") ? 2 : 1
            }
            index += 1
        }

        /// A string, number, literal or array (arrays hold no object the contract reads).
        private mutating func skipScalarOrArray() {
            var depth = 0
            while index < bytes.count {
                switch bytes[index] {
                case UInt8(ascii: "\""):
                    skipString()
                    if depth == 0 { return }
                    continue
                case UInt8(ascii: "["), UInt8(ascii: "{"):
                    depth += 1
                case UInt8(ascii: "]"), UInt8(ascii: "}"):
                    if depth == 0 { return }
                    depth -= 1
                    if depth == 0 {
                        index += 1
                        return
                    }
                case UInt8(ascii: ","), 0x20, 0x09, 0x0A, 0x0D:
                    if depth == 0 { return }
                default:
                    break
                }
                index += 1
            }
        }
    }
}

infix operator |>: AdditionPrecedence
private func |> <T, U>(value: T, transform: (T) -> U) -> U { transform(value) }
