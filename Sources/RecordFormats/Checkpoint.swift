import Foundation

/// What the worker stores in Kafka's commit metadata next to each committed offset, so that the
/// next owner of the partition (a restart, or another instance after a rebalance) can go on from
/// it exactly: read its windows back from the changelog, recognise hits whose window was already
/// final, and drop events an upstream stage sent twice.
///
/// One encoding, text:
/// `trackpipe/5 evicted=<ms> processed=<offset> changelog=<offset> since=<offset> <identity> [seen=<map>]`.
/// The commit is at `processed`; `changelog` says how far the task's changelog partition had been
/// written and acknowledged (its end offset then), `since` where this line of owners began
/// writing it (what lies before belongs to an earlier run of the group and is never read back),
/// the identity (`window=<ms>[,<ms>…] stages=<1|2> [repartition=<topic>] state=<topic>`) what the group
/// is fixed to, which no later run of the group may change (`GroupIdentity`), and `seen`, behind
/// the repartition topic, per source partition the highest source offset counted before
/// `processed`, with the incarnation of the input (topic and epoch) it belongs to.
///
/// The `seen` map is taken at `processed` and is applied only to records at or after it. Anything
/// else decodes to nil: another tool's commit, and a checkpoint of another version of trackpipe
/// (`otherVersion(of:)` tells them apart, for the refusal). A release that changes this format
/// reads the previous one for one release, then drops it (docs/scale-out.md, "Formats").
package struct Checkpoint: Sendable, Hashable {
    /// The tag the encoding begins with: the one version this trackpipe writes and reads.
    package static let format = "trackpipe/5"

    /// Every window with `windowEnd + retention <= evictedBefore` had been evicted (epoch ms).
    package var evictedBefore: Int64
    /// The next offset the committing owner had not yet processed (where it committed).
    package var processedMark: Int64
    /// Highest source offset counted per source partition, before `processedMark`.
    package var seen: [Int32: SourceFloor]
    /// Where the task's changelog partition ended, acknowledged, when this was committed.
    package var changelog: Int64
    /// Where the task's line of owners began writing its changelog partition.
    package var changelogSince: Int64
    /// What the group is fixed to: the window size the state was counted with (a key
    /// `<deliveryId>@<windowStart>` means a different window under another size), the mode and
    /// the internal topics. A run that differs must not go on from it. Its input topic is not
    /// recorded: nil once decoded.
    package var identity: GroupIdentity

    /// Kafka brokers refuse commit metadata above `offset.metadata.max.bytes` (4096 by default).
    package static let maxEncodedBytes = 4_000
    /// At most this many source partitions behind the repartition topic, whatever the names.
    package static let maxSourcePartitions = 400

    package init(
        evictedBefore: Int64, processedMark: Int64, seen: [Int32: SourceFloor] = [:], changelog: Int64, changelogSince: Int64 = 0,
        identity: GroupIdentity
    ) {
        self.evictedBefore = evictedBefore
        self.processedMark = processedMark
        self.seen = seen
        self.changelog = changelog
        self.changelogSince = changelogSince
        self.identity = identity
    }

    package var encoded: String {
        Self.format + " evicted=\(evictedBefore) processed=\(processedMark) changelog=\(changelog) since=\(changelogSince) "
            + identity.encodedFields + (seen.isEmpty ? "" : " seen=" + Self.encode(seen))
    }

    /// `group`: the group the commit is under, which the identity names.
    package init?(decoding text: String?, group: String) {
        guard let fields = checkpointFields(text, format: Self.format) else { return nil }
        var seen: [Int32: SourceFloor] = [:]
        if let map = fields["seen"] {
            guard let decoded = Self.decode(map) else { return nil }
            seen = decoded
        }
        guard let evicted = fields["evicted"].flatMap({ Int64($0) }), let processed = fields["processed"].flatMap({ Int64($0) }),
            let changelog = fields["changelog"].flatMap({ Int64($0) }), let since = fields["since"].flatMap({ Int64($0) }),
            let identity = GroupIdentity(fields: fields, group: group)
        else { return nil }
        self.init(
            evictedBefore: evicted, processedMark: processed, seen: seen, changelog: changelog, changelogSince: since, identity: identity)
    }

    /// Whether the checkpoint of a task behind `sourcePartitions` input partitions fits the
    /// commit metadata brokers accept, whatever its numbers (source offsets up to 2^42): the
    /// topic names of the identity take room from the duplicate floors.
    package static func fits(sourcePartitions: Int, identity: GroupIdentity) -> Bool {
        guard sourcePartitions <= maxSourcePartitions else { return false }
        let incarnation = UInt64.max
        let seen = Dictionary(
            uniqueKeysWithValues: (0..<Int32(sourcePartitions)).map { ($0, SourceFloor(incarnation: incarnation, offset: (1 << 42) - 2)) })
        let widest = Checkpoint(
            evictedBefore: .min, processedMark: .max, seen: seen, changelog: .max, changelogSince: .max, identity: identity)
        return widest.encoded.utf8.count <= maxEncodedBytes
    }

    /// The tag of a window checkpoint that another version of trackpipe wrote (`trackpipe/<n>`
    /// other than `format`), which this one does not read; nil for anything else.
    package static func otherVersion(of metadata: String?) -> String? {
        otherTag(metadata, family: "trackpipe/", format: format).flatMap { tag in
            tag.count > 10 && tag.dropFirst("trackpipe/".count).allSatisfy(\.isNumber) ? tag : nil
        }
    }

    // MARK: The seen map
    //
    // A varint group count; per incarnation, its 8 bytes little-endian, a varint entry count,
    // then per entry varints (source gap, offset + 1). Base64url without padding.

    static func encode(_ seen: [Int32: SourceFloor]) -> String {
        // By incarnation, then source: each incarnation's entries are one run.
        let entries = seen.sorted { ($0.value.incarnation, $0.key) < ($1.value.incarnation, $1.key) }
        let starts = entries.indices.filter { $0 == 0 || entries[$0].value.incarnation != entries[$0 - 1].value.incarnation }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(1 + 9 * starts.count + 2 * Varint.maxBytes * entries.count)
        Varint.append(UInt64(starts.count), to: &bytes)
        for (number, start) in starts.enumerated() {
            let run = entries[start..<(number + 1 < starts.count ? starts[number + 1] : entries.count)]
            withUnsafeBytes(of: entries[start].value.incarnation.littleEndian) { bytes.append(contentsOf: $0) }
            Varint.append(UInt64(run.count), to: &bytes)
            var previous: Int64 = -1
            for (source, floor) in run {
                Varint.append(UInt64(Int64(source) - previous - 1), to: &bytes)
                Varint.append(UInt64(max(floor.offset + 1, 0)), to: &bytes)
                previous = Int64(source)
            }
        }
        return base64url(bytes)
    }

    /// Base64url without padding, written from the bytes. Every commit behind the repartition
    /// topic encodes a map: Foundation's base64 text, mapped to the URL alphabet character by
    /// character, cost about 100,000 instructions for a task behind 32 input partitions
    /// (callgrind), about 110 per hit of two stages.
    static func base64url(_ bytes: [UInt8]) -> String {
        let alphabet: StaticString = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        let letters = alphabet.utf8Start
        var text: [UInt8] = []
        text.reserveCapacity((bytes.count * 4 + 2) / 3)
        var index = 0
        while index < bytes.count {
            let count = min(3, bytes.count - index)
            var group = UInt32(bytes[index]) << 16
            if count > 1 { group |= UInt32(bytes[index + 1]) << 8 }
            if count > 2 { group |= UInt32(bytes[index + 2]) }
            // Three bytes are four letters of six bits; a short group, one letter more than its bytes.
            for letter in 0...count { text.append(letters[Int(group >> (18 - 6 * letter) & 63)]) }
            index += 3
        }
        return String(decoding: text, as: UTF8.self)
    }

    static func decode<Text: StringProtocol>(_ text: Text) -> [Int32: SourceFloor]? {
        // Base64url: Foundation reads the standard alphabet, with its padding.
        guard !text.contains(where: { "+/=".contains($0) }) else { return nil }
        let standard = String(text.map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 })
        let padding = String(repeating: "=", count: (4 - standard.utf8.count % 4) % 4)
        guard let bytes = Data(base64Encoded: standard + padding) else { return nil }
        return bytes.withUnsafeBytes { raw in
            var reader = ByteReader(raw, cutShort: SeenMapMalformed())
            var map: [Int32: SourceFloor] = [:]
            do {
                for _ in 0..<(try reader.varint()) {
                    let incarnation = try reader.integer(UInt64.self)
                    var source: Int64 = -1
                    for _ in 0..<(try reader.varint()) {
                        source = source &+ 1 &+ Int64(truncatingIfNeeded: try reader.varint())
                        guard (0...Int64(Int32.max)).contains(source) else { return nil }
                        map[Int32(source)] = SourceFloor(incarnation: incarnation, offset: Int64(truncatingIfNeeded: try reader.varint()) &- 1)
                    }
                }
            } catch {
                return nil
            }
            return reader.isAtEnd ? map : nil
        }
    }

    private struct SeenMapMalformed: Error {}
}

