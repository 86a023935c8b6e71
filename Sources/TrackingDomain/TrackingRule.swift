/// Campaign's rule for which deliveries may be tracked (`_acsDeliveryTracking`).
enum TrackingRule {
    /// Tracked iff the flag is absent or null (deliveries before release 21.1 and custom templates
    /// carry none), or a string equal to "on" ignoring ASCII case (the iOS sample's comparison).
    /// Anything else — "off", "", "yes", `true` — means not tracked: when in doubt, Campaign's
    /// instruction to the app was "do not track", and the worker honours it.
    static func isTracked(flag: JSONSpan, scanner: JSONScanner) -> Bool {
        switch flag.kind {
        case .absent, .null:
            return true
        case .string:
            return scanner.withStringBytes(flag) { bytes in
                bytes.count == 2 && bytes[0] | 0x20 == UInt8(ascii: "o") && bytes[1] | 0x20 == UInt8(ascii: "n")
            }
        default:
            return false
        }
    }
}
