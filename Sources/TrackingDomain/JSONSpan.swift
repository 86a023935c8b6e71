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
    /// For strings, the first byte after the opening quote; otherwise the value's first byte.
    var start: Int = 0
    /// Exclusive end; for strings, the index of the closing quote.
    var end: Int = 0
    /// A string that contains backslash escapes and must be decoded before use.
    var escaped: Bool = false

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
