/// Turns one raw Kafka message into exactly one ``Verdict``.
///
/// It is a value with no mutable state, so one instance can be shared by every partition's
/// consumer. It reads the message in a single pass (`JSONScanner`), keeping only spans of the
/// few fields the contract needs, and allocates nothing per hit beyond the two id Strings
/// (none for ids up to 15 UTF-8 bytes, which Swift stores inline) — rejections may allocate
/// their detail text, as they are rare.
///
/// Checks run in the contract's order and the first failure decides: `too_large`, then
/// `malformed_json` / `too_deep` (in byte order: the first of the two met while scanning),
/// `not_an_object`, `duplicate_field` (a name the contract reads given twice with different
/// values: which one the sender meant is unknowable, so no field of the hit can be trusted),
/// the envelope (`not_a_tracking_action`, `malformed_tracking_url`),
/// `conflicting_ids`, `missing_delivery_id`, `missing_broadlog_id`, `id_too_long`,
/// `unknown_action`, `invalid_timestamp`, and only then the tracking rule. See ``HitShape``
/// for how the shape is chosen and `docs/normalization.md` for every decision.
public struct Normalizer: Sendable {
    public let limits: NormalizerLimits

    public init(limits: NormalizerLimits = .init()) {
        self.limits = limits
    }

    /// Exactly one verdict per message, never a crash, never a trap, whatever the bytes.
    /// `kafkaTimestamp` (epoch ms) is the event time of hits that carry none; pass nil outside Kafka.
    public func normalize(_ bytes: UnsafeRawBufferPointer, kafkaTimestamp: Int64?) -> Verdict {
        if bytes.count > limits.maxMessageBytes {
            return tooLarge(byteCount: bytes.count)
        }
        if bytes.count > JSONSpan.maxOffset {
            return .rejected(.tooLarge, detail: "the message is \(bytes.count) bytes, more than the \(JSONSpan.maxOffset) bytes trackpipe can read in one message (whatever the configured limit); a tracking hit is a few hundred bytes, so send only the hit")
        }
        guard let base = bytes.baseAddress, bytes.count > 0 else {
            return .rejected(.malformedJSON, detail: "the message is empty; send one UTF-8 JSON object per message")
        }
        var scanner = JSONScanner(base: base.assumingMemoryBound(to: UInt8.self), count: bytes.count, maxDepth: limits.maxDepth)
        var hit = RawHit()
        let notObjectKind: JSONSpan.Kind?
        do {
            notObjectKind = try scanner.scanMessage(into: &hit)
        } catch {
            switch error {
            case .malformed(let offset, let problem):
                return .rejected(.malformedJSON, detail: "\(problem) at byte \(offset)\(Self.describeByte(at: offset, in: bytes)); send one UTF-8 JSON object per message")
            case .tooDeep(let offset):
                return .rejected(.tooDeep, detail: "containers nest more than \(limits.maxDepth) levels (at byte \(offset)); tracking hits nest a few levels, so flatten the payload or drop unrelated data")
            }
        }
        if let notObjectKind {
            return .rejected(.notAnObject, detail: "the message is \(notObjectKind.description), not a JSON object; send each hit as one JSON object such as {\"deliveryId\":…,\"broadlogId\":…,\"action\":\"2\"}")
        }
        return withUnsafePointer(to: &hit) { hit in
            HitReader(captured: hit, scanner: scanner, limits: limits).verdict(kafkaTimestamp: kafkaTimestamp)
        }
    }

    /// The verdict for a message of `byteCount` bytes over the limit, for callers that learn the
    /// size without holding the bytes (a line reader that stops buffering an endless line).
    public func tooLarge(byteCount: Int) -> Verdict {
        .rejected(.tooLarge, detail: "the message is \(byteCount) bytes, more than the limit of \(limits.maxMessageBytes); a tracking hit is a few hundred bytes, so send only the hit, not whole payloads or batches")
    }

