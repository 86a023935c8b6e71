import Kafka
import Logging

/// Scrubs the process's secret values from every log event (message, metadata, attached
/// error) before the text or JSON handler writes it.
///
/// The Kafka layer already scrubs librdkafka's own lines, but a Swift log line can quote text
/// from elsewhere: an error event's string from a consumer, a delivery report, whatever a
/// future log call interpolates. One wrapper at the bottom of the logging setup covers them
/// all, and it runs before JSON encoding, which could otherwise escape a secret's `"` or `\`
/// into a form that no longer matches.
struct RedactingLogHandler: LogHandler {
    var inner: any LogHandler
    let redactor: SecretRedactor
    /// Kept here rather than in `inner`, so that it is scrubbed with the event's own metadata.
    var metadata: Logger.Metadata = [:]

    init(_ inner: any LogHandler, redactor: SecretRedactor) {
        self.inner = inner
        self.redactor = redactor
    }

    var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    var metadataProvider: Logger.MetadataProvider? {
        get { inner.metadataProvider }
        set { inner.metadataProvider = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var event = event
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        if redactor.isEmpty {
            if !metadata.isEmpty { event.metadata = merged }
        } else {
            event.message = "\(redactor.redact(event.message.description))"
            event.metadata = merged.isEmpty ? nil : merged.mapValues(scrub)
            if let error = event.error { event.error = RedactedError(description: redactor.redact("\(error)")) }
        }
        inner.log(event: event)
    }

    private func scrub(_ value: Logger.Metadata.Value) -> Logger.Metadata.Value {
        switch value {
        case .string(let text): .string(redactor.redact(text))
        case .stringConvertible(let convertible): .string(redactor.redact(convertible.description))
        case .array(let values): .array(values.map(scrub))
        case .dictionary(let values): .dictionary(values.mapValues(scrub))
        }
    }
}

/// An error whose text was scrubbed: what a handler prints instead of the original.
struct RedactedError: Error, CustomStringConvertible {
    var description: String
}
