/// The ids carried by a tracking postback URL (`/r/?id=<broadlogId>,<deliveryId>,<action>&...`),
/// as a tracking server logs it (shape G).
///
/// `package` rather than internal so that the fuzz harness in `Tests/Fuzz/PostbackURL` (an
/// executable in this package, built without `-enable-testing`) can call the parser directly;
/// `Equatable` so that tests can state the exact result they expect.
package struct PostbackURL: Sendable, Equatable {
    package var broadlogId: String
    package var deliveryId: String
    /// The action part as written (a code such as "7"; read by the normalizer's action rule).
    package var action: String

    /// Why a URL could not be read, phrased for the `malformed_tracking_url` detail.
    package enum Failure: Error, Sendable, Equatable {
        case noQuery
        case noIdParameter
        case repeatedIdParameter
        case badPercentEncoding
        case notUTF8
        case wrongPartCount(Int)
        case emptyPart(Int)
    }

    /// Reads the query's `id` parameter: percent-decoded (and `+` as space, as form-encoded query
    /// strings write it), split on commas, exactly three non-empty parts. An `id` that appears
    /// more than once is a failure, even with equal values, as the contract says: web servers
    /// and frameworks disagree on which of the values a query means, like JSON parsers on a
    /// repeated name. The path is not checked: tracking servers are mounted under different
    /// prefixes.
    package static func parse(_ url: UnsafeRawBufferPointer) -> Result<PostbackURL, Failure> {
        var index = 0
        let count = url.count
        while index < count, url[index] != UInt8(ascii: "?") {
            if url[index] == UInt8(ascii: "#") { return .failure(.noQuery) }
            index += 1
        }
        guard index < count else { return .failure(.noQuery) }
        index += 1
        var queryEnd = index
        while queryEnd < count, url[queryEnd] != UInt8(ascii: "#") { queryEnd += 1 }

        var idValue: Range<Int>? = nil
        var paramStart = index
        while paramStart <= queryEnd {
            var paramEnd = paramStart
            while paramEnd < queryEnd, url[paramEnd] != UInt8(ascii: "&") { paramEnd += 1 }
            if paramEnd - paramStart >= 3, url[paramStart] == UInt8(ascii: "i"),
               url[paramStart + 1] == UInt8(ascii: "d"), url[paramStart + 2] == UInt8(ascii: "=") {
                if idValue != nil { return .failure(.repeatedIdParameter) }
                idValue = (paramStart + 3)..<paramEnd
            }
            paramStart = paramEnd + 1
        }
        guard let idValue else { return .failure(.noIdParameter) }

        // Common case: nothing to decode, so the parts are read in place without allocating.
        let rawValue = UnsafeRawBufferPointer(rebasing: url[idValue])
        if !rawValue.contains(where: { $0 == UInt8(ascii: "%") || $0 == UInt8(ascii: "+") }) {
            return split(rawValue)  // the url came from a validated JSON string: already UTF-8
        }
        var decoded: [UInt8] = []
        decoded.reserveCapacity(idValue.count)
        var i = idValue.lowerBound
        while i < idValue.upperBound {
            let b = url[i]
            if b == UInt8(ascii: "%") {
                guard i + 2 < idValue.upperBound, let hi = hexValue(url[i + 1]), let lo = hexValue(url[i + 2]) else {
                    return .failure(.badPercentEncoding)
                }
                decoded.append(hi << 4 | lo)
                i += 3
            } else {
                decoded.append(b == UInt8(ascii: "+") ? 0x20 : b)
                i += 1
            }
        }
        guard isValidUTF8(decoded) else { return .failure(.notUTF8) }
        return decoded.withUnsafeBytes { split($0) }
    }

    /// Splits the decoded `id` value on commas into exactly three non-empty parts.
    private static func split(_ value: UnsafeRawBufferPointer) -> Result<PostbackURL, Failure> {
        var commas = 0
        var first = 0, second = 0
        for index in 0..<value.count where value[index] == UInt8(ascii: ",") {
            commas += 1
            if commas == 1 { first = index } else if commas == 2 { second = index }
        }
        guard commas == 2 else { return .failure(.wrongPartCount(commas + 1)) }
        if first == 0 { return .failure(.emptyPart(0)) }
        if second == first + 1 { return .failure(.emptyPart(1)) }
        if second + 1 == value.count { return .failure(.emptyPart(2)) }
        func text(_ range: Range<Int>) -> String { String(decoding: UnsafeRawBufferPointer(rebasing: value[range]), as: UTF8.self) }
        return .success(PostbackURL(broadlogId: text(0..<first), deliveryId: text((first + 1)..<second), action: text((second + 1)..<value.count)))
    }

    private static func hexValue(_ b: UInt8) -> UInt8? {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): b - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): b - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): b - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    private static func isValidUTF8(_ bytes: [UInt8]) -> Bool {
        var iterator = bytes.makeIterator()
        var decoder = UTF8()
        while true {
            switch decoder.decode(&iterator) {
            case .scalarValue: continue
            case .emptyInput: return true
            case .error: return false
            }
        }
    }
}

extension PostbackURL.Failure {
    package var explanation: String {
        switch self {
        case .noQuery: "the url has no query string"
        case .noIdParameter: "the url's query has no \"id\" parameter"
        case .repeatedIdParameter: "the url's query has more than one \"id\" parameter, so which one counts depends on who reads it"
        case .badPercentEncoding: "the \"id\" parameter has an invalid percent escape"
        case .notUTF8: "the \"id\" parameter does not decode to UTF-8"
        case .wrongPartCount(let n): "the \"id\" parameter has \(n) comma-separated part\(n == 1 ? "" : "s"), not 3"
        case .emptyPart(let p): "part \(p + 1) of the \"id\" parameter (\(["broadlogId", "deliveryId", "action"][p])) is empty"
        }
    }
}
