/// Settings an operator gave trackpipe's own topics before its first start, and what the check at
/// start-up (`InternalTopicCheck`, through the simulated cluster's DescribeConfigs) must make of
/// them. A refused start is followed by the command the refusal names, applied to the cluster, and
/// a start that must pass.
public struct InternalTopicSettings: Sendable, Hashable, CustomStringConvertible {
    public enum Expected: String, Sendable, Hashable {
        case passes, refused, warned
        /// The cluster does not describe the topics: nothing is checked, the workers start.
        case unchecked
    }

    public var state: [String: String]
    public var repartition: [String: String]
    /// The cluster answers DescribeConfigs (librdkafka's mock cluster does not).
    public var described = true
    public var expected: Expected

    public var description: String {
        func text(_ settings: [String: String]) -> String { settings.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ") }
        return "state topic [\(text(state))], repartition topic [\(text(repartition))]\(described ? "" : ", not described"): \(expected.rawValue)"
    }

    static let created = ["cleanup.policy": "compact"]
    static let shuffle = ["cleanup.policy": "delete", "retention.ms": "604800000"]

    /// What a start may meet.
    public static let cases: [InternalTopicSettings] = [
        InternalTopicSettings(state: created, repartition: shuffle, expected: .passes),
        InternalTopicSettings(
            state: ["cleanup.policy": "compact", "retention.ms": "3600000", "segment.ms": "1000", "delete.retention.ms": "0"], repartition: shuffle,
            expected: .passes),
        InternalTopicSettings(state: ["cleanup.policy": "compact,delete", "retention.ms": "-1", "retention.bytes": "-1"], repartition: shuffle, expected: .passes),
        InternalTopicSettings(state: ["cleanup.policy": "delete"], repartition: shuffle, expected: .refused),
        InternalTopicSettings(state: ["cleanup.policy": "compact,delete", "retention.ms": "604800000"], repartition: shuffle, expected: .refused),
        InternalTopicSettings(state: ["cleanup.policy": "compact,delete", "retention.ms": "-1", "retention.bytes": "1048576"], repartition: shuffle, expected: .refused),
        InternalTopicSettings(state: created, repartition: ["cleanup.policy": "compact"], expected: .refused),
        InternalTopicSettings(state: created, repartition: ["cleanup.policy": "delete", "retention.ms": "3600000"], expected: .warned),
        InternalTopicSettings(state: created, repartition: ["cleanup.policy": "delete", "retention.bytes": "1073741824"], expected: .warned),
        InternalTopicSettings(state: ["cleanup.policy": "delete"], repartition: shuffle, described: false, expected: .unchecked),
    ]
}