    /// Convenience for callers holding the message in another collection (the CLI, tests).
    public func normalize<Bytes: Collection>(_ bytes: Bytes, kafkaTimestamp: Int64?) -> Verdict where Bytes.Element == UInt8 {
        if let verdict = bytes.withContiguousStorageIfAvailable({ normalize(UnsafeRawBufferPointer($0), kafkaTimestamp: kafkaTimestamp) }) {
            return verdict
        }
        return Array(bytes).withUnsafeBytes { normalize($0, kafkaTimestamp: kafkaTimestamp) }
    }

    private static func describeByte(at offset: Int, in bytes: UnsafeRawBufferPointer) -> String {
        guard offset < bytes.count else { return " (end of message)" }
        let byte = bytes[offset]
        if byte >= 0x21 && byte < 0x7F {
            return " ('\(Character(Unicode.Scalar(byte)))')"
        }
        let hex = String(byte, radix: 16, uppercase: true)
        return " (byte 0x\(hex.count == 1 ? "0" + hex : hex))"
    }
}

/// Applies the contract's field rules to a scanned hit.
struct HitReader {
    /// The hit as scanned, read in place (valid for the reader's life): fields are read from
    /// it one by one, never the whole half-kilobyte at once.
    let captured: UnsafePointer<RawHit>
    let scanner: JSONScanner
    let limits: NormalizerLimits

    var hit: RawHit { _read { yield captured.pointee } }

    func container(_ place: HitObject) -> IdContainer {
        switch place {
        case .top, .message: hit.top
        case .contextData: hit.contextData
        case .userInfo: hit.userInfo
        case .messageData: hit.messageData
        case .notificationUserInfo: hit.notificationUserInfo
        }
    }

    func verdict(kafkaTimestamp: Int64?) -> Verdict {
        if hit.repeated.isPresent {
            return duplicateField(hit.repeated)
        }
        if hit.actionName.isPresent || hit.contextDataValue.isPresent {
            return envelopeVerdict(kafkaTimestamp: kafkaTimestamp)
        }
        if hit.url.isPresent {
            return postbackVerdict(kafkaTimestamp: kafkaTimestamp)
        }
        // No array of candidates here: this runs for every hit and must not allocate.
        let place: HitObject
        if hit.userInfo.present && hit.userInfo.hasIdKey {
            place = .userInfo
        } else if hit.messageData.present && hit.messageData.hasIdKey {
            place = .messageData
        } else if hit.notificationUserInfo.present && hit.notificationUserInfo.hasIdKey {
            place = .notificationUserInfo
        } else if hit.top.hasIdKey {
            place = .top
        } else if hit.userInfo.present {
            place = .userInfo
        } else if hit.messageData.present {
            place = .messageData
        } else if hit.notificationUserInfo.present {
            place = .notificationUserInfo
        } else {
            place = .top
        }
        return containerVerdict(idPlace: place, action: hit.top.action, kafkaTimestamp: kafkaTimestamp)
    }

    // MARK: Repeated names

    private func duplicateField(_ repeated: RepeatedName) -> Verdict {
        .rejected(.duplicateField, detail: "\"\(repeated.key.name)\" is repeated \(repeated.object.place) with different values (\(excerpt(repeated.first)) and \(excerpt(repeated.second))); JSON readers disagree on which one counts, so send each field once")
    }

    // MARK: Shapes

    private func envelopeVerdict(kafkaTimestamp: Int64?) -> Verdict {
        let name = hit.actionName
        let isTracking = name.kind == .string && scanner.withStringBytes(name) { Self.equals($0, "tracking") }
        guard isTracking else {
            let found: String
            switch name.kind {
            case .absent: found = "there is a contextData but no \"actionName\""
            case .string: found = "\"actionName\" is \(quoted(name)), not \"tracking\""
            default: found = "\"actionName\" is \(name.kind.description), not the string \"tracking\""
            }
            return .rejected(.notATrackingAction, detail: "\(found); only trackAction(\"tracking\", …) carries notification hits, so route other analytics actions elsewhere")
        }
        return containerVerdict(idPlace: .contextData, action: hit.contextData.action, kafkaTimestamp: kafkaTimestamp)
    }

    /// Ends the details of `malformed_tracking_url`. Computed: a String held across the
    /// parse was released on every postback hit.
    private static var postbackAdvice: String {
        "; a postback url looks like https://t.example.com/r/?id=<broadlogId>,<deliveryId>,<action>"
    }

