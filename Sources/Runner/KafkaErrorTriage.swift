import Kafka
import Logging

/// Decides what an error from librdkafka means for a run: fatal ones (authorization,
/// authentication, unsupported versions, a fatal producer, a topic deleted under the runner)
/// stop it with the cause and what to do; the rest are librdkafka retrying by itself, worth a
/// warning and a counter.
struct KafkaErrorTriage: RunnerPart, Sendable {
    let context: RunnerContext
    let control: RunnerControl

    /// librdkafka's error callback, on the runner's thread (inside a poll). A fatal error stops
    /// the loop through `control`.
    func clientError(_ error: KafkaError, client: String) {
        metrics?.kafkaError(error.severity)
        if error.severity == .fatal {
            logger.error("\(stageName): \(client): \(error)")
            control.clientFailed(error)
        } else {
            logger.warning("\(stageName): \(client): \(error) (librdkafka retries by itself)")
        }
    }

    /// An error the consumer delivered among the records: throws what stops the run.
    /// `lastUnknownTopicLog` throttles the "waiting for the topic" line.
    func consumerError(_ error: KafkaError, bounded: Bool, everAssigned: Bool, now: Int64, lastUnknownTopicLog: inout Int64) throws {
        if error.isUnknownTopic {
            if bounded { throw PipelineError.inputTopicMissing(topic) }
            if everAssigned {
                throw PipelineError.kafka(
                    "\(stageName): the topic \(topic) no longer exists on the cluster (deleted while trackpipe was reading it): \(error). Nothing past what was delivered was committed. Recreate the topic (or point --input-topic at the right one) and restart.")
            }
            if now - lastUnknownTopicLog > 60_000 {
                logger.error("\(PipelineError.inputTopicMissing(topic)); waiting for it")
                lastUnknownTopicLog = now
            }
        } else if error.severity == .fatal {
            metrics?.kafkaError(error.severity)
            throw fatal(error)
        } else {
            metrics?.kafkaError(error.severity)
            logger.warning("\(stageName): consumer: \(error)")
        }
    }

    /// What the run ends with on a fatal Kafka error: the cause and what to do about it.
    func fatal(_ error: KafkaError) -> PipelineError {
        .kafka(
            "\(stageName): Kafka reported an error that retrying cannot fix: \(error). \(error.remedy) Nothing past what was delivered was committed; restart once it is fixed.")
    }
}
