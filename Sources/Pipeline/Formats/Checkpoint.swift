/// What the worker stores in Kafka's commit metadata next to each committed offset, so that the
/// next owner of the partition (a restart, or another instance after a rebalance) can replay
/// from the offset exactly: recognise hits whose window was already final, skip dead letters
/// already sent, and drop events an upstream stage sent twice.
///
/// Encodings, all text:
/// - `trackpipe/1 evicted=<ms> processed=<offset>`: windows over the input topic itself.
/// - `trackpipe/3 evicted=<ms> processed=<offset> seen=<map>`: behind the repartition topic,
///   adding per source partition the highest source offset counted before `processed`, with
///   the incarnation of the input (topic and epoch) it belongs to.
/// - `trackpipe/4 evicted=<ms> processed=<offset> changelog=<offset> since=<offset> window=<ms> [seen=<map>]`:
///   a task whose windows live in its changelog: the commit is at `processed`, `changelog` says
///   how far the changelog partition had been written and acknowledged (its end offset then),
///   `since` where this line of owners began writing it (what lies before belongs to an
///   earlier run of the group and is never read back), and `window` the size of the windows
///   it counts, which no later run of the group may change (nil: not recorded).
/// - `trackpipe/2 …` (read only): the same without incarnations, written before they existed;
///   its floors belong to the configured input topic's first epoch.
///
/// The `seen` map is taken at `processed`, not at the committed offset, and is applied only to
/// records at or after `processed`: records between the committed offset and `processed` are
/// replayed, and the replay rebuilds the map for them (an event re-sent among them whose
/// original came before the committed offset belongs to a window that was already final, which
/// `evicted` recognises). Anything else (another tool's commit, an unknown format) decodes to
/// nil.
public struct Checkpoint: Sendable, Hashable {
    /// Every window with `windowEnd + retention <= evictedBefore` had been evicted (epoch ms).
    public var evictedBefore: Int64
    /// The next offset the previous owner had not yet processed.
    public var processedThrough: Int64
    /// Highest source offset counted per source partition, before `processedThrough`.
    public var seen: [Int32: SourceFloor]
    /// Where the task's changelog partition ended, acknowledged, when this was committed; nil
    /// in a checkpoint written before state topics (its commit trailed by what its windows held).
    public var changelog: Int64?
    /// Where the task's line of owners began writing its changelog partition (0 if not said).
    public var changelogSince: Int64
    /// The window size (ms) the state was counted with: a key `<deliveryId>@<windowStart>` means
    /// a different window under another size, so a run of another size must not go on from it.
    public var windowSize: Int64?

    /// The incarnation of floors read from a version 2 checkpoint, which did not record one.
    public static let unrecordedIncarnation: UInt64 = 0

    /// Kafka brokers refuse commit metadata above `offset.metadata.max.bytes` (4096 by default).
    public static let maxEncodedBytes = 4_000
    /// Source partitions whose `seen` map fits the metadata limit with offsets up to 2^42.
    public static let maxSourcePartitions = 400

    public init(
        evictedBefore: Int64, processedThrough: Int64, seen: [Int32: SourceFloor] = [:], changelog: Int64? = nil, changelogSince: Int64 = 0,
        windowSize: Int64? = nil
    ) {
        self.evictedBefore = evictedBefore
        self.processedThrough = processedThrough
        self.seen = seen
        self.changelog = changelog
        self.changelogSince = changelogSince
        self.windowSize = windowSize
    }

    public var encoded: String {
        let base = "evicted=\(evictedBefore) processed=\(processedThrough)"
        let seenField = seen.isEmpty ? "" : " seen=" + Self.encode(seen)
        if let changelog {
            return "trackpipe/4 " + base + " changelog=\(changelog) since=\(changelogSince)" + (windowSize.map { " window=\($0)" } ?? "") + seenField
        }
        if seen.isEmpty { return "trackpipe/1 " + base }
        return "trackpipe/3 " + base + seenField
    }