    private func postbackVerdict(kafkaTimestamp: Int64?) -> Verdict {
        guard hit.url.kind == .string else {
            return .rejected(.malformedTrackingURL, detail: "\"url\" is \(hit.url.kind.description), not a string\(Self.postbackAdvice)")
        }
        // The parts are read where they lie (or, percent-decoded, on the stack) and the ids
        // made from their bytes: three Strings, the Result holding them and the ids made from
        // them cost about 1,000 instructions and 14 retains and releases a postback hit.
        return scanner.withStringBytes(hit.url) { url in
            PostbackURL.withIdParts(url) { parts in
                switch parts {
                case .failure(let failure):
                    .rejected(.malformedTrackingURL, detail: "\(failure.explanation)\(Self.postbackAdvice)")
                case .success(let parts):
                    postbackVerdict(parts, kafkaTimestamp: kafkaTimestamp)
                }
            }
        }
    }

    private func postbackVerdict(_ url: PostbackURL.Parts, kafkaTimestamp: Int64?) -> Verdict {
        if max(url.deliveryId.count, url.broadlogId.count) > limits.maxIdBytes {
            return idTooLong(deliveryBytes: url.deliveryId.count, broadlogBytes: url.broadlogId.count, place: "in the url's id parameter")
        }
        guard let action = Self.action(fromCode: url.action) else {
            return .rejected(.unknownAction, detail: "the url's action part is \(JSONWriter.quote(String(decoding: url.action, as: UTF8.self))); expected 1 (open), 2 (click) or 7 (impression)")
        }
        guard case .success(let eventTime) = readTimestamp(kafkaTimestamp: kafkaTimestamp) else {
            return invalidTimestamp()
        }
        guard TrackingRule.isTracked(flag: hit.top.trackingFlag, scanner: scanner) else {
            return .filtered(.trackingOff)
        }
        return .accepted(TrackingEvent(
            deliveryId: DeliveryID(validUTF8: url.deliveryId), broadlogId: BroadlogID(validUTF8: url.broadlogId), action: action,
            channel: explicitChannel ?? .unknown, platform: explicitPlatform ?? .unknown,
            eventTime: eventTime, shape: .postbackURL))
    }

