/// The ids carried by a tracking postback URL (`/r/?id=<broadlogId>,<deliveryId>,<action>&...`),
/// as a tracking server logs it (shape G).
struct PostbackURL: Sendable {
    var broadlogId: [UInt8]
    var deliveryId: [UInt8]
    var action: [UInt8]

    /// Why a URL could not be read, phrased for the `malformed_tracking_url` detail.
    enum Failure: Error, Sendable {
        case noQuery
        case noIdParameter
        case badPercentEncoding
        case notUTF8
        case wrongPartCount(Int)
        case emptyPart(Int)
    }

    /// Reads the query's `id` parameter: percent-decoded (and `+` as space, as form-encoded query
    /// strings write it), split on commas, exactly three non-empty parts. When `id` appears more
    /// than once the last one wins, like duplicate JSON keys. The path is not checked: tracking
    /// servers are mounted under different prefixes.
    static func parse(_ url: UnsafeRawBufferPointer) -> Result<PostbackURL, Failure> {
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
                idValue = (paramStart + 3)..<paramEnd
            }
            paramStart = paramEnd + 1
        }
        guard let idValue else { return .failure(.noIdParameter) }

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

        let parts = decoded.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false)
        guard parts.count == 3 else { return .failure(.wrongPartCount(parts.count)) }
        for (position, part) in parts.enumerated() where part.isEmpty {
            return .failure(.emptyPart(position))
        }
        return .success(PostbackURL(broadlogId: Array(parts[0]), deliveryId: Array(parts[1]), action: Array(parts[2])))
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
    var explanation: String {
        switch self {
        case .noQuery: "the url has no query string"
        case .noIdParameter: "the url's query has no \"id\" parameter"
        case .badPercentEncoding: "the \"id\" parameter has an invalid percent escape"
        case .notUTF8: "the \"id\" parameter does not decode to UTF-8"
        case .wrongPartCount(let n): "the \"id\" parameter has \(n) comma-separated part\(n == 1 ? "" : "s"), not 3"
        case .emptyPart(let p): "part \(p + 1) of the \"id\" parameter (\(["broadlogId", "deliveryId", "action"][p])) is empty"
        }
    }
}