    public init?(decoding text: String?) {
        guard let text, let space = text.firstIndex(of: " ") else { return nil }
        let format = text[..<space]
        guard ["trackpipe/1", "trackpipe/2", "trackpipe/3", "trackpipe/4"].contains(format) else { return nil }
        var evicted: Int64?
        var processed: Int64?
        var changelog: Int64?
        var since: Int64 = 0
        var window: Int64?
        var seen: [Int32: SourceFloor] = [:]
        for field in text.split(separator: " ").dropFirst() {
            let parts = field.split(separator: "=", maxSplits: 1)
            guard parts.count == 2 else { return nil }
            switch parts[0] {
            case "evicted": evicted = Int64(parts[1])
            case "processed": processed = Int64(parts[1])
            case "changelog": changelog = Int64(parts[1])
            case "since": since = Int64(parts[1]) ?? 0
            case "window": window = Int64(parts[1])
            case "seen":
                guard let map = format == "trackpipe/2" ? Self.decodeUnrecorded(parts[1]) : Self.decode(parts[1]) else { return nil }
                seen = map
            default: continue
            }
        }
        guard let evicted, let processed, (format == "trackpipe/4") == (changelog != nil) else { return nil }
        self.init(
            evictedBefore: evicted, processedThrough: processed, seen: seen, changelog: changelog, changelogSince: since, windowSize: window)
    }

    // MARK: The seen map
    //
    // Version 3: varint group count; per incarnation, its 8 bytes little-endian, a varint entry
    // count, then per entry varints (source gap, offset + 1). Version 2 was the entries alone.
    // Base64url without padding.

    static func encode(_ seen: [Int32: SourceFloor]) -> String {
        var groups: [UInt64: [(Int32, Int64)]] = [:]
        for (source, floor) in seen { groups[floor.incarnation, default: []].append((source, floor.offset)) }
        var bytes: [UInt8] = []
        appendVarint(UInt64(groups.count), to: &bytes)
        for incarnation in groups.keys.sorted() {
            withUnsafeBytes(of: incarnation.littleEndian) { bytes.append(contentsOf: $0) }
            let entries = groups[incarnation]!.sorted { $0.0 < $1.0 }
            appendVarint(UInt64(entries.count), to: &bytes)
            appendEntries(entries, to: &bytes)
        }
        return base64url(bytes)
    }

    static func decode<Text: StringProtocol>(_ text: Text) -> [Int32: SourceFloor]? {
        guard let bytes = unbase64url(text) else { return nil }
        var position = 0
        guard let groups = readVarint(bytes, &position) else { return nil }
        var map: [Int32: SourceFloor] = [:]
        for _ in 0..<groups {
            guard position + 8 <= bytes.count else { return nil }
            var incarnation: UInt64 = 0
            for index in 0..<8 { incarnation |= UInt64(bytes[position + index]) << UInt64(8 * index) }
            position += 8
            guard let count = readVarint(bytes, &position),
                let entries = readEntries(bytes, &position, count: Int(clamping: count))
            else { return nil }
            for (source, offset) in entries { map[source] = SourceFloor(incarnation: incarnation, offset: offset) }
        }
        return position == bytes.count ? map : nil
    }

    /// A version 2 map: entries only, their incarnation not recorded.
    static func decodeUnrecorded<Text: StringProtocol>(_ text: Text) -> [Int32: SourceFloor]? {
        guard let bytes = unbase64url(text) else { return nil }
        var position = 0
        guard let entries = readEntries(bytes, &position, count: .max), position == bytes.count else { return nil }
        return Dictionary(uniqueKeysWithValues: entries.map { ($0.0, SourceFloor(incarnation: unrecordedIncarnation, offset: $0.1)) })
    }

    private static func appendEntries(_ entries: [(Int32, Int64)], to bytes: inout [UInt8]) {
        var previous: Int64 = -1
        for (source, offset) in entries {
            appendVarint(UInt64(Int64(source) - previous - 1), to: &bytes)
            appendVarint(UInt64(max(offset + 1, 0)), to: &bytes)
            previous = Int64(source)
        }
    }

