/// Why the scanner stopped. Offsets are byte offsets into the message, for details that let
/// a sender find the fault.
enum ScanFailure: Error, Sendable {
    case malformed(offset: Int, problem: StaticString)
    case tooDeep(offset: Int)
}

/// Object keys the normalizer cares about: the contract's names (section 2 of
/// docs/tracking-hits.md). Every other key is validated and skipped.
enum HitKey: UInt8 {
    case other, pushDeliveryId, pushBroadlogId, deliveryId, broadlogId, trackingFlag, action, aps
    case actionName, contextData, url, userInfo, message, notificationUserInfo, timestamp, channel, platform, data

    @inline(__always)
    static func match(_ p: UnsafePointer<UInt8>, _ n: Int) -> HitKey {
        @inline(__always) func equals(_ literal: StaticString) -> Bool { sameBytes(UnsafeRawPointer(p), literal) }
        switch n {
        case 3:
            if equals("aps") { return .aps }
            if equals("url") { return .url }
        case 4:
            if p[0] == UInt8(ascii: "_") {
                if equals("_dId") { return .pushDeliveryId }
                if equals("_mId") { return .pushBroadlogId }
            } else if equals("data") { return .data }
        case 6:
            if equals("action") { return .action }
        case 7:
            if equals("channel") { return .channel }
            if equals("message") { return .message }
        case 8:
            if equals("platform") { return .platform }
            if equals("userInfo") { return .userInfo }
        case 9:
            if equals("timestamp") { return .timestamp }
        case 10:
            if equals("deliveryId") { return .deliveryId }
            if equals("broadlogId") { return .broadlogId }
            if equals("actionName") { return .actionName }
        case 11:
            if equals("contextData") { return .contextData }
        case 20:
            if equals("_acsDeliveryTracking") { return .trackingFlag }
        case 22:
            if equals("NOTIFICATION_USER_INFO") { return .notificationUserInfo }
        default:
            break
        }
        return .other
    }

    /// Whether the bytes at `p` are those of `literal` (`p` must hold as many), by two or three
    /// overlapping word compares rather than a byte loop. The literal's length and words fold
    /// into constants once this is inlined with a literal argument, so telling a key costs a
    /// switch on its length and a compare or two per candidate name, where the byte loop took
    /// a compare and a branch per byte of every candidate tried.
    @inline(__always)
    static func sameBytes(_ p: UnsafeRawPointer, _ literal: StaticString) -> Bool {
        let n = literal.utf8CodeUnitCount
        let l = UnsafeRawPointer(literal.utf8Start)
        @inline(__always) func same<W: FixedWidthInteger>(_ offset: Int, _: W.Type) -> Bool {
            p.loadUnaligned(fromByteOffset: offset, as: W.self) == l.loadUnaligned(fromByteOffset: offset, as: W.self)
        }
        switch n {
        case 0: return true
        case 1: return same(0, UInt8.self)
        case 2...3: return same(0, UInt16.self) && same(n - 2, UInt16.self)
        case 4...7: return same(0, UInt32.self) && same(n - 4, UInt32.self)
        default:
            // Whole words from the start, then the last eight bytes (overlapping the previous word).
            var offset = 0
            while offset + 8 < n {
                guard same(offset, UInt64.self) else { return false }
                offset += 8
            }
            return same(n - 8, UInt64.self)
        }
    }

    /// The key as the hit writes it, for details.
    var name: String { Self.names[Int(rawValue)] }

    private static let names = [
        "(another name)", "_dId", "_mId", "deliveryId", "broadlogId", "_acsDeliveryTracking", "action", "aps", "actionName",
        "contextData", "url", "userInfo", "message", "NOTIFICATION_USER_INFO", "timestamp", "channel", "platform", "data",
    ]
}

/// The contract's names met so far in one object, each with its first value, so that a repeat
/// can be compared with the first (docs/normalization.md, "Repeated names"). The values sit in
/// uninitialized stack memory that only the `met` bits make readable, so starting an object
/// clears nothing: zeroing the scanned hit for every message was a measurable share of a hit's
/// cost (docs/performance.md), and eighteen slots per object would add to it.
struct NamesMet {
    /// One slot per `HitKey`, indexed by its raw value.
    static let capacity = Int(HitKey.data.rawValue) + 1