/// What the normalize stage stores in its commit metadata: which incarnation of the input
/// partition its offsets belong to, how far the partition's event time had got, and what the
/// group is fixed to. A partition whose commit turns out to lie beyond its log (the topic was
/// deleted and created again) starts a new epoch, so that downstream the new offsets are never
/// mistaken for copies of the old ones; the progress lets the next owner carry on with the same
/// watermark instead of rebuilding it from the hits after the commit; the identity says which
/// pipeline the offsets belong to (`GroupIdentity`): they say which hits reached its
/// repartition topic.
///
/// `trackpipe/source/2 epoch=<n> [progress=<ms>] window=<ms>[,<ms>…] stages=2 repartition=<topic> state=<topic>`.
/// Anything else decodes to nil; `otherVersion(of:)` tells another version's apart, for the
/// refusal.
package struct SourceCheckpoint: Sendable, Hashable {
    /// The tag the encoding begins with: the one version this trackpipe writes and reads.
    package static let format = "trackpipe/source/2"

    package var epoch: UInt32
    /// The source's watermark over the hits before the committed offset (epoch ms); nil: none yet.
    package var progress: Int64?
    /// What the group is fixed to (always two stages: only the normalize stage writes this); its
    /// input topic is not recorded: nil once decoded.
    package var identity: GroupIdentity

    package init(epoch: UInt32, progress: Int64? = nil, identity: GroupIdentity) {
        self.epoch = epoch
        self.progress = progress
        self.identity = identity
    }

    package var encoded: String {
        Self.format + " epoch=\(epoch)" + (progress.map { " progress=\($0)" } ?? "") + " " + identity.encodedFields
    }

    /// `group`: the group the commit is under, which the identity names.
    package init?(decoding text: String?, group: String) {
        guard let fields = checkpointFields(text, format: Self.format) else { return nil }
        guard let epoch = fields["epoch"].flatMap({ UInt32($0) }), let identity = GroupIdentity(fields: fields, group: group) else { return nil }
        var progress: Int64?
        if let text = fields["progress"] {
            guard let value = Int64(text) else { return nil }
            progress = value
        }
        self.init(epoch: epoch, progress: progress, identity: identity)
    }

    /// The tag of a normalize stage's checkpoint that another version of trackpipe wrote
    /// (`trackpipe/source` followed by anything but this version's `/2`), which this one does
    /// not read; nil for anything else.
    package static func otherVersion(of metadata: String?) -> String? {
        otherTag(metadata, family: "trackpipe/source", format: format)
    }
}

/// The `name=value` fields of a commit's metadata that begins with `format` and a space; nil
/// for any other text, or a field without `=`.
private func checkpointFields(_ text: String?, format: String) -> [Substring: Substring]? {
    guard let text, text.hasPrefix(format + " ") else { return nil }
    var fields: [Substring: Substring] = [:]
    for field in text.split(separator: " ").dropFirst() {
        let parts = field.split(separator: "=", maxSplits: 1)
        guard parts.count == 2 else { return nil }
        fields[parts[0]] = parts[1]
    }
    return fields
}

/// The tag (first word) of a commit's metadata that begins with `family` but is not `format`:
/// another version's; nil for anything else.
private func otherTag(_ metadata: String?, family: String, format: String) -> String? {
    guard let tag = metadata?.prefix(while: { $0 != " " }), tag.hasPrefix(family), tag != format else { return nil }
    return String(tag)
}

/// The highest source offset counted from one source partition, and the incarnation it
/// belongs to.
package struct SourceFloor: Sendable, Hashable {
    package var incarnation: UInt64
    package var offset: Int64

    package init(incarnation: UInt64, offset: Int64) {
        self.incarnation = incarnation
        self.offset = offset
    }
}
