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
/// it means there is none) up to the next `#`; parameters are separated by `&`; a parameter's
/// name is what precedes its first `=` (all of it without one), decoded as the readers decode it
/// (`%` and two hex digits a byte, `+` a space, any other `%` itself). A name that decodes to
/// `id` makes an `id` parameter; so, for some readers only, does one that is `id` after
/// leading spaces, `id` followed by a NUL, or `id[` with a `]` later (before any NUL); and so,
/// for readers that split on `;` too, does a name of a `;`-separated piece that reads as `id`
/// in either way. More than one `id` parameter is repeated; one that only some readers see is
/// ambiguous. The value of the one `id` is percent-decoded with `+` as a space and must be
/// UTF-8; it splits on `,` into exactly three non-empty parts (broadlogId, deliveryId, action).
func referenceParse(_ url: [UInt8]) -> Outcome {
    guard let questionMark = url.firstIndex(of: UInt8(ascii: "?")),
          !url[..<questionMark].contains(UInt8(ascii: "#"))
    else { return .failure(.noQuery) }
    var query = url[(questionMark + 1)...]
    if let hash = query.firstIndex(of: UInt8(ascii: "#")) { query = query[..<hash] }
    let parameters = query.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: false)

    var exact: [ArraySlice<UInt8>] = []  // the values of parameters every reader takes for `id`
    var someReaders = 0  // parameters only some readers take for `id`
    for parameter in parameters {
        let name = parameter.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)[0]
        let reading = referenceReading(lenientlyDecoded(name))
        if reading == "id" {
            let value = parameter.count > name.count ? parameter.dropFirst(name.count + 1) : []
            exact.append(value)
        } else if reading == "some" {
            someReaders += 1
        }
        // A reader that splits on `;` sees these pieces; the first one is the parameter itself
        // unless a `;` comes before the first `=`.
        let pieces = parameter.split(separator: UInt8(ascii: ";"), omittingEmptySubsequences: false)
        guard pieces.count > 1 else { continue }
        let firstSeparator = parameter.firstIndex { $0 == UInt8(ascii: "=") || $0 == UInt8(ascii: ";") }.map { parameter[$0] }
        for (number, piece) in pieces.enumerated() {
            if number == 0 && firstSeparator == UInt8(ascii: "=") { continue }
            let pieceName = piece.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)[0]
            if referenceReading(lenientlyDecoded(pieceName)) != "other" { someReaders += 1 }
        }
    }
    guard exact.count + someReaders < 2 else { return .failure(.repeatedIdParameter) }
    guard someReaders == 0 else { return .failure(.ambiguousIdParameter) }
    guard let id = exact.first else { return .failure(.noIdParameter) }

    let value = Array(id)
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

/// A name decoded leniently, as URLSearchParams, parse_qsl and PHP decode names.
private func lenientlyDecoded(_ name: ArraySlice<UInt8>) -> [UInt8] {
    let name = Array(name)
    var decoded: [UInt8] = []
    var index = 0
    while index < name.count {
        if name[index] == UInt8(ascii: "%"), index + 2 < name.count,
           let high = hexDigit(name[index + 1]), let low = hexDigit(name[index + 2]) {
            decoded.append(high * 16 + low)
            index += 3
        } else {
            decoded.append(name[index] == UInt8(ascii: "+") ? UInt8(ascii: " ") : name[index])
            index += 1
        }
    }
    return decoded
}

/// "id" when every reader takes a decoded name for `id`, "some" when PHP does and the others
/// do not, "other" otherwise.
private func referenceReading(_ decoded: [UInt8]) -> String {
    if decoded == Array("id".utf8) { return "id" }
    // PHP: leading spaces dropped, the name read as a C string, `name[…]` an array named `name`.
    var php = ArraySlice(decoded.drop { $0 == UInt8(ascii: " ") })
    if let nul = php.firstIndex(of: 0) { php = php[..<nul] }
    if php.elementsEqual("id".utf8) { return "some" }
    if php.starts(with: "id[".utf8), php.dropFirst(3).contains(UInt8(ascii: "]")) { return "some" }
    return "other"
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