    private let firstValues: UnsafeMutableBufferPointer<JSONSpan>
    private var met: UInt32 = 0

    init(firstValues: UnsafeMutableBufferPointer<JSONSpan>) {
        self.firstValues = firstValues
    }

    @inline(__always)
    func firstValue(of key: HitKey) -> JSONSpan? {
        met & 1 << key.rawValue != 0 ? firstValues[Int(key.rawValue)] : nil
    }

    /// Notes the first value of `key` (which must not have been met yet).
    @inline(__always)
    mutating func meet(_ key: HitKey, _ value: JSONSpan) {
        met |= 1 << key.rawValue
        firstValues.initializeElement(at: Int(key.rawValue), to: value)
    }
}

/// A single-pass JSON validator over raw bytes (RFC 8259, UTF-8 only) that captures the handful
/// of hit fields the normalizer needs as spans and skips everything else without allocating.
///
/// Strictness matches the contract: invalid UTF-8 anywhere (including escaped lone surrogates,
/// which cannot be represented in UTF-8), control characters in strings, leading zeros, a BOM,
/// or trailing bytes after the value are malformed JSON. Repeated names: in the objects the
/// contract reads, the first value of each of its names is captured; a repeat with the same
/// JSON text is read as one occurrence (a repeated container is not read into again), and the
/// first repeat with another text is recorded in `RawHit.repeated` (the hit is ambiguous, so
/// the normalizer rejects it). The scan goes on to the end either way, so that malformed JSON
/// later in the message is still reported as such.
struct JSONScanner {
    let base: UnsafePointer<UInt8>
    let count: Int
    let maxDepth: Int
    var pos = 0

    // MARK: Whole message

    /// Scans the whole message into `hit` (which must be fresh). Returns nil when the message is
    /// an object, else the kind of value it is. The hit is filled in place: it is about half a
    /// kilobyte, and copies of it per message were a measurable share of a hit's cost.
    mutating func scanMessage(into hit: inout RawHit) throws(ScanFailure) -> JSONSpan.Kind? {
        skipWhitespace()
        guard pos < count else {
            throw .malformed(offset: pos, problem: count == 0 ? "the message is empty" : "the message is only whitespace")
        }
        var notObjectKind: JSONSpan.Kind? = nil
        if base[pos] == UInt8(ascii: "{") {
            try scanTopObject(into: &hit)
        } else {
            notObjectKind = try skipValue(parentDepth: 0).kind
        }
        skipWhitespace()
        guard pos == count else { throw .malformed(offset: pos, problem: "unexpected bytes after the JSON value") }
        return notObjectKind
    }

    // MARK: Structure

    @inline(__always)
    mutating func skipWhitespace() {
        while pos < count {
            let b = base[pos]
            guard b == 0x20 || b == 0x0A || b == 0x0D || b == 0x09 else { return }
            pos &+= 1
        }
    }

    /// Skips whitespace and returns the byte at `pos`, or 0 at the end of the message (a caller
    /// that reports an error tells the two apart by `pos`). One bounds check and one look per
    /// byte where `skipWhitespace` then a check of the byte took two of each.
    @inline(__always)
    mutating func nextByte() -> UInt8 {
        while pos < count {
            let b = base[pos]
            guard b == 0x20 || b == 0x0A || b == 0x0D || b == 0x09 else { return b }
            pos &+= 1
        }
        return 0
    }

    @inline(__always)
    mutating func expect(_ byte: UInt8, _ problem: StaticString) throws(ScanFailure) {
        skipWhitespace()
        guard pos < count, base[pos] == byte else { throw .malformed(offset: pos, problem: problem) }
        pos &+= 1
    }

    /// Walks the members of the object at `pos` (which must be `{`), calling `member` with each
    /// key; `member` must consume the value. Handles commas, colons and the closing brace.
    @inline(__always)
    mutating func scanObject(
        depth: Int, _ member: (inout JSONScanner, HitKey) throws(ScanFailure) -> Void
    ) throws(ScanFailure) {
        if depth > maxDepth { throw .tooDeep(offset: pos) }
        pos &+= 1  // {
        skipWhitespace()
        if pos < count, base[pos] == UInt8(ascii: "}") {
            pos &+= 1
            return
        }
        while true {
            guard nextByte() == UInt8(ascii: "\"") else { throw .malformed(offset: pos, problem: "expected a string key") }
            let key = try scanKey()
            guard nextByte() == UInt8(ascii: ":") else { throw .malformed(offset: pos, problem: "expected ':' after an object key") }
            pos &+= 1
            skipWhitespace()
            try member(&self, key)
            let b = nextByte()
            pos &+= 1
            if b == UInt8(ascii: ",") { continue }
            if b == UInt8(ascii: "}") { return }
            pos &-= 1
            if pos == count { throw .malformed(offset: pos, problem: "unterminated object") }
            throw .malformed(offset: pos, problem: "expected ',' or '}' in an object")
        }
    }