    private func containerVerdict(idPlace: HitObject, action actionSpan: JSONSpan, kafkaTimestamp: Int64?) -> Verdict {
        let ids = container(idPlace)
        // Details only: `place` is computed in each rejection, not once per hit, as a String
        // held across the checks was released on every hit.

        // conflicting_ids: both pairs, before any missing id.
        let pushDelivery = nonEmptyString(ids.pushDeliveryId)
        let plainDelivery = nonEmptyString(ids.deliveryId)
        let pushBroadlog = nonEmptyString(ids.pushBroadlogId)
        let plainBroadlog = nonEmptyString(ids.broadlogId)
        if let a = pushDelivery, let b = plainDelivery, !sameString(a, b) {
            return .rejected(.conflictingIds, detail: "\"_dId\" is \(quoted(a)) but \"deliveryId\" is \(quoted(b)) \(idPlace.place); send one delivery id per hit")
        }
        if let a = pushBroadlog, let b = plainBroadlog, !sameString(a, b) {
            return .rejected(.conflictingIds, detail: "\"_mId\" is \(quoted(a)) but \"broadlogId\" is \(quoted(b)) \(idPlace.place); send one broadlog id per hit")
        }
        guard let deliverySpan = pushDelivery ?? plainDelivery else {
            return .rejected(.missingDeliveryId, detail: "no non-empty string \"_dId\" or \"deliveryId\" \(idPlace.place)\(found(ids.pushDeliveryId, "_dId", ids.deliveryId, "deliveryId")); the hit must name its delivery")
        }
        guard let broadlogSpan = pushBroadlog ?? plainBroadlog else {
            return .rejected(.missingBroadlogId, detail: "no non-empty string \"_mId\" or \"broadlogId\" \(idPlace.place)\(found(ids.pushBroadlogId, "_mId", ids.broadlogId, "broadlogId")); the hit must name its message (broadlog)")
        }
        let deliveryBytes = scanner.withStringBytes(deliverySpan) { $0.count }
        let broadlogBytes = scanner.withStringBytes(broadlogSpan) { $0.count }
        if max(deliveryBytes, broadlogBytes) > limits.maxIdBytes {
            return idTooLong(deliveryBytes: deliveryBytes, broadlogBytes: broadlogBytes, place: idPlace.place)
        }

        guard let action = readAction(actionSpan) else {
            let where_ = idPlace == .contextData ? "in contextData" : "at the top level"
            let what: String
            switch actionSpan.kind {
            case .absent: what = "there is no \"action\" \(where_)"
            case .string: what = "\"action\" \(where_) is \(quoted(actionSpan))"
            case .number: what = "\"action\" \(where_) is the number \(String(decoding: scanner.rawBytes(actionSpan), as: UTF8.self))"
            default: what = "\"action\" \(where_) is \(actionSpan.kind.description)"
            }
            return .rejected(.unknownAction, detail: "\(what); expected \"1\" (open), \"2\" (click) or \"7\" (impression), as a string or an integer")
        }

        guard case .success(let eventTime) = readTimestamp(kafkaTimestamp: kafkaTimestamp) else {
            return invalidTimestamp()
        }

        let flag = ids.trackingFlag.isAbsentOrNull ? hit.top.trackingFlag : ids.trackingFlag
        guard TrackingRule.isTracked(flag: flag, scanner: scanner) else {
            return .filtered(.trackingOff)
        }

        let pushIds = pushDelivery != nil || pushBroadlog != nil
        let shape: HitShape
        switch idPlace {
        case .top, .message: shape = .sdkContextData
        case .contextData: shape = .trackActionEnvelope
        case .userInfo: shape = pushIds ? .iosPush : .iosLocal
        case .messageData: shape = .androidPush
        case .notificationUserInfo: shape = .androidLocal
        }
        let channel: Channel
        if let explicit = explicitChannel {
            channel = explicit
        } else if pushIds {
            channel = .push
        } else if shape == .iosLocal || shape == .androidLocal {
            channel = .local
        } else {
            channel = .unknown
        }
        let platform: Platform
        if let explicit = explicitPlatform {
            platform = explicit
        } else if hit.top.aps.kind == .object || hit.userInfo.aps.kind == .object {
            platform = .ios
        } else if hit.message.kind == .object || hit.notificationUserInfo.present {
            platform = .android
        } else {
            platform = .unknown
        }
        return .accepted(TrackingEvent(
            deliveryId: scanner.withStringBytes(deliverySpan) { DeliveryID(validUTF8: $0) },
            broadlogId: scanner.withStringBytes(broadlogSpan) { BroadlogID(validUTF8: $0) },
            action: action, channel: channel, platform: platform, eventTime: eventTime, shape: shape))
    }

    // MARK: Fields

    /// The rejection of ids of which one is over the limit. Called only then, so that the
    /// accepted path neither names the place nor returns an optional verdict.
    private func idTooLong(deliveryBytes: Int, broadlogBytes: Int, place: String) -> Verdict {
        let limit = limits.maxIdBytes
        if deliveryBytes > limit {
            return .rejected(.idTooLong, detail: "the delivery id \(place) is \(deliveryBytes) bytes, more than the limit of \(limit); ids are short opaque strings such as \"d57fd6\", check that the right field is sent")
        }
        return .rejected(.idTooLong, detail: "the broadlog id \(place) is \(broadlogBytes) bytes, more than the limit of \(limit); ids are short opaque strings such as \"h1685a5\", check that the right field is sent")
    }

    /// `"1"`, `"2"`, `"7"` as strings, or the integer literals 1, 2, 7 (not 7.0 or 7e0: apps
    /// send the codes as written in the SDK samples, so anything else is a different field).
    private func readAction(_ span: JSONSpan) -> HitAction? {
        switch span.kind {
        case .string: scanner.withStringBytes(span) { Self.action(fromCode: $0) }
        case .number: Self.action(fromCode: scanner.rawBytes(span))
        default: nil
        }
    }

