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
        /// A parameter that some readers take for `id` and others do not.
        case ambiguousIdParameter
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
    ///
    /// Which parameters are `id` is decided as the readers of the tracking server's side decide
    /// it (WHATWG `URLSearchParams`, Python's `parse_qsl`, PHP's `$_GET`): each name is
    /// percent-decoded before it is compared (`%69d` is `id`; an escape that is not `%` and two
    /// hex digits stays as written, so `%6`, `%zz` and `%u0069` never spell `id`), names are
    /// case-sensitive (`ID` is another parameter), and a parameter without `=` is that name with
    /// an empty value (a bare `id` is an `id`). A name that only some of them take for `id` is
    /// `ambiguousIdParameter`, and counts as an `id` when looking for a second one: PHP drops
    /// leading spaces (`+id`), ends a name at a NUL (`id%00x`) and reads `id[…]` as an array
    /// named `id`; older readers (Python before 3.9.2, Rack before 3, Go before 1.17) also split
    /// parameters on `;`. Otherwise a query that one reader sees one `id` in and another two
    /// would count a hit the tracking server may have counted for another delivery.
    package static func parse(_ url: UnsafeRawBufferPointer) -> Result<PostbackURL, Failure> {
        withIdParts(url) { parts in
            parts.map { (parts: Parts) -> PostbackURL in
                func text(_ part: UnsafeRawBufferPointer) -> String { String(decoding: part, as: UTF8.self) }
                return PostbackURL(broadlogId: text(parts.broadlogId), deliveryId: text(parts.deliveryId), action: text(parts.action))
            }
        }
    }

    /// The `id` parameter's three parts as bytes, valid for the length of a `withIdParts` call.
    package struct Parts {
        package var broadlogId: UnsafeRawBufferPointer
        package var deliveryId: UnsafeRawBufferPointer
        package var action: UnsafeRawBufferPointer
    }

    /// `parse` without a String or the heap, for the normalizer: `body` gets the parts where
    /// they lie in `url`, or, when the value has escapes, decoded into a buffer on the stack.
    /// The parts of a `url` that is a validated JSON string's contents are valid UTF-8 (the
    /// parts of a decoded value are checked), so ids can be made from them as they are.
    package static func withIdParts<R>(_ url: UnsafeRawBufferPointer, _ body: (Result<Parts, Failure>) -> R) -> R {
        let idValue: Range<Int>
        switch idParameter(url) {
        case .failure(let failure): return body(.failure(failure))
        case .success(let range): idValue = range
        }
        let rawValue = UnsafeRawBufferPointer(rebasing: url[idValue])
        let commas = Commas(rawValue, escapes: true)
        if !commas.needsDecoding {
            return body(commas.parts(of: rawValue))
        }
        // At most one byte out per byte in: up to 1 KiB is on the stack.
        return withUnsafeTemporaryAllocation(byteCount: rawValue.count, alignment: 1) { buffer in
            switch decode(rawValue, into: buffer) {
            case .failure(let failure):
                return body(.failure(failure))
            case .success(let count):
                let decoded = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
                return body(Commas(decoded, escapes: false).parts(of: decoded))
            }
        }
    }

    /// The range of the value of the parameter named exactly `id`, after the checks that no
    /// reader sees another (see `parse`). Scans the query once, parameter by parameter, up to
    /// the fragment.
    private static func idParameter(_ url: UnsafeRawBufferPointer) -> Result<Range<Int>, Failure> {
        let count = url.count
        let index = first(of: (UInt8(ascii: "?"), UInt8(ascii: "#")), in: url, from: 0)
        guard index < count, url[index] == UInt8(ascii: "?") else { return .failure(.noQuery) }

        // The value of the parameter named exactly `id`; how many parameters any reader takes
        // for `id`; whether one of them only some readers do.
        var idValue: Range<Int>? = nil
        var idParameters = 0
        var ambiguous = false
        func note(_ reading: NameReading) {
            guard reading != .other else { return }
            idParameters += 1
            if reading == .forSomeReaders { ambiguous = true }
        }
        /// A name as a reader that splits on `;` sees it: what the others read differently.
        func noteSplitOnSemicolon(_ reading: NameReading) { note(reading == .id ? .forSomeReaders : reading) }
        var paramStart = index + 1
        var queryEnded = false
        while !queryEnded {
            var paramEnd = paramStart
            var equals = -1, semicolon = -1
            while true {
                paramEnd = first(of: parameterBreaks, in: url, from: paramEnd)
                guard paramEnd < count else { queryEnded = true; break }
                let b = url[paramEnd]
                if b == UInt8(ascii: "&") { break }
                if b == UInt8(ascii: "#") { queryEnded = true; break }
                if b == UInt8(ascii: "="), equals < 0 { equals = paramEnd }
                if b == UInt8(ascii: ";"), semicolon < 0 { semicolon = paramEnd }
                paramEnd += 1
            }
            let nameEnd = equals < 0 ? paramEnd : equals
            let reading = nameReading(url, paramStart..<nameEnd)
            note(reading)
            if reading == .id { idValue = (equals < 0 ? paramEnd : equals + 1)..<paramEnd }
            if semicolon >= 0 {
                // The parameter as a reader that splits on `;` too sees it. Its first piece has
                // the name above unless a `;` comes before the first `=`.
                if equals < 0 || semicolon < equals { noteSplitOnSemicolon(nameReading(url, paramStart..<semicolon)) }
                var pieceStart = semicolon + 1
                while pieceStart <= paramEnd {
                    var pieceEnd = pieceStart
                    var pieceEquals = -1
                    while pieceEnd < paramEnd, url[pieceEnd] != UInt8(ascii: ";") {
                        if url[pieceEnd] == UInt8(ascii: "="), pieceEquals < 0 { pieceEquals = pieceEnd }
                        pieceEnd += 1
                    }
                    noteSplitOnSemicolon(nameReading(url, pieceStart..<(pieceEquals < 0 ? pieceEnd : pieceEquals)))
                    pieceStart = pieceEnd + 1
                }
            }
            paramStart = paramEnd + 1
        }
        if idParameters > 1 { return .failure(.repeatedIdParameter) }
        if ambiguous { return .failure(.ambiguousIdParameter) }
        guard let idValue else { return .failure(.noIdParameter) }
        return .success(idValue)
    }

    /// The bytes that end a parameter's name, value or piece.
    private static var parameterBreaks: (UInt8, UInt8, UInt8, UInt8) {
        (UInt8(ascii: "&"), UInt8(ascii: "#"), UInt8(ascii: "="), UInt8(ascii: ";"))
    }

    /// The index of the first of `targets` in `url` from `start` on, or `url.count`: eight
    /// bytes a step, as the lowest lane where `word ^ target` is zero. A byte at a time cost
    /// 7 to 14 instructions a byte, and a postback url is mostly long plain runs (the host
    /// and path, a 38-digit `mcId`).
    private static func first(of targets: (UInt8, UInt8, UInt8, UInt8), in url: UnsafeRawBufferPointer, from start: Int) -> Int {
        let ones: UInt64 = 0x0101_0101_0101_0101
        // High bit of each zero lane; lanes above a zero one may be wrong, the lowest never is.
        @inline(__always) func zeroLanes(_ x: UInt64) -> UInt64 { (x &- ones) & ~x & 0x8080_8080_8080_8080 }
        var index = start
        while url.count - index >= 8 {
            let word = UInt64(littleEndian: url.loadUnaligned(fromByteOffset: index, as: UInt64.self))
            let found = zeroLanes(word ^ ones &* UInt64(targets.0)) | zeroLanes(word ^ ones &* UInt64(targets.1))
                | zeroLanes(word ^ ones &* UInt64(targets.2)) | zeroLanes(word ^ ones &* UInt64(targets.3))
            if found != 0 { return index + found.trailingZeroBitCount / 8 }
            index += 8
        }
        while index < url.count {
            let b = url[index]
            if b == targets.0 || b == targets.1 || b == targets.2 || b == targets.3 { return index }
            index += 1
        }
        return index
    }

    private static func first(of targets: (UInt8, UInt8), in url: UnsafeRawBufferPointer, from start: Int) -> Int {
        first(of: (targets.0, targets.1, targets.1, targets.1), in: url, from: start)
    }

    /// Percent-decodes `value` (and `+` as space) into `buffer`, at least as long: the count
    /// written, once checked to be UTF-8.
    private static func decode(_ value: UnsafeRawBufferPointer, into buffer: UnsafeMutableRawBufferPointer) -> Result<Int, Failure> {
        var i = 0, count = 0
        while i < value.count {
            let b = value[i]
            if b == UInt8(ascii: "%") {
                guard i + 2 < value.count, let hi = hexValue(value[i + 1]), let lo = hexValue(value[i + 2]) else {
                    return .failure(.badPercentEncoding)
                }
                buffer[count] = hi << 4 | lo
                i += 3
            } else {
                buffer[count] = b == UInt8(ascii: "+") ? 0x20 : b
                i += 1
            }
            count += 1
        }
        guard isValidUTF8(UnsafeRawBufferPointer(rebasing: buffer[0..<count])) else { return .failure(.notUTF8) }
        return .success(count)
    }

    /// Where the commas of an `id` value are, or, with `escapes`, that it must be decoded
    /// first (then the commas are those of the decoded value, and this stops at the escape).
    private struct Commas {
        var count = 0
        var first = 0, second = 0
        var needsDecoding = false

        init(_ value: UnsafeRawBufferPointer, escapes: Bool) {
            let comma = UInt8(ascii: ",")
            let targets = escapes ? (comma, UInt8(ascii: "%"), UInt8(ascii: "+"), comma) : (comma, comma, comma, comma)
            var index = PostbackURL.first(of: targets, in: value, from: 0)
            while index < value.count {
                guard value[index] == comma else {
                    needsDecoding = true
                    return
                }
                count += 1
                if count == 1 { first = index } else if count == 2 { second = index }
                index = PostbackURL.first(of: targets, in: value, from: index + 1)
            }
        }

        /// The (decoded) value split on its commas into exactly three non-empty parts.
        func parts(of value: UnsafeRawBufferPointer) -> Result<Parts, Failure> {
            guard count == 2 else { return .failure(.wrongPartCount(count + 1)) }
            if first == 0 { return .failure(.emptyPart(0)) }
            if second == first + 1 { return .failure(.emptyPart(1)) }
            if second + 1 == value.count { return .failure(.emptyPart(2)) }
            func part(_ range: Range<Int>) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: value[range]) }
            return .success(Parts(broadlogId: part(0..<first), deliveryId: part((first + 1)..<second), action: part((second + 1)..<value.count)))
        }
    }

    /// Whether readers take a parameter's name for `id`.
    private enum NameReading {
        /// Every reader: the name decodes to exactly `id`.
        case id
        /// Some readers only (see `parse`).
        case forSomeReaders
        case other
    }

    /// How the readers take the name at `range` of `url`, decoded as they decode it, byte by
    /// byte without allocating: most names differ from `id` at their first byte.
    private static func nameReading(_ url: UnsafeRawBufferPointer, _ range: Range<Int>) -> NameReading {
        // Only these can start a name that decodes to `id`, after any spaces.
        guard let first = range.first.map({ url[$0] }),
              first == UInt8(ascii: "i") || first == UInt8(ascii: "%") || first == UInt8(ascii: "+") || first == 0x20
        else { return .other }
        var name = DecodedName(url: url, index: range.lowerBound, end: range.upperBound)
        var next = name.next()
        var leadingSpaces = false
        while next == 0x20 {
            leadingSpaces = true
            next = name.next()
        }
        guard next == UInt8(ascii: "i"), name.next() == UInt8(ascii: "d") else { return .other }
        switch name.next() {
        case nil: return leadingSpaces ? .forSomeReaders : .id
        case 0: return .forSomeReaders
        case UInt8(ascii: "["):
            while let b = name.next(), b != 0 {
                if b == UInt8(ascii: "]") { return .forSomeReaders }
            }
            return .other  // PHP reads an unclosed `id[` as `id_`
        default: return .other
        }
    }

    /// A parameter name's bytes as the readers decode them: `+` is a space, `%` and two hex
    /// digits the byte they spell, any other `%` itself.
    private struct DecodedName: IteratorProtocol {
        let url: UnsafeRawBufferPointer
        var index: Int
        let end: Int

        mutating func next() -> UInt8? {
            guard index < end else { return nil }
            let b = url[index]
            index += 1
            if b == UInt8(ascii: "+") { return 0x20 }
            if b == UInt8(ascii: "%"), index + 1 < end, let hi = PostbackURL.hexValue(url[index]), let lo = PostbackURL.hexValue(url[index + 1]) {
                index += 2
                return hi << 4 | lo
            }
            return b
        }
    }

    private static func hexValue(_ b: UInt8) -> UInt8? {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): b - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): b - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): b - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    private static func isValidUTF8(_ bytes: UnsafeRawBufferPointer) -> Bool {
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
        case .repeatedIdParameter:
            "the url's query has more than one \"id\" parameter (names compared percent-decoded, as servers read them), so which one counts depends on who reads it"
        case .ambiguousIdParameter:
            "the url's query has a parameter that some readers take for \"id\" and others do not (a name with leading spaces, \"id\" followed by a NUL or by [...], or \"id\" after a \";\"), so whether it has an id depends on who reads it"
        case .badPercentEncoding: "the \"id\" parameter has an invalid percent escape"
        case .notUTF8: "the \"id\" parameter does not decode to UTF-8"
        case .wrongPartCount(let n): "the \"id\" parameter has \(n) comma-separated part\(n == 1 ? "" : "s"), not 3"
        case .emptyPart(let p): "part \(p + 1) of the \"id\" parameter (\(["broadlogId", "deliveryId", "action"][p])) is empty"
        }
    }
}