    /// `scanObject` for one of the objects the contract reads, with the names it has met.
    @inline(__always)
    mutating func scanContractObject(
        depth: Int, _ member: (inout JSONScanner, HitKey, inout NamesMet) throws(ScanFailure) -> Void
    ) throws(ScanFailure) {
        try withUnsafeTemporaryAllocation(of: JSONSpan.self, capacity: NamesMet.capacity) { (slots) throws(ScanFailure) in
            var names = NamesMet(firstValues: slots)
            try scanObject(depth: depth) { (s: inout JSONScanner, key: HitKey) throws(ScanFailure) in
                try member(&s, key, &names)
            }
        }
    }

    /// Inlined into the loop of each object the contract reads: as a call, its prologue and
    /// epilogue were about a third of its cost per key.
    @inline(__always)
    mutating func scanKey() throws(ScanFailure) -> HitKey {
        let span = try scanString()
        if !span.escaped {
            return HitKey.match(base + span.start, span.end - span.start)
        }
        let decoded = decode(span)
        return decoded.withUnsafeBufferPointer { HitKey.match($0.baseAddress ?? base, $0.count) }
    }

    mutating func scanTopObject(into hit: inout RawHit) throws(ScanFailure) {
        try scanContractObject(depth: 1) { (s: inout JSONScanner, key: HitKey, names: inout NamesMet) throws(ScanFailure) in
            switch key {
            case .pushDeliveryId, .pushBroadlogId, .deliveryId, .broadlogId, .trackingFlag, .action, .aps,
                 .actionName, .url, .timestamp, .channel, .platform:
                hit.setTopLevel(key, try s.scanNamed(key, in: .top, names: &names, repeated: &hit.repeated, parentDepth: 1))
            case .contextData:
                hit.contextDataValue = try s.scanContainer(
                    key, as: .contextData, into: &hit.contextData, in: .top, names: &names, repeated: &hit.repeated, depth: 2)
            case .userInfo:
                _ = try s.scanContainer(key, as: .userInfo, into: &hit.userInfo, in: .top, names: &names, repeated: &hit.repeated, depth: 2)
            case .notificationUserInfo:
                _ = try s.scanContainer(
                    key, as: .notificationUserInfo, into: &hit.notificationUserInfo, in: .top, names: &names, repeated: &hit.repeated, depth: 2)
            case .message:
                hit.message = try s.scanContainer(key, as: .message, into: &hit.messageData, in: .top, names: &names, repeated: &hit.repeated, depth: 2)
            case .other, .data:
                _ = try s.scanValue(parentDepth: 1)
            }
        }
    }

    /// Skips the value of the contract name `key` in `object` and returns the name's first value:
    /// this one the first time; on a repeat the first, after comparing the two by their JSON
    /// text and recording a difference in `repeated` (unless an earlier one is there).
    @inline(__always)
    mutating func scanNamed(
        _ key: HitKey, in object: HitObject, names: inout NamesMet, repeated: inout RepeatedName, parentDepth: Int
    ) throws(ScanFailure) -> JSONSpan {
        let value = try scanValue(parentDepth: parentDepth)
        guard let first = names.firstValue(of: key) else {
            names.meet(key, value)
            return value
        }
        if !repeated.isPresent && !sameText(first, value) {
            repeated = RepeatedName(key: key, object: object, first: first, second: value)
        }
        return first
    }