    static func action(fromCode code: UnsafeRawBufferPointer) -> HitAction? {
        guard code.count == 1 else { return nil }
        switch code[0] {
        case UInt8(ascii: "1"): return .open
        case UInt8(ascii: "2"): return .click
        case UInt8(ascii: "7"): return .impression
        default: return nil
        }
    }

    /// A `"timestamp"` that is not an event time; `invalidTimestamp()` says why.
    struct InvalidTimestamp: Error {}

    /// The event time: the hit's own, or `kafkaTimestamp` when it has none. A failure carries
    /// nothing, so the accepted path moves no String (a Result holding the rejection's
    /// verdict was copied and released on every hit).
    private func readTimestamp(kafkaTimestamp: Int64?) -> Result<Int64?, InvalidTimestamp> {
        let span = hit.timestamp
        let millis: Int64?
        switch span.kind {
        case .absent, .null: return .success(kafkaTimestamp)
        case .number: millis = Self.integerMillis(scanner.rawBytes(span))
        case .string: millis = scanner.withStringBytes(span) { RFC3339.parse($0) }
        default: millis = nil
        }
        guard let millis else { return .failure(InvalidTimestamp()) }
        return .success(millis)
    }

    /// The `invalid_timestamp` rejection of a hit whose `readTimestamp` failed.
    private func invalidTimestamp() -> Verdict {
        let span = hit.timestamp
        let advice = "; send epoch milliseconds as an integer (1795300000000) or an RFC 3339 string with a zone (\"2026-11-22T10:00:00.120Z\"), or omit the field"
        switch span.kind {
        case .number:
            let literal = String(decoding: scanner.rawBytes(span), as: UTF8.self)
            return .rejected(.invalidTimestamp, detail: "\"timestamp\" is the number \(literal), not whole epoch milliseconds within years 0000–9999\(advice)")
        case .string:
            return .rejected(.invalidTimestamp, detail: "\"timestamp\" is \(quoted(span)), not an RFC 3339 date-time with a zone\(advice)")
        default:
            return .rejected(.invalidTimestamp, detail: "\"timestamp\" is \(span.kind.description)\(advice)")
        }
    }

    /// An integer literal (no fraction, no exponent) within the instants RFC 3339 can write.
    static func integerMillis(_ literal: UnsafeRawBufferPointer) -> Int64? {
        var index = 0
        let negative = literal.first == UInt8(ascii: "-")
        if negative { index = 1 }
        guard index < literal.count, literal.count - index <= 18 else { return nil }  // 18 digits cannot overflow
        var value: Int64 = 0
        // Eight digits a step while eight remain, then one at a time: an epoch in ms (13
        // digits, most hits' timestamp) cost 140 instructions a digit at a time.
        while literal.count - index >= 8 {
            guard let eight = eightDigits(literal.loadUnaligned(fromByteOffset: index, as: UInt64.self)) else { return nil }
            value = value * 100_000_000 + Int64(eight)
            index += 8
        }
        while index < literal.count {
            let digit = literal[index] &- UInt8(ascii: "0")
            guard digit < 10 else { return nil }
            value = value * 10 + Int64(digit)
            index += 1
        }
        if negative { value = -value }
        guard value >= RFC3339.minEpochMillis, value <= RFC3339.maxEpochMillis else { return nil }
        return value
    }

    /// The number eight ASCII digits spell, the first the most significant, or nil when one
    /// byte is not a digit: a byte is a digit iff its high nibble is 3, also after adding 6.
    /// The digits are then combined in pairs, quadruples and the eight, in place.
    static func eightDigits(_ bytes: UInt64) -> UInt64? {
        let word = UInt64(littleEndian: bytes)
        let highNibbles: UInt64 = 0xF0F0_F0F0_F0F0_F0F0, threes: UInt64 = 0x3030_3030_3030_3030
        guard word & highNibbles == threes, (word &+ 0x0606_0606_0606_0606) & highNibbles == threes else { return nil }
        var value = word & 0x0F0F_0F0F_0F0F_0F0F
        value = (value &* 10 &+ value >> 8) & 0x00FF_00FF_00FF_00FF
        value = (value &* 100 &+ value >> 16) & 0x0000_FFFF_0000_FFFF
        return (value &* 10_000 &+ value >> 32) & 0xFFFF_FFFF
    }