    /// Up to `count` entries, or to the end of the bytes.
    private static func readEntries(_ bytes: [UInt8], _ position: inout Int, count: Int) -> [(Int32, Int64)]? {
        var entries: [(Int32, Int64)] = []
        var previous: Int64 = -1
        while entries.count < count, position < bytes.count {
            guard let gap = readVarint(bytes, &position), let offset = readVarint(bytes, &position) else { return nil }
            let source = previous + 1 + Int64(truncatingIfNeeded: gap)
            guard source <= Int64(Int32.max) else { return nil }
            entries.append((Int32(source), Int64(truncatingIfNeeded: offset) - 1))
            previous = source
        }
        guard count == .max || entries.count == count else { return nil }
        return entries
    }

    private static func appendVarint(_ value: UInt64, to bytes: inout [UInt8]) {
        var rest = value
        while rest >= 0x80 {
            bytes.append(UInt8(rest & 0x7F) | 0x80)
            rest >>= 7
        }
        bytes.append(UInt8(rest))
    }

    private static func readVarint(_ bytes: [UInt8], _ position: inout Int) -> UInt64? {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while position < bytes.count, shift < 64 {
            let byte = bytes[position]
            position += 1
            value |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 { return value }
            shift += 7
        }
        return nil
    }

    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    private static func base64url(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var index = 0
        while index < bytes.count {
            let chunk = bytes[index..<min(index + 3, bytes.count)]
            var word: UInt32 = 0
            for (shift, byte) in zip([16, 8, 0], chunk) { word |= UInt32(byte) << UInt32(shift) }
            let characters = chunk.count + 1
            for position in 0..<characters { out.append(alphabet[Int((word >> UInt32(18 - 6 * position)) & 0x3F)]) }
            index += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func unbase64url<Text: StringProtocol>(_ text: Text) -> [UInt8]? {
        var values: [UInt8] = []
        for character in text.utf8 {
            guard let value = alphabet.firstIndex(of: character) else { return nil }
            values.append(UInt8(value))
        }
        var out: [UInt8] = []
        var index = 0
        while index < values.count {
            let chunk = values[index..<min(index + 4, values.count)]
            guard chunk.count >= 2 else { return nil }
            var word: UInt32 = 0
            for (position, value) in chunk.enumerated() { word |= UInt32(value) << UInt32(18 - 6 * position) }
            for position in 0..<(chunk.count - 1) { out.append(UInt8((word >> UInt32(16 - 8 * position)) & 0xFF)) }
            index += 4
        }
        return out
    }
}

/// What the normalize stage stores in its commit metadata: which incarnation of the input
/// partition its offsets belong to, and how far the partition's event time had got. A partition
/// whose commit turns out to lie beyond its log (the topic was deleted and created again) starts
/// a new epoch, so that downstream the new offsets are never mistaken for copies of the old
/// ones; the progress lets the next owner carry on with the same watermark instead of
/// rebuilding it from the hits after the commit.
public struct SourceCheckpoint: Sendable, Hashable {
    public var epoch: UInt32
    /// The source's watermark over the hits before the committed offset (epoch ms); nil: none yet.
    public var progress: Int64?

    public init(epoch: UInt32, progress: Int64? = nil) {
        self.epoch = epoch
        self.progress = progress
    }

    public var encoded: String {
        "trackpipe/source epoch=\(epoch)" + (progress.map { " progress=\($0)" } ?? "")
    }

    public init?(decoding text: String?) {
        guard let text, text.hasPrefix("trackpipe/source ") else { return nil }
        var epoch: UInt32?
        var progress: Int64?
        for field in text.split(separator: " ").dropFirst() {
            let parts = field.split(separator: "=", maxSplits: 1)
            guard parts.count == 2 else { return nil }
            switch parts[0] {
            case "epoch": epoch = UInt32(parts[1])
            case "progress": progress = Int64(parts[1])
            default: continue
            }
        }
        guard let epoch else { return nil }
        self.epoch = epoch
        self.progress = progress
    }
}