    /// Scans the value of `key`, a container the contract reads (`object`), into `container`,
    /// and returns it. Only the first occurrence in the parent is read into: a repeat is skipped
    /// and compared with the first by its text (`scanNamed`), so an identical one reads as one
    /// occurrence. For `message`, `container` receives its `data`.
    mutating func scanContainer(
        _ key: HitKey, as object: HitObject, into container: inout IdContainer, in parent: HitObject,
        names: inout NamesMet, repeated: inout RepeatedName, depth: Int
    ) throws(ScanFailure) -> JSONSpan {
        if names.firstValue(of: key) != nil {
            return try scanNamed(key, in: parent, names: &names, repeated: &repeated, parentDepth: depth - 1)
        }
        let value: JSONSpan
        if pos < count, base[pos] == UInt8(ascii: "{") {
            let start = pos
            if object == .message {
                try scanMessageWrapper(into: &container, repeated: &repeated, depth: depth)
            } else {
                container.present = true
                try scanIdContainer(object, into: &container, repeated: &repeated, depth: depth)
            }
            value = JSONSpan(kind: .object, start: start, end: pos)
        } else {
            value = try skipValue(parentDepth: depth - 1)
        }
        names.meet(key, value)
        return value
    }

    /// The FCM `message` wrapper: its `data` object holds the ids; the contract's other names
    /// are only checked for repeats.
    private mutating func scanMessageWrapper(into data: inout IdContainer, repeated: inout RepeatedName, depth: Int) throws(ScanFailure) {
        try scanContractObject(depth: depth) { (s: inout JSONScanner, key: HitKey, names: inout NamesMet) throws(ScanFailure) in
            switch key {
            case .data:
                _ = try s.scanContainer(key, as: .messageData, into: &data, in: .message, names: &names, repeated: &repeated, depth: depth + 1)
            case .other:
                _ = try s.skipValue(parentDepth: depth)
            default:
                _ = try s.scanNamed(key, in: .message, names: &names, repeated: &repeated, parentDepth: depth)
            }
        }
    }

    /// An object that may hold a hit's ids (`contextData`, `userInfo`, `message.data`,
    /// `NOTIFICATION_USER_INFO`). The contract's names that it reads only at the top level are
    /// only checked for repeats: another reader of the hit could take them from here.
    private mutating func scanIdContainer(
        _ object: HitObject, into container: inout IdContainer, repeated: inout RepeatedName, depth: Int
    ) throws(ScanFailure) {
        try scanContractObject(depth: depth) { (s: inout JSONScanner, key: HitKey, names: inout NamesMet) throws(ScanFailure) in
            switch key {
            case .other, .data:
                _ = try s.scanValue(parentDepth: depth)
            default:
                // Only the id names are kept here (`set` ignores the others).
                container.set(key, try s.scanNamed(key, in: object, names: &names, repeated: &repeated, parentDepth: depth))
            }
        }
    }

    /// Whether two captured values are the same JSON text, byte for byte (a string and a
    /// number with the same digits are not: the kinds differ).
    func sameText(_ a: JSONSpan, _ b: JSONSpan) -> Bool {
        guard a.kind == b.kind, a.end - a.start == b.end - b.start else { return false }
        return rawBytes(a).elementsEqual(rawBytes(b))
    }

    /// `skipValue` with its commonest case, a string, inlined at the few places that skip the
    /// values of members (one per object the contract reads): the call and return of
    /// `skipValue` were about a third of the cost of skipping a short string.
    @inline(__always)
    mutating func scanValue(parentDepth: Int) throws(ScanFailure) -> JSONSpan {
        if pos < count, base[pos] == UInt8(ascii: "\"") { return try scanString() }
        return try skipValue(parentDepth: parentDepth)
    }

    /// Validates and skips one value at `pos`, returning where it was. Iterative, with an explicit
    /// stack of open containers, so hostile nesting can never exhaust the thread's stack
    /// (whatever `maxDepth` is configured to). Every caller has skipped the whitespace before the
    /// value already.
    mutating func skipValue(parentDepth: Int) throws(ScanFailure) -> JSONSpan {
        guard pos < count else { throw .malformed(offset: pos, problem: "expected a value") }
        let start = pos
        let first = base[pos]
        switch first {
        case UInt8(ascii: "\""):
            return try scanString()
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            try scanNumber()
            return JSONSpan(kind: .number, start: start, end: pos)
        case UInt8(ascii: "t"):
            try scanLiteral("true")
            return JSONSpan(kind: .bool, start: start, end: pos)
        case UInt8(ascii: "f"):
            try scanLiteral("false")
            return JSONSpan(kind: .bool, start: start, end: pos)
        case UInt8(ascii: "n"):
            try scanLiteral("null")
            return JSONSpan(kind: .null, start: start, end: pos)
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            try skipContainer(parentDepth: parentDepth)
            return JSONSpan(kind: first == UInt8(ascii: "{") ? .object : .array, start: start, end: pos)
        default:
            throw .malformed(offset: pos, problem: "expected a value")
        }
    }

