/// Where one captured JSON value sits in the message, so the normalizer can look at the few
/// fields it needs without materializing anything until it has decided to.
struct JSONSpan: Sendable {
    enum Kind: UInt8, Sendable {
        case absent, string, number, null, bool, object, array

        /// How details name a value's type.
        var description: String {
            switch self {
            case .absent: "absent"
            case .string: "a string"
            case .number: "a number"
            case .null: "null"
            case .bool: "a boolean"
            case .object: "an object"
            case .array: "an array"
            }
        }
    }

    var kind: Kind = .absent
    /// A string that contains backslash escapes and must be decoded before use.
    var escaped: Bool = false
    // Offsets are stored in 32 bits: a `RawHit` holds over forty spans and is copied a few
    // times per message, and with 64-bit offsets those copies were a measurable share of a
    // hit's cost (docs/performance.md). `Normalizer` refuses messages beyond `maxOffset`.
    private var start32: Int32 = 0
    private var end32: Int32 = 0

    /// The largest offset a span can hold: the normalizer refuses longer messages.
    static let maxOffset = Int(Int32.max)

    init() {}

    init(kind: Kind, start: Int, end: Int, escaped: Bool = false) {
        self.kind = kind
        self.escaped = escaped
        self.start = start
        self.end = end
    }

    /// For strings, the first byte after the opening quote; otherwise the value's first byte.
    var start: Int {
        get { Int(start32) }
        set { start32 = Int32(truncatingIfNeeded: newValue) }
    }

    /// Exclusive end; for strings, the index of the closing quote.
    var end: Int {
        get { Int(end32) }
        set { end32 = Int32(truncatingIfNeeded: newValue) }
    }

    var isPresent: Bool { kind != .absent }
    /// JSON null counts as absent wherever the contract says "absent".
    var isAbsentOrNull: Bool { kind == .absent || kind == .null }
}

/// The fields captured from one object that may hold a hit's ids: the top level, `contextData`,
/// `userInfo`, `message.data` or `NOTIFICATION_USER_INFO`.
struct IdContainer: Sendable {
    /// True when the key was present with an object value (the last occurrence wins).
    var present = false
    var pushDeliveryId = JSONSpan()    // _dId
    var pushBroadlogId = JSONSpan()    // _mId
    var deliveryId = JSONSpan()
    var broadlogId = JSONSpan()
    var trackingFlag = JSONSpan()      // _acsDeliveryTracking
    var action = JSONSpan()
    var aps = JSONSpan()

    var hasIdKey: Bool {
        pushDeliveryId.isPresent || pushBroadlogId.isPresent || deliveryId.isPresent || broadlogId.isPresent
    }
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
    var notificationUserInfoValue = JSONSpan()
    var timestamp = JSONSpan()
    var channel = JSONSpan()
    var platform = JSONSpan()
}
