/// Where one captured JSON value sits in the message, so the normalizer can look at the few
/// fields it needs without materializing anything until it has decided to.
struct JSONSpan: Sendable {
    enum Kind: UInt8, Sendable {
        case absent, string, number, null, bool, object, array

        /// How details name a value's type.
        var description: String {
            ["absent", "a string", "a number", "null", "a boolean", "an object", "an array"][Int(rawValue)]
        }
    }

    // Eight bytes: a `RawHit` holds over forty spans, is zeroed for every message and read
    // field by field, and its size was a measurable share of a hit's cost
    // (docs/performance.md). The start takes 32 bits; the end 28 bits, with the kind (3 bits)
    // and the escape flag (1 bit) above it. `Normalizer` refuses messages beyond `maxOffset`.
    private var start32: UInt32 = 0
    private var endAndFlags: UInt32 = 0

    /// The largest offset a span can hold: the normalizer refuses longer messages.
    static let maxOffset = (1 << 28) - 1

    init() {}

    init(kind: Kind, start: Int, end: Int, escaped: Bool = false) {
        start32 = UInt32(truncatingIfNeeded: start)
        endAndFlags = UInt32(truncatingIfNeeded: end) & 0x0FFF_FFFF | UInt32(kind.rawValue) << 28 | (escaped ? 1 << 31 : 0)
    }

    /// Inlined: the verdict reads a span's kind several times a hit, and as a call it was about
    /// 100 instructions a hit (callgrind, one stage).
    @inline(__always)
    var kind: Kind { Kind(rawValue: UInt8(truncatingIfNeeded: endAndFlags >> 28) & 0x7) ?? .absent }

    /// A string that contains backslash escapes and must be decoded before use.
    var escaped: Bool { endAndFlags >> 31 != 0 }

    /// For strings, the first byte after the opening quote; otherwise the value's first byte.
    var start: Int { Int(start32) }

    /// Exclusive end; for strings, the index of the closing quote.
    var end: Int { Int(endAndFlags & 0x0FFF_FFFF) }

    @inline(__always)
    var isPresent: Bool { kind != .absent }
    /// JSON null counts as absent wherever the contract says "absent".
    @inline(__always)
    var isAbsentOrNull: Bool { kind == .absent || kind == .null }
}

/// The fields captured from one object that may hold a hit's ids: the top level, `contextData`,
/// `userInfo`, `message.data` or `NOTIFICATION_USER_INFO`. Each holds the first value of its
/// name (a hit that repeats one with another value is rejected before any is read).
struct IdContainer: Sendable {
    /// True when the container's name was present with an object value.
    var present = false
    var pushDeliveryId = JSONSpan()    // _dId
    var pushBroadlogId = JSONSpan()    // _mId
    var deliveryId = JSONSpan()
    var broadlogId = JSONSpan()
    var trackingFlag = JSONSpan()      // _acsDeliveryTracking
    var action = JSONSpan()
    var aps = JSONSpan()

    /// Keeps `value` as the field of `key`, if `key` is one of the names kept here (the others
    /// are only checked for repeats). One place that stores after one place that scans: a
    /// scan per name, inlined, was ten copies of the scan in each object's loop.
    @inline(__always)
    mutating func set(_ key: HitKey, _ value: JSONSpan) {
        switch key {
        case .pushDeliveryId: pushDeliveryId = value
        case .pushBroadlogId: pushBroadlogId = value
        case .deliveryId: deliveryId = value
        case .broadlogId: broadlogId = value
        case .trackingFlag: trackingFlag = value
        case .action: action = value
        case .aps: aps = value
        default: break
        }
    }

    var hasIdKey: Bool {
        pushDeliveryId.isPresent || pushBroadlogId.isPresent || deliveryId.isPresent || broadlogId.isPresent
    }
}

/// The objects of a hit that the contract reads, where a repeated name makes the hit ambiguous.
enum HitObject: UInt8, Sendable {
    case top, contextData, userInfo, message, messageData, notificationUserInfo

    /// How details name the object. A switch over literals, not an array of them: an array
    /// literal here was built (and freed, with its six strings) for every hit judged.
    var place: String {
        switch self {
        case .top: "at the top level"
        case .contextData: "in contextData"
        case .userInfo: "in userInfo"
        case .message: "in message"
        case .messageData: "in message.data"
        case .notificationUserInfo: "in NOTIFICATION_USER_INFO"
        }
    }
}

/// The first of the contract's names that a hit repeats with another value (`duplicate_field`):
/// JSON parsers disagree on which of the two counts, so the hit means different things to
/// different readers.
struct RepeatedName: Sendable {
    /// `.other` while no name is repeated with another value.
    var key = HitKey.other
    var object = HitObject.top
    var first = JSONSpan()
    var second = JSONSpan()

    var isPresent: Bool { key != .other }
}

/// Everything the normalizer needs from one message, captured in a single pass.
struct RawHit: Sendable {
    var top = IdContainer()
    var contextData = IdContainer()
    var userInfo = IdContainer()
    var messageData = IdContainer()
    var notificationUserInfo = IdContainer()
    var actionName = JSONSpan()
    var contextDataValue = JSONSpan()
    var url = JSONSpan()
    var message = JSONSpan()
    var timestamp = JSONSpan()
    var channel = JSONSpan()
    var platform = JSONSpan()
    var repeated = RepeatedName()

    /// Keeps `value` as the top-level field of `key` (see `IdContainer.set`); the containers
    /// are kept by `JSONScanner.scanContainer`.
    @inline(__always)
    mutating func setTopLevel(_ key: HitKey, _ value: JSONSpan) {
        switch key {
        case .actionName: actionName = value
        case .url: url = value
        case .timestamp: timestamp = value
        case .channel: channel = value
        case .platform: platform = value
        default: top.set(key, value)
        }
    }
}