    private mutating func skipContainer(parentDepth: Int) throws(ScanFailure) {
        var stack = ContainerStack()
        // Invariant at the top of `value`: pos is at the first byte of a value (after whitespace).
        value: while true {
            let b = base[pos]
            switch b {
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                let isObject = b == UInt8(ascii: "{")
                if parentDepth + stack.depth + 1 > maxDepth { throw .tooDeep(offset: pos) }
                stack.push(isObject: isObject)
                pos &+= 1
                skipWhitespace()
                guard pos < count else { throw .malformed(offset: pos, problem: isObject ? "unterminated object" : "unterminated array") }
                if base[pos] == (isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) {
                    pos &+= 1
                    stack.pop()
                } else {
                    if isObject { try skipKeyAndColon() }
                    guard pos < count else { throw .malformed(offset: pos, problem: "expected a value") }
                    continue value
                }
            case UInt8(ascii: "\""):
                _ = try scanString()
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                try scanNumber()
            case UInt8(ascii: "t"):
                try scanLiteral("true")
            case UInt8(ascii: "f"):
                try scanLiteral("false")
            case UInt8(ascii: "n"):
                try scanLiteral("null")
            default:
                throw .malformed(offset: pos, problem: "expected a value")
            }
            // After a complete value: close containers or move to the next element.
            while stack.depth > 0 {
                skipWhitespace()
                guard pos < count else {
                    throw .malformed(offset: pos, problem: stack.topIsObject ? "unterminated object" : "unterminated array")
                }
                let c = base[pos]
                if c == UInt8(ascii: ",") {
                    pos &+= 1
                    skipWhitespace()
                    if stack.topIsObject { try skipKeyAndColon() }
                    guard pos < count else { throw .malformed(offset: pos, problem: "expected a value") }
                    continue value
                }
                if stack.topIsObject ? c == UInt8(ascii: "}") : c == UInt8(ascii: "]") {
                    pos &+= 1
                    stack.pop()
                    continue
                }
                throw .malformed(offset: pos, problem: stack.topIsObject ? "expected ',' or '}' in an object" : "expected ',' or ']' in an array")
            }
            return
        }
    }

    @inline(__always)
    private mutating func skipKeyAndColon() throws(ScanFailure) {
        guard pos < count, base[pos] == UInt8(ascii: "\"") else {
            throw .malformed(offset: pos, problem: "expected a string key")
        }
        _ = try scanString()
        try expect(UInt8(ascii: ":"), "expected ':' after an object key")
        skipWhitespace()
    }

    // MARK: Scalars

    private mutating func scanLiteral(_ literal: StaticString) throws(ScanFailure) {
        let n = literal.utf8CodeUnitCount
        let l = literal.utf8Start
        guard count - pos >= n else { throw .malformed(offset: pos, problem: "expected a value") }
        for i in 0..<n where base[pos + i] != l[i] {
            throw .malformed(offset: pos, problem: "expected a value")
        }
        pos += n
    }

