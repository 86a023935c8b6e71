/// What becomes of one message: exactly one verdict per message, so every input is accounted
/// for (accepted into the windows, counted as filtered, or dead-lettered with a reason). The one
/// type of it: the normalizer gives it, `HitIntake` adds the Kafka record's rules to it, the
/// normalize stage's lanes and the one-stage aggregate act on it, `trackpipe normalize` writes it.
public enum Verdict: Sendable, Equatable {
    case accepted(TrackingEvent)
    case filtered(FilterReason)
    /// `detail` says what is wrong and what the sender should do; it goes, after the reason's
    /// code (`RejectReason.written(detail:)`), to the `trackpipe.error.detail` header of the
    /// dead letter.
    case rejected(RejectReason, detail: String)
}

extension Verdict {
    /// Appends the line `trackpipe normalize` writes for this verdict (without the newline), as
    /// described by `schemas/normalize-line.schema.json`, to `writer`, so that a caller writing
    /// many lines reuses one buffer.
    public func writeJSONLine(into writer: inout JSONWriter) {
        writer.beginObject()
        switch self {
        case .accepted(let event):
            writer.key("status"); writer.string("ok")
            writer.key("event"); event.writeJSON(into: &writer)
        case .filtered(let reason):
            writer.key("status"); writer.string("filtered")
            writer.key("reason"); writer.string(reason.rawValue)
        case .rejected(let reason, let detail):
            writer.key("status"); writer.string("rejected")
            writer.key("reason"); writer.string(reason.rawValue)
            writer.key("detail"); writer.string(reason.written(detail: detail))
        }
        writer.endObject()
    }
}
