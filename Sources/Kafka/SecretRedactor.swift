/// Scrubs known secret values out of free text: log lines, error messages.
///
/// trackpipe never prints a secret property itself (`KafkaConfig.isSecret`), but text it does
/// not write can still carry one: librdkafka's own log lines (an OpenSSL error quoting the key
/// file's path), an error string from a client, ArgumentParser echoing a mistyped argument.
/// Hiding a value by the name of its property cannot help there, so this looks for the values
/// themselves and replaces every occurrence with `[redacted]`.
///
/// The match is on UTF-8 bytes, not on characters, so a secret is found even where it ends
/// inside a grapheme cluster of the surrounding text. Longer values are replaced first, so a
/// secret that contains another is hidden whole. A very short secret is replaced wherever its
/// characters appear, which garbles those lines: that is the price of never printing it.
public struct SecretRedactor: Sendable, Equatable {
    /// What a hidden value is replaced with.
    public static let placeholder = "[redacted]"

    /// The values to hide, longest first, each as UTF-8.
    private(set) var values: [[UInt8]] = []

    public init() {}

    public init(values: some Sequence<String>) {
        add(values)
    }

    /// The values of the secret properties among `properties` (see `KafkaConfig.isSecret`).
    public init(properties: some Sequence<(key: String, value: String)>) {
        add(properties.filter { KafkaConfig.isSecret($0.key) }.map(\.value))
    }

    public var isEmpty: Bool { values.isEmpty }

    public mutating func add(_ more: some Sequence<String>) {
        insert(more.filter { !$0.isEmpty }.map { Array($0.utf8) })
    }

    func merging(_ other: SecretRedactor) -> SecretRedactor {
        var merged = self
        merged.insert(other.values)
        return merged
    }

    private mutating func insert(_ more: [[UInt8]]) {
        let all = Set(values).union(more)
        values = all.sorted { $0.count != $1.count ? $0.count > $1.count : $0.lexicographicallyPrecedes($1) }
    }

    /// `text` with every occurrence of every value replaced by `placeholder`.
    public func redact(_ text: String) -> String {
        guard !values.isEmpty else { return text }
        var bytes = Array(text.utf8)
        var changed = false
        for value in values where bytes.count >= value.count {
            if let replaced = Self.replace(value, in: bytes) {
                bytes = replaced
                changed = true
            }
        }
        return changed ? String(decoding: bytes, as: UTF8.self) : text
    }

    private static let placeholderBytes = Array(placeholder.utf8)

    /// nil when `needle` does not occur.
    private static func replace(_ needle: [UInt8], in haystack: [UInt8]) -> [UInt8]? {
        guard var found = firstIndex(of: needle, in: haystack, from: 0) else { return nil }
        var result: [UInt8] = []
        result.reserveCapacity(haystack.count)
        var start = 0
        while true {
            result.append(contentsOf: haystack[start..<found])
            result.append(contentsOf: placeholderBytes)
            start = found + needle.count
            guard let next = firstIndex(of: needle, in: haystack, from: start) else { break }
            found = next
        }
        result.append(contentsOf: haystack[start...])
        return result
    }

    static func firstIndex(of needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
        guard let first = needle.first, haystack.count - start >= needle.count else { return nil }
        var index = start
        let last = haystack.count - needle.count
        while index <= last {
            if haystack[index] == first && haystack[index..<(index + needle.count)].elementsEqual(needle) { return index }
            index += 1
        }
        return nil
    }
}
