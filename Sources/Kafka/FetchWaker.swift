import CRdKafka
import Dispatch
import Synchronization

/// Wakes a consumer's broker threads so that librdkafka 2.0.2's fetcher looks again at a queue
/// that has drained (see `FetchWakePolicy` for when and why).
///
/// librdkafka offers no call that just wakes a broker thread, so the waker asks each leader
/// of the assigned partitions for their end offsets (`rd_kafka_offsets_for_times`, one small
/// ListOffsets request per broker): queuing the request wakes the broker's thread, which then
/// decides afresh which partitions to fetch. The answer is thrown away. The request blocks
/// until answered, so it runs on a queue of its own, one at a time, never on the polling thread.
final class FetchWaker: Sendable {
    private let client: NativeClient
    private let queue = DispatchQueue(label: "trackpipe.kafka.fetch-waker")
    private let inFlight = Atomic<Bool>(false)
    private let stopped = Atomic<Bool>(false)
    private let wakes = Atomic<Int>(0)
    /// How long a wake waits for its answer: a broker that does not answer delays only the
    /// next wake, never the consumer.
    private let timeoutMilliseconds: Int32

    /// A consumer's native handle, used only for librdkafka's thread-safe calls here.
    struct NativeClient: @unchecked Sendable {
        // @unchecked: librdkafka's client handle is thread-safe for the calls made with it
        // (assignment, offsets for times), and the consumer stops the waker (`stop`, which
        // waits for a wake in flight) before it destroys the handle.
        let handle: OpaquePointer
    }

    init(client: OpaquePointer, timeoutMilliseconds: Int32 = 1_000) {
        self.client = NativeClient(handle: client)
        self.timeoutMilliseconds = timeoutMilliseconds
    }

    /// Whether the last wake is still waiting for its answer.
    var isWaking: Bool { inFlight.load(ordering: .acquiring) }

    /// Wakes performed so far (for tests and the debug log).
    var count: Int { wakes.load(ordering: .relaxed) }

    /// Starts a wake unless one is in flight or the waker was stopped.
    func wake() {
        guard !stopped.load(ordering: .acquiring), !inFlight.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let client = self.client, timeout = timeoutMilliseconds
        queue.async { [self] in
            defer { inFlight.store(false, ordering: .releasing) }
            guard !stopped.load(ordering: .acquiring) else { return }
            Self.askForEndOffsets(client.handle, timeoutMilliseconds: timeout)
            wakes.add(1, ordering: .relaxed)
        }
    }

    /// No wake starts after this; returns once a wake in flight has been answered or timed out.
    func stop() {
        stopped.store(true, ordering: .releasing)
        queue.sync {}
    }

    private static func askForEndOffsets(_ client: OpaquePointer, timeoutMilliseconds: Int32) {
        var assigned: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
        guard rd_kafka_assignment(client, &assigned) == RD_KAFKA_RESP_ERR_NO_ERROR, let list = assigned else { return }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        guard list.pointee.cnt > 0 else { return }
        for index in 0..<Int(list.pointee.cnt) { list.pointee.elems[index].offset = Int64(RD_KAFKA_OFFSET_END) }
        _ = rd_kafka_offsets_for_times(client, list, timeoutMilliseconds)
    }
}
