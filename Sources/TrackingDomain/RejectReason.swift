/// Why a message went to the dead-letter topic. The raw values are the machine-readable
/// codes written to the `trackpipe.error.reason` header, so they must never change.
public enum RejectReason: String, Sendable, Hashable, CaseIterable {
    case malformedJSON = "malformed_json"
    case notAnObject = "not_an_object"
    /// A name the contract reads, repeated in one object with another value.
    case duplicateField = "duplicate_field"
    case notATrackingAction = "not_a_tracking_action"
    case malformedTrackingURL = "malformed_tracking_url"
    case conflictingIds = "conflicting_ids"
    case missingDeliveryId = "missing_delivery_id"
    case missingBroadlogId = "missing_broadlog_id"
    case unknownAction = "unknown_action"
    case invalidTimestamp = "invalid_timestamp"
    case tooLarge = "too_large"
    case tooDeep = "too_deep"
    case idTooLong = "id_too_long"
    /// Not produced by the normalizer: the windowing engine uses it for hits older than retention.
    case tooLate = "too_late"
}
