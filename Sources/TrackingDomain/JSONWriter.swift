/// A minimal JSON writer for the records the pipeline emits (events, aggregates, dead-letter
/// summaries). It appends straight into one byte buffer that callers can reuse between records
/// (`removeAll()` keeps the capacity), so writing a record does not allocate once warmed up.
///
/// Commas are placed automatically; the caller is responsible for a well-formed sequence
/// of calls (a `key` before every value inside an object, balanced begin/end).
public struct JSONWriter: Sendable {
    /// The UTF-8 JSON written so far.
    public var bytes: [UInt8]
    /// True when the next value or key must be preceded by a comma.
    private var needsComma = false

    public init() {
        bytes = []
    }

    /// Starts with room for `capacity` bytes, for callers that know their record size.
    public init(capacity: Int) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    /// The JSON written so far as a String.
    public var string: String { String(decoding: bytes, as: UTF8.self) }

    /// Forgets what was written but keeps the buffer, so the next record reuses it.
    public mutating func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        needsComma = false
    }

    @inline(__always)
    private mutating func beginValue() {
        if needsComma { bytes.append(UInt8(ascii: ",")) }
        needsComma = true
    }

    /// Ends a JSON Lines record: appends a newline, after which the next value starts a new record.
    public mutating func endLine() {
        bytes.append(0x0A)
        needsComma = false
    }

    public mutating func beginObject() {
        beginValue()
        bytes.append(UInt8(ascii: "{"))
        needsComma = false
    }

    public mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        needsComma = true
    }

    /// Writes an object key; the next call must write its value.
    public mutating func key(_ name: String) {
        beginValue()
        appendQuoted(name)
        bytes.append(UInt8(ascii: ":"))
        needsComma = false
    }

    public mutating func string(_ value: String) {
        beginValue()
        appendQuoted(value)
    }

    public mutating func string(_ value: some InlineID) {
        beginValue()
        value.withUTF8 { appendQuoted(utf8: $0.assumingMemoryBound(to: UInt8.self)) }
    }

    public mutating func int(_ value: Int64) {
        beginValue()
        Self.appendDecimal(value, to: &bytes)
    }

    public mutating func int(_ value: Int) {
        int(Int64(value))
    }

    public mutating func null() {
        beginValue()
        bytes.append(contentsOf: [0x6E, 0x75, 0x6C, 0x6C])  // null
    }

    /// `value` in decimal, as JSON numbers are written: the one way, also for writers that
    /// append to their own bytes (an aggregate record's members).
    public static func appendDecimal(_ value: Int64, to bytes: inout [UInt8]) {
        if value < 0 {
            bytes.append(UInt8(ascii: "-"))
        }
        // Work on the magnitude as UInt64 so Int64.min does not overflow.
        var magnitude = value.magnitude
        var scratch: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes; UInt64.max has 20 digits
        withUnsafeMutableBytes(of: &scratch) { digits in
            var index = digits.count
            repeat {
                index -= 1
                digits[index] = UInt8(ascii: "0") &+ UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude != 0
            bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: digits[index...]))
        }
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    private mutating func appendQuoted(_ text: String) {
        var text = text
        text.withUTF8 { appendQuoted(utf8: $0) }
    }

    private mutating func appendQuoted(utf8: UnsafeBufferPointer<UInt8>) {
        bytes.append(UInt8(ascii: "\""))
        var runStart = 0
        for index in 0..<utf8.count {
            let byte = utf8[index]
            guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
            if runStart < index {
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<index]))
            }
            runStart = index + 1
            bytes.append(UInt8(ascii: "\\"))
            switch byte {
            case UInt8(ascii: "\""): bytes.append(UInt8(ascii: "\""))
            case UInt8(ascii: "\\"): bytes.append(UInt8(ascii: "\\"))
            case 0x0A: bytes.append(UInt8(ascii: "n"))
            case 0x0D: bytes.append(UInt8(ascii: "r"))
            case 0x09: bytes.append(UInt8(ascii: "t"))
            case 0x08: bytes.append(UInt8(ascii: "b"))
            case 0x0C: bytes.append(UInt8(ascii: "f"))
            default:
                bytes.append(contentsOf: [UInt8(ascii: "u"), 0x30, 0x30])
                bytes.append(Self.hexDigits[Int(byte >> 4)])
                bytes.append(Self.hexDigits[Int(byte & 0x0F)])
            }
        }
        if runStart < utf8.count {
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart...]))
        }
        bytes.append(UInt8(ascii: "\""))
    }
}

extension JSONWriter {
    /// `text` as a JSON string literal, cut to `limit` characters (with "…") so details that
    /// echo input stay readable.
    static func quote(_ text: String, limit: Int = .max) -> String {
        var writer = JSONWriter()
        if text.count > limit {
            writer.string(String(text.prefix(limit)) + "…")
        } else {
            writer.string(text)
        }
        return writer.string
    }
}
