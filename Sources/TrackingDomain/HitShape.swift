/// Which of the contract's raw hit shapes (docs/tracking-hits.md, section 2, A–G) a hit was read as.
/// Kept on the event so that a surprising count can be traced back to the app code that sent it.
///
/// A message could match several shapes; the normalizer decides in this order
/// (the first rule that applies wins):
/// 1. a top-level `actionName` or `contextData` key: ``trackActionEnvelope`` (B);
/// 2. a top-level `url` key: ``postbackURL`` (G);
/// 3. the first of the containers `userInfo`, `message.data`, `NOTIFICATION_USER_INFO`
///    (objects only) that has an id key (`_dId`, `_mId`, `deliveryId`, `broadlogId`):
///    ``iosPush`` or ``iosLocal`` (C/F, by whether the ids use the push keys `_dId`/`_mId`),
///    ``androidPush`` (D), ``androidLocal`` (E);
/// 4. the top level, if it has an id key: ``sdkContextData`` (A);
/// 5. otherwise the first of those containers present, else the top level
///    (the hit is then rejected for its missing ids, naming that container).
public enum HitShape: UInt8, Sendable, Hashable, CaseIterable {
    case sdkContextData
    case trackActionEnvelope
    case iosPush
    case androidPush
    case androidLocal
    case iosLocal
    case postbackURL

    var name: String { Self.names[Int(rawValue)] }
    private static let names = ["sdk_context_data", "track_action", "ios_push", "android_push", "android_local", "ios_local", "postback_url"]
}
