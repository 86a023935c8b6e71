import FuzzSupport
import TrackingDomain

/// libFuzzer harness for `PostbackURL.parse`, which reads the `id` parameter of a tracking
/// server's logged URL (shape G) straight from untrusted input. For every input:
///
/// 1. `parse` never traps, whatever the bytes (even bytes that are not UTF-8, which the
///    normalizer never passes: it hands over the decoded contents of a validated JSON string).
/// 2. For UTF-8 input, `parse` gives exactly the result of `referenceParse` below: a plain
///    transcription of the documented rules (docs/normalization.md, "Postback URL (G)") with
///    arrays and `split`, sharing no code with the real parser, which reads in place and skips
///    decoding when it can. Failures must match case and payload too (they become details).
/// 3. A parsed URL's parts are non-empty and contain no comma; written back into a URL with
///    every byte percent-encoded (forcing the decoding path) they parse to the same parts, and
///    so do they unencoded when they hold nothing that would need encoding (the in-place path).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPostbackURL(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    checkPostbackURL(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

/// A parse result in a form the harness can build and compare (the parser's own type has no
/// public initializer).
enum Outcome: Equatable {
    case parts([String])
    case failure(PostbackURL.Failure)

    init(_ result: Result<PostbackURL, PostbackURL.Failure>) {
        switch result {
        case .success(let url): self = .parts([url.broadlogId, url.deliveryId, url.action])
        case .failure(let failure): self = .failure(failure)
        }
    }
}

func parse(_ bytes: [UInt8]) -> Outcome {
    bytes.withUnsafeBytes { Outcome(PostbackURL.parse($0)) }
}

func checkPostbackURL(_ input: UnsafeRawBufferPointer) {
    let result = Outcome(PostbackURL.parse(input))
    let bytes = Array(input)
    guard isUTF8(bytes) else { return }

    let expected = referenceParse(bytes)
    fuzzRequire(result == expected, "\(describeInput(input)): parse gives \(result), the reference \(expected)")

    guard case .parts(let parts) = result else { return }
    for part in parts {
        fuzzRequire(!part.isEmpty && !part.utf8.contains(comma), "\(describeInput(input)): bad part \(part.debugDescription)")
    }

    let encoded = parts.map(percentEncodeAll).joined(separator: "%2C")
    let rewritten = Array("https://t.example.com/r/?mcId=1&id=\(encoded)#top".utf8)
    let reparsed = parse(rewritten)
    fuzzRequire(reparsed == result, "\(describeInput(input)): re-encoded as \(String(decoding: rewritten, as: UTF8.self)) gives \(reparsed)")

    let special: Set<UInt8> = [UInt8(ascii: "%"), UInt8(ascii: "+"), UInt8(ascii: "&"), UInt8(ascii: "#")]
    if !parts.contains(where: { $0.utf8.contains(where: special.contains) }) {
        let plain = Array("/r/?id=\(parts.joined(separator: ","))".utf8)
        let plainParsed = parse(plain)
        fuzzRequire(plainParsed == result, "\(describeInput(input)): written plainly gives \(plainParsed)")
    }
}

private let comma = UInt8(ascii: ",")

/// The documented rules, step by step: the query is what follows the first `?` (a `#` before
/// it means there is none) up to the next `#`; parameters are separated by `&`; exactly one
/// of them may start with `id=`; its value is percent-decoded with `+` as a space and must be UTF-8;
/// it splits on `,` into exactly three non-empty parts (broadlogId, deliveryId, action).
func referenceParse(_ url: [UInt8]) -> Outcome {
    guard let questionMark = url.firstIndex(of: UInt8(ascii: "?")),
          !url[..<questionMark].contains(UInt8(ascii: "#"))
    else { return .failure(.noQuery) }
    var query = url[(questionMark + 1)...]
    if let hash = query.firstIndex(of: UInt8(ascii: "#")) { query = query[..<hash] }
    let parameters = query.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: false)
    let ids = parameters.filter { $0.starts(with: "id=".utf8) }
    guard ids.count < 2 else { return .failure(.repeatedIdParameter) }
    guard let id = ids.first else { return .failure(.noIdParameter) }

    let value = Array(id.dropFirst(3))
    var decoded: [UInt8] = []
    var index = 0
    while index < value.count {
        switch value[index] {
        case UInt8(ascii: "%"):
            guard index + 2 < value.count,
                  let high = hexDigit(value[index + 1]), let low = hexDigit(value[index + 2])
            else { return .failure(.badPercentEncoding) }
            decoded.append(high * 16 + low)
            index += 3
        case UInt8(ascii: "+"):
            decoded.append(UInt8(ascii: " "))
            index += 1
        default:
            decoded.append(value[index])
            index += 1
        }
    }
    guard isUTF8(decoded) else { return .failure(.notUTF8) }

    let parts = decoded.split(separator: comma, omittingEmptySubsequences: false)
    guard parts.count == 3 else { return .failure(.wrongPartCount(parts.count)) }
    if let empty = parts.firstIndex(where: \.isEmpty) { return .failure(.emptyPart(empty)) }
    return .parts(parts.map { String(decoding: $0, as: UTF8.self) })
}

private func hexDigit(_ byte: UInt8) -> UInt8? {
    let digits = Array("0123456789abcdef".utf8)
    let lower = byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "F") ? byte + 0x20 : byte
    return digits.firstIndex(of: lower).map(UInt8.init)
}

private func percentEncodeAll(_ text: String) -> String {
    let hex = Array("0123456789ABCDEF".utf8)
    var out: [UInt8] = []
    for byte in text.utf8 {
        out.append(contentsOf: [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]])
    }
    return String(decoding: out, as: UTF8.self)
}

private func isUTF8(_ bytes: [UInt8]) -> Bool {
    String(validating: bytes, as: UTF8.self) != nil
}

@main
enum FuzzPostbackURLMain {
    static func main() {
        fuzzMain(testOneInput: fuzzPostbackURL, check: checkPostbackURL)
    }
}
