import TrackingDomain

/// Writes one interaction as the bytes an app or a tracking server would send, in a shape
/// that fits its channel and platform, and says what the spec makes of it.
enum HitEncoder {
    static func encode(
        deliveryId: String, broadlogId: String, action: HitAction, channel: Channel, platform: Platform, eventTime: Int64,
        trackingOff: Bool, rng: inout SplitMix64
    ) -> (bytes: [UInt8], expected: GeneratedHit.Expected) {
        let code = action.code
        let actionJSON = rng.chance(0.8) ? "\"\(code)\"" : "\(code)"
        let flag = flagJSON(trackingOff: trackingOff, rng: &rng)
        let ts = timestampJSON(eventTime, rng: &rng)
        var expectedChannel = channel
        var expectedPlatform = platform
        let text: String
        let roll = Double.random(in: 0..<1, using: &rng)

        switch (channel, platform) {
        case (.push, _) where roll < 0.25, (.local, _) where roll < 0.30:
            // A: SDK context data, flat, with explicit channel and platform.
            let flagField = flag.map { ",\"_acsDeliveryTracking\":\($0)" } ?? ""
            text =
                "{\"deliveryId\":\"\(deliveryId)\",\"broadlogId\":\"\(broadlogId)\",\"action\":\(actionJSON),\"channel\":\"\(channel.name)\",\"platform\":\"\(platform.name)\"\(ts.map { ",\"timestamp\":\($0)" } ?? "")\(flagField)}"
        case (.push, _) where roll < 0.45:
            // B: trackAction envelope; channel only when the app names it.
            let named = rng.chance(0.5)
            if !named { expectedChannel = .unknown }
            let flagField = flag.map { ",\"_acsDeliveryTracking\":\($0)" } ?? ""
            text =
                "{\"actionName\":\"tracking\",\"contextData\":{\"deliveryId\":\"\(deliveryId)\",\"broadlogId\":\"\(broadlogId)\",\"action\":\(actionJSON)\(flagField)},\(named ? "\"channel\":\"push\"," : "")\"platform\":\"\(platform.name)\"\(ts.map { ",\"timestamp\":\($0)" } ?? "")}"
        case (.push, .ios) where roll < 0.85:
            // C: iOS userInfo forwarded with the action.
            let flagField = flag.map { ",\"_acsDeliveryTracking\":\($0)" } ?? ""
            text =
                "{\"action\":\(actionJSON)\(ts.map { ",\"timestamp\":\($0)" } ?? ""),\"userInfo\":{\"aps\":{\"alert\":{\"title\":\"Winter sale\",\"body\":\"Up to 40% off today\"},\"content-available\":1,\"badge\":2},\"_dId\":\"\(deliveryId)\",\"_mId\":\"\(broadlogId)\"\(flagField),\"uri\":\"https://example.com/sale\"}}"
        case (.push, .android) where roll < 0.85:
            // D: Android FCM RemoteMessage forwarded with the action.
            let flagField = flag.map { ",\"_acsDeliveryTracking\":\($0)" } ?? ""
            text =
                "{\"action\":\(actionJSON)\(ts.map { ",\"timestamp\":\($0)" } ?? ""),\"message\":{\"collapseKey\":\"1476005\",\"priority\":\"high\",\"data\":{\"_dId\":\"\(deliveryId)\",\"_mId\":\"\(broadlogId)\"\(flagField),\"title\":\"Winter sale\",\"body\":\"Up to 40% off\"}}}"
        case (.push, _):
            // G: the tracking server's log of the SDK's postback GET.
            let namePlatform = rng.chance(0.5)
            let nameChannel = rng.chance(0.3)
            expectedPlatform = namePlatform ? platform : .unknown
            expectedChannel = nameChannel ? .push : .unknown
            let flagField = flag.map { ",\"_acsDeliveryTracking\":\($0)" } ?? ""
            let separator = rng.chance(0.2) ? "%2C" : ","
            text =
                "{\"url\":\"https://t.example.com/r/?id=\(broadlogId)\(separator)\(deliveryId)\(separator)\(code)&mcId=71436720957458371935467211340216738418\"\(ts.map { ",\"timestamp\":\($0)" } ?? "")\(namePlatform ? ",\"platform\":\"\(platform.name)\"" : "")\(nameChannel ? ",\"channel\":\"push\"" : "")\(flagField)}"
        case (.local, .android):
            // E: Android local notification intent extras.
            text =
                "{\"action\":\(actionJSON)\(ts.map { ",\"timestamp\":\($0)" } ?? ""),\"NOTIFICATION_USER_INFO\":{\"deliveryId\":\"\(deliveryId)\",\"broadlogId\":\"\(broadlogId)\"}}"
        default:
            // F: iOS local notification, without a timestamp (the Kafka timestamp stands in).
            text =
                "{\"action\":\(actionJSON),\"channel\":\"local\",\"platform\":\"ios\",\"userInfo\":{\"deliveryId\":\"\(deliveryId)\",\"broadlogId\":\"\(broadlogId)\"}}"
        }
        let expected = GeneratedHit.Expected(
            deliveryId: deliveryId, broadlogId: broadlogId, action: action, channel: expectedChannel,
            platform: expectedPlatform, eventTime: eventTime)
        return (Array(text.utf8), expected)
    }

    /// A message that must be dead-lettered, with the reason it must carry.
    static func bad(deliveryId: String, broadlogId: String, eventTime: Int64, rng: inout SplitMix64) -> ([UInt8], RejectReason) {
        let cases: [(String, RejectReason)] = [
            ("{\"deliveryId\":\"\(deliveryId)\",\"broadlogId\":\"\(broadlogId)\",\"act", .malformedJSON),
            ("[\"tracking\",\"\(deliveryId)\"]", .notAnObject),
            (
                "{\"actionName\":\"purchase\",\"contextData\":{\"deliveryId\":\"\(deliveryId)\",\"broadlogId\":\"\(broadlogId)\",\"action\":\"2\"},\"timestamp\":\(eventTime)}",
                .notATrackingAction
            ),
            ("{\"url\":\"https://t.example.com/r/?id=\(broadlogId),\(deliveryId)&mcId=1\",\"timestamp\":\(eventTime)}", .malformedTrackingURL),
            (
                "{\"action\":\"1\",\"timestamp\":\(eventTime),\"userInfo\":{\"_dId\":\"\(deliveryId)\",\"deliveryId\":\"x\(deliveryId)\",\"_mId\":\"\(broadlogId)\"}}",
                .conflictingIds
            ),
            ("{\"broadlogId\":\"\(broadlogId)\",\"action\":\"7\",\"timestamp\":\(eventTime)}", .missingDeliveryId),
            (
                "{\"action\":\"7\",\"timestamp\":\(eventTime),\"message\":{\"data\":{\"_dId\":\"\(deliveryId)\",\"title\":\"t\"}}}",
                .missingBroadlogId
            ),
            ("{\"deliveryId\":\"\(deliveryId)\",\"broadlogId\":\"\(broadlogId)\",\"action\":\"9\",\"timestamp\":\(eventTime)}", .unknownAction),
            (
                "{\"deliveryId\":\"\(deliveryId)\",\"broadlogId\":\"\(broadlogId)\",\"action\":\"2\",\"timestamp\":\"yesterday\"}",
                .invalidTimestamp
            ),
        ]
        let (text, reason) = cases[Int.random(in: 0..<cases.count, using: &rng)]
        return (Array(text.utf8), reason)
    }


    /// The flag as JSON, or nil for none. Tracked deliveries show every form that means "on".
    private static func flagJSON(trackingOff: Bool, rng: inout SplitMix64) -> String? {
        let roll = Double.random(in: 0..<1, using: &rng)
        if trackingOff {
            return roll < 0.7 ? "\"off\"" : roll < 0.85 ? "\"OFF\"" : roll < 0.9 ? "\"\"" : roll < 0.95 ? "\"yes\"" : "true"
        }
        return roll < 0.5 ? nil : roll < 0.8 ? "\"on\"" : roll < 0.85 ? "\"ON\"" : roll < 0.9 ? "\"On\"" : "null"
    }

    /// Integer epoch ms mostly; RFC 3339 in UTC, with zone offsets, and with long fractions too.
    private static func timestampJSON(_ eventTime: Int64, rng: inout SplitMix64) -> String? {
        let roll = Double.random(in: 0..<1, using: &rng)
        if roll < 0.6 { return "\(eventTime)" }
        if roll < 0.8 { return "\"\(CivilTime.rfc3339(epochMillis: eventTime, offsetMinutes: 0, fractionDigits: 3))\"" }
        if roll < 0.95 {
            let offset = [120, -330, 330, -480, 60][Int.random(in: 0..<5, using: &rng)]
            return "\"\(CivilTime.rfc3339(epochMillis: eventTime, offsetMinutes: offset, fractionDigits: 3))\""
        }
        return "\"\(CivilTime.rfc3339(epochMillis: eventTime, offsetMinutes: 0, fractionDigits: 9))\""
    }
}