    @inline(__always)
    private func isDigit(_ i: Int) -> Bool {
        i < count && base[i] &- UInt8(ascii: "0") < 10
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    private mutating func scanNumber() throws(ScanFailure) {
        if base[pos] == UInt8(ascii: "-") { pos &+= 1 }
        guard isDigit(pos) else { throw .malformed(offset: pos, problem: "expected a digit in a number") }
        if base[pos] == UInt8(ascii: "0") {
            pos &+= 1
            if isDigit(pos) { throw .malformed(offset: pos, problem: "a number must not have leading zeros") }
        } else {
            pos = digitRunEnd(from: pos)
        }
        if pos < count, base[pos] == UInt8(ascii: ".") {
            pos &+= 1
            guard isDigit(pos) else { throw .malformed(offset: pos, problem: "expected a digit after the decimal point") }
            pos = digitRunEnd(from: pos)
        }
        if pos < count, base[pos] | 0x20 == UInt8(ascii: "e") {
            pos &+= 1
            if pos < count, base[pos] == UInt8(ascii: "+") || base[pos] == UInt8(ascii: "-") { pos &+= 1 }
            guard isDigit(pos) else { throw .malformed(offset: pos, problem: "expected a digit in an exponent") }
            pos = digitRunEnd(from: pos)
        }
    }

    /// Validates the string at `pos` (the opening quote) and leaves `pos` after the closing quote.
    @inline(__always)
    mutating func scanString() throws(ScanFailure) -> JSONSpan {
        let start = pos &+ 1
        var i = start
        var escaped = false
        while true {
            i = plainRunEnd(from: i)
            guard i < count else { throw .malformed(offset: i, problem: "unterminated string") }
            let b = base[i]
            if b == UInt8(ascii: "\"") { break }
            if b == UInt8(ascii: "\\") {
                escaped = true
                i = try scanEscape(at: i)
            } else if b < 0x20 {
                throw .malformed(offset: i, problem: "unescaped control character in a string")
            } else {
                i = try scanUTF8(at: i)
            }
        }
        pos = i &+ 1
        return JSONSpan(kind: .string, start: start, end: i, escaped: escaped)
    }

    /// The index of the first byte at or after `i` that ends a string's plain run (see
    /// `specialBytes`), or `count` if none does.
    @inline(__always)
    func plainRunEnd(from i: Int) -> Int {
        let (i, marks) = firstMarkedWord(from: i, Self.specialBytes)
        return marks != 0 ? i &+ Self.firstMarked(marks) : plainRunEndInTail(from: i)
    }

    /// The index of the first byte at or after `i` that is not an ASCII digit, or `count`.
    @inline(__always)
    func digitRunEnd(from i: Int) -> Int {
        let (i, marks) = firstMarkedWord(from: i, Self.nonDigitBytes)
        return marks != 0 ? i &+ Self.firstMarked(marks) : digitRunEndInTail(from: i)
    }

    @inline(never)
    func plainRunEndInTail(from i: Int) -> Int { i &+ Self.firstMarked(Self.specialBytes(tailWord(from: i))) }

    @inline(never)
    func digitRunEndInTail(from i: Int) -> Int { i &+ Self.firstMarked(Self.nonDigitBytes(tailWord(from: i))) }

    /// Skips the whole words from `start` on in which `flags` marks no byte (the high bit of a
    /// byte in a little-endian word): returns the first word with a mark and its marks, or the
    /// index of the last fewer than eight bytes and no marks. The SWAR scans (`specialBytes`,
    /// `nonDigitBytes`) take eight bytes per step where byte loops took one; callers take the
    /// rare tail of the message out of line, which keeps this loop to one index (inlined with
    /// the tail, the loop carried several and spilled them: about 9 more instructions per word).
    @inline(__always)
    func firstMarkedWord(from start: Int, _ flags: (UInt64) -> UInt64) -> (index: Int, marks: UInt64) {
        var i = start
        while i &+ 8 <= count {
            let marks = flags(word(at: i))
            if marks != 0 { return (i, marks) }
            i &+= 8
        }
        return (i, 0)
    }

    @inline(__always)
    func word(at i: Int) -> UInt64 {
        UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self)
    }

    /// The offset of the lowest marked byte of a word; 8 when none is.
    @inline(__always)
    static func firstMarked(_ marks: UInt64) -> Int {
        marks.trailingZeroBitCount &>> 3
    }

    /// The bytes from `i` to the end of the message (fewer than eight), with zero bytes above
    /// them. Both SWAR scans mark a zero byte, and their lowest mark is always a true one, so a
    /// scan of this word stops at `count` at the latest.
    func tailWord(from i: Int) -> UInt64 {
        if count >= 8 {
            // The message's last word, with the bytes before `i` shifted out (all when i == count).
            return word(at: count &- 8) >> (8 &* (8 &- (count &- i)))
        }
        var word: UInt64 = 0
        for k in 0..<(count &- i) { word |= UInt64(base[i &+ k]) << (8 &* k) }
        return word
    }

