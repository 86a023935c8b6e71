import CRdKafka

/// Facts about the linked C library, for `trackpipe version` and error messages.
public enum Librdkafka {
    /// The version of the librdkafka actually loaded at run time (not the headers').
    public static var version: String { String(cString: rd_kafka_version_str()) }
}
