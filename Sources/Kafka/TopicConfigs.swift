import CRdKafka

/// What a cluster says of some topics' configurations: for each topic it described, every entry
/// with the value in effect (a default included); for each it did not, why.
public struct TopicConfigs: Sendable, Equatable {
    public var described: [String: [String: String]]
    /// Topics not described, with the reason: the cluster's refusal (`TOPIC_AUTHORIZATION_FAILED`
    /// without the right to describe them) or no answer in time (librdkafka's mock cluster, 2.0.2
    /// and 2.16 alike: `_TIMED_OUT: Failed while waiting for controller`).
    public var undescribed: [String: String]

    public init(described: [String: [String: String]] = [:], undescribed: [String: String] = [:]) {
        self.described = described
        self.undescribed = undescribed
    }
}

extension TopicAdmin {
    /// DescribeConfigs for `topics`, one request. Never throws: a topic the cluster does not
    /// describe is in `undescribed`, with why.
    public func topicConfigs(_ topics: [String], timeoutMilliseconds: Int32 = 10_000) -> TopicConfigs {
        let resources = topics.compactMap { rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, $0) }
        defer { for resource in resources { rd_kafka_ConfigResource_destroy(resource) } }
        guard !resources.isEmpty else { return TopicConfigs() }
        func unanswered(_ reason: String) -> TopicConfigs {
            TopicConfigs(undescribed: Dictionary(topics.map { ($0, reason) }, uniquingKeysWith: { first, _ in first }))
        }
        let client = client
        // The request's own timeout ends it with an event; the margin is for that event to come.
        let asked = adminRequest(
            on: client, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS, timeout: .request(timeoutMilliseconds), margin: 200,
            send: { options, queue in
                var pointers: [OpaquePointer?] = resources
                pointers.withUnsafeMutableBufferPointer { rd_kafka_DescribeConfigs(client, $0.baseAddress, $0.count, options, queue) }
            },
            read: { Self.described(topics, in: $0, unanswered: unanswered) })
        switch asked {
        case .success(let answer): return answer
        case .failure(.unavailable(let what)): return unanswered("librdkafka could not make \(what)")
        case .failure(.noAnswer): return unanswered("no answer within \(timeoutMilliseconds / 1000) s")
        case .failure(.failed(let code, let detail)): return unanswered(KafkaError.named(code, detail))
        }
    }

    /// What a DescribeConfigs answer says of `topics`.
    private static func described(_ topics: [String], in event: OpaquePointer, unanswered: (String) -> TopicConfigs) -> TopicConfigs {
        var answer = TopicConfigs()
        guard let result = rd_kafka_event_DescribeConfigs_result(event) else { return unanswered("no DescribeConfigs result") }
        var count = 0
        guard let described = rd_kafka_DescribeConfigs_result_resources(result, &count) else { return unanswered("no resources in the answer") }
        for index in 0..<count {
            guard let resource = described[index], let name = rd_kafka_ConfigResource_name(resource) else { continue }
            let topic = String(cString: name)
            let error = rd_kafka_ConfigResource_error(resource)
            if error.isError {
                answer.undescribed[topic] = KafkaError.named(error, string(from: rd_kafka_ConfigResource_error_string(resource), or: ""))
                continue
            }
            var entries = 0
            var configs: [String: String] = [:]
            if let list = rd_kafka_ConfigResource_configs(resource, &entries) {
                for at in 0..<entries {
                    // A sensitive entry's value is not given (NULL).
                    guard let entry = list[at], let name = rd_kafka_ConfigEntry_name(entry), let value = rd_kafka_ConfigEntry_value(entry) else { continue }
                    configs[String(cString: name)] = String(cString: value)
                }
            }
            answer.described[topic] = configs
        }
        for topic in topics where answer.described[topic] == nil && answer.undescribed[topic] == nil {
            answer.undescribed[topic] = "not in the answer"
        }
        return answer
    }
}