    /// The bytes of a little-endian word that are not ASCII digits, as the high bit of each such
    /// byte. Exact for every byte (no carry crosses a byte): a digit has the high nibble 3 and a
    /// low nibble of at most 9.
    @inline(__always)
    static func nonDigitBytes(_ word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highWrong = (word & (ones &* 0xF0)) ^ (ones &* 0x30)  // nonzero unless the high nibble is 3
        let lowOver = ((word & (ones &* 0x0F)) &+ (ones &* 0x06)) & (ones &* 0x10)  // 0x10 when the low nibble is over 9
        let wrong = highWrong | lowOver  // per byte: a multiple of 0x10, zero only for a digit
        // Nonzero bytes to their high bit: adding 0x7F to the low seven bits cannot carry out.
        return (((wrong & (ones &* 0x7F)) &+ (ones &* 0x7F)) | wrong) & (ones &* 0x80)
    }

    /// The bytes of a little-endian word that end a string's plain run: a quote, a backslash, a
    /// control character (below 0x20) or the start of a multi-byte sequence (0x80 and up), as
    /// the high bit of each such byte. Subtracting per byte lets a borrow reach only the bytes
    /// above a flagged one, so the lowest flagged byte is always a true one (all a caller uses).
    @inline(__always)
    static func specialBytes(_ word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        // Flipping bit 1 of every byte leaves the control characters below 0x20 and turns the
        // quote (0x22) into 0x20 (and the space into 0x22): the two are then the bytes below
        // 0x21, found by one subtraction (two more operations per word each found alone).
        let controlOrQuote = (word ^ (ones &* 0x02)) &- ones &* 0x21
        let backslash = (word ^ (ones &* UInt64(UInt8(ascii: "\\")))) &- ones
        // A byte of 0x80 and up is special itself; only below it can a borrow have set a bit.
        return (controlOrQuote | backslash | word) & (ones &* 0x80)
    }

    private func hexValue(_ i: Int) -> UInt32? {
        guard i < count else { return nil }
        let b = base[i]
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return UInt32(b - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return UInt32(b - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return UInt32(b - UInt8(ascii: "A") + 10)
        default: return nil
        }
    }

    private func hex4(_ i: Int) -> UInt32? {
        guard let a = hexValue(i), let b = hexValue(i + 1), let c = hexValue(i + 2), let d = hexValue(i + 3) else { return nil }
        return a << 12 | b << 8 | c << 4 | d
    }

    /// `i` is at a backslash; returns the index after the escape.
    private func scanEscape(at i: Int) throws(ScanFailure) -> Int {
        guard i + 1 < count else { throw .malformed(offset: i, problem: "unterminated string") }
        switch base[i + 1] {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"),
             UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
            return i + 2
        case UInt8(ascii: "u"):
            guard let unit = hex4(i + 2) else { throw .malformed(offset: i, problem: "invalid \\u escape") }
            if unit >= 0xDC00 && unit <= 0xDFFF {
                throw .malformed(offset: i, problem: "unpaired low surrogate escape (not valid Unicode)")
            }
            if unit >= 0xD800 && unit <= 0xDBFF {
                guard i + 7 < count, base[i + 6] == UInt8(ascii: "\\"), base[i + 7] == UInt8(ascii: "u"),
                      let low = hex4(i + 8), low >= 0xDC00, low <= 0xDFFF
                else { throw .malformed(offset: i, problem: "unpaired high surrogate escape (not valid Unicode)") }
                return i + 12
            }
            return i + 6
        default:
            throw .malformed(offset: i, problem: "invalid escape in a string")
        }
    }

    /// `i` is at a byte >= 0x80; validates one UTF-8 sequence (no overlongs, no surrogates,
    /// nothing above U+10FFFF) and returns the index after it.
    private func scanUTF8(at i: Int) throws(ScanFailure) -> Int {
        let lead = base[i]
        let length: Int
        var low: UInt8 = 0x80
        var high: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0: length = 3; low = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: length = 3; high = 0x9F
        case 0xF0: length = 4; low = 0x90
        case 0xF1...0xF3: length = 4
        case 0xF4: length = 4; high = 0x8F
        default: throw .malformed(offset: i, problem: "invalid UTF-8")
        }
        guard i + length <= count else { throw .malformed(offset: i, problem: "invalid UTF-8") }
        let second = base[i + 1]
        guard second >= low, second <= high else { throw .malformed(offset: i, problem: "invalid UTF-8") }
        for k in 2..<max(length, 2) where base[i + k] & 0xC0 != 0x80 {
            throw .malformed(offset: i, problem: "invalid UTF-8")
        }
        return i + length
    }

