/// Why a message went to the dead-letter topic: every reason any part of trackpipe gives, from
/// the normalizer to the letter, so that one value travels the whole way. The raw values are the
/// machine-readable codes written to the `trackpipe.error.reason` header and used as the
/// `reason` label of the dead-letter metric, so they must never change.
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
    /// More Kafka headers than the limit: judged from the record before its value is read.
    case tooManyHeaders = "too_many_headers"
    /// Stamped further after the Kafka record's own timestamp than the allowed skew.
    case futureTimestamp = "future_timestamp"
    /// Older than its window's retention when the windows met it.
    case tooLate = "too_late"
    /// A repartition record this version cannot read (another version's format, or damaged).
    case unreadableRepartitionRecord = "unreadable_repartition_record"

    /// A detail as a dead letter's `trackpipe.error.detail` header and a `trackpipe normalize`
    /// line give it: this code, then the detail, which never starts with the code itself. The
    /// one place that writes the code before a detail.
    public func written(detail: String) -> String { "\(rawValue): \(detail)" }
}