    private var explicitChannel: Channel? {
        guard hit.channel.kind == .string else { return nil }
        return scanner.withStringBytes(hit.channel) { Self.channel(named: $0) }
    }

    private var explicitPlatform: Platform? {
        guard hit.platform.kind == .string else { return nil }
        return scanner.withStringBytes(hit.platform) { Self.platform(named: $0) }
    }

    /// `"push"` or `"local"` in any case. The name's length is tested first and the name is
    /// then compared as one word, its letters folded to lower case, instead of byte by byte
    /// against each literal: per call 49 -> 32 instructions for the platform, 38 -> 28 for the
    /// channel (callgrind, live hits).
    static func channel(named bytes: UnsafeRawBufferPointer) -> Channel? {
        switch bytes.count {
        case 4: foldedLetters(bytes) == 0x6873_7570 ? .push : nil  // "push", little-endian
        case 5: foldedLetters(bytes) == 0x6C_6163_6F6C ? .local : nil  // "local"
        default: nil
        }
    }

    /// `"ios"` or `"android"` in any case, compared as `channel(named:)` compares.
    static func platform(named bytes: UnsafeRawBufferPointer) -> Platform? {
        switch bytes.count {
        case 3: foldedLetters(bytes) == 0x73_6F69 ? .ios : nil  // "ios", little-endian
        case 7: foldedLetters(bytes) == 0x64_696F_7264_6E61 ? .android : nil  // "android"
        default: nil
        }
    }

    /// The bytes of a name of one to eight bytes as one little-endian word with bit 5 of each
    /// byte set. For a name of letters only, this is the name in lower case: a byte with that
    /// bit set is a given lower-case letter only if it was that letter in either case (no byte
    /// but 'A'...'Z' and 'a'...'z' lands on 0x61...0x7A). Inlined where the length is known,
    /// so that the loads are the two or three that length needs.
    @inline(__always)
    static func foldedLetters(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        let caseBits: UInt64 = 0x2020_2020_2020_2020
        return InlineUTF8.words(bytes).low | caseBits >> (64 - 8 * bytes.count)
    }

    // MARK: Helpers

    private func nonEmptyString(_ span: JSONSpan) -> JSONSpan? {
        // A string span is empty iff it has no bytes: any escape decodes to at least one byte.
        span.kind == .string && span.end > span.start ? span : nil
    }

    private func sameString(_ a: JSONSpan, _ b: JSONSpan) -> Bool {
        if !a.escaped && !b.escaped {
            let x = scanner.rawBytes(a), y = scanner.rawBytes(b)
            return x.count == y.count && x.elementsEqual(y)
        }
        return scanner.decode(a) == scanner.decode(b)
    }

    private func quoted(_ span: JSONSpan) -> String {
        JSONWriter.quote(scanner.string(span), limit: 80)
    }

    /// A value's JSON text as sent, cut like `quoted`: strings keep their quotes and escapes,
    /// so that two spellings of one string can be told apart.
    private func excerpt(_ span: JSONSpan) -> String {
        let text = scanner.text(span)
        return text.count > 80 ? String(text.prefix(80)) + "…" : text
    }

    private func found(_ push: JSONSpan, _ pushName: String, _ plain: JSONSpan, _ plainName: String) -> String {
        var notes: [String] = []
        for (span, name) in [(push, pushName), (plain, plainName)] where span.isPresent {
            notes.append(span.kind == .string ? "\"\(name)\" is empty" : "\"\(name)\" is \(span.kind.description)")
        }
        return notes.isEmpty ? "" : " (" + notes.joined(separator: ", ") + ")"
    }

    static func equals(_ bytes: UnsafeRawBufferPointer, _ literal: StaticString) -> Bool {
        guard bytes.count == literal.utf8CodeUnitCount else { return false }
        let l = literal.utf8Start
        for i in 0..<bytes.count where bytes[i] != l[i] { return false }
        return true
    }
}