    // MARK: Reading captured values

    /// The bytes of a captured string, with escapes decoded. Only for spans this scanner validated.
    func decode(_ span: JSONSpan) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(span.end - span.start)
        var i = span.start
        while i < span.end {
            let b = base[i]
            guard b == UInt8(ascii: "\\") else {
                out.append(b)
                i += 1
                continue
            }
            let e = base[i + 1]
            switch e {
            case UInt8(ascii: "b"): out.append(0x08); i += 2
            case UInt8(ascii: "f"): out.append(0x0C); i += 2
            case UInt8(ascii: "n"): out.append(0x0A); i += 2
            case UInt8(ascii: "r"): out.append(0x0D); i += 2
            case UInt8(ascii: "t"): out.append(0x09); i += 2
            case UInt8(ascii: "u"):
                // Safe: `scanEscape` let this span through only with four hex digits after every
                // \u, and a second \u escape of a low surrogate after a high one.
                var scalar = hex4(i + 2)!
                i += 6
                if scalar >= 0xD800 && scalar <= 0xDBFF {
                    let low = hex4(i + 2)!
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    i += 6
                }
                appendUTF8(scalar, to: &out)
            default: out.append(e); i += 2  // " \ /
            }
        }
        return out
    }

    private func appendUTF8(_ scalar: UInt32, to out: inout [UInt8]) {
        switch scalar {
        case 0..<0x80:
            out.append(UInt8(scalar))
        case 0x80..<0x800:
            out.append(UInt8(0xC0 | scalar >> 6))
            out.append(UInt8(0x80 | scalar & 0x3F))
        case 0x800..<0x10000:
            out.append(UInt8(0xE0 | scalar >> 12))
            out.append(UInt8(0x80 | scalar >> 6 & 0x3F))
            out.append(UInt8(0x80 | scalar & 0x3F))
        default:
            out.append(UInt8(0xF0 | scalar >> 18))
            out.append(UInt8(0x80 | scalar >> 12 & 0x3F))
            out.append(UInt8(0x80 | scalar >> 6 & 0x3F))
            out.append(UInt8(0x80 | scalar & 0x3F))
        }
    }

    /// Calls `body` with the decoded bytes of a string span, without copying when it has no escapes.
    @inline(__always)
    func withStringBytes<R>(_ span: JSONSpan, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        if !span.escaped {
            return body(UnsafeRawBufferPointer(start: base + span.start, count: span.end - span.start))
        }
        let decoded = decode(span)
        return decoded.withUnsafeBytes(body)
    }

    /// The raw bytes of any captured span (for numbers: the literal as written).
    @inline(__always)
    func rawBytes(_ span: JSONSpan) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base + span.start, count: span.end - span.start)
    }

    func string(_ span: JSONSpan) -> String {
        withStringBytes(span) { String(decoding: $0, as: UTF8.self) }
    }

    /// A captured value's JSON text as written (a string with its quotes and escapes), with
    /// tabs and line breaks between its tokens shown as spaces, for a one-line detail.
    func text(_ span: JSONSpan) -> String {
        let quote = span.kind == .string ? 1 : 0
        let bytes = UnsafeRawBufferPointer(start: base + span.start - quote, count: span.end - span.start + 2 * quote)
        return String(decoding: bytes.lazy.map { $0 == 0x09 || $0 == 0x0A || $0 == 0x0D ? 0x20 : $0 }, as: UTF8.self)
    }
}

/// Open containers while skipping: one bit per level (1 = object). The first 64 levels live in a
/// register; deeper levels (only possible when `maxDepth` is raised above 64) spill to an array.
struct ContainerStack {
    private var bits: UInt64 = 0
    private var spill: [UInt64] = []
    private(set) var depth = 0

    @inline(__always)
    mutating func push(isObject: Bool) {
        if depth > 0 && depth % 64 == 0 {
            spill.append(bits)
            bits = 0
        }
        bits = bits << 1 | (isObject ? 1 : 0)
        depth += 1
    }

    @inline(__always)
    mutating func pop() {
        bits >>= 1
        depth -= 1
        if depth > 0 && depth % 64 == 0 {
            bits = spill.removeLast()
        }
    }

    @inline(__always)
    var topIsObject: Bool { bits & 1 == 1 }
}
