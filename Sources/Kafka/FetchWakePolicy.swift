/// When to wake librdkafka's fetcher, judged from the consumer queue's length.
///
/// Why it is needed: librdkafka 2.0.2 stops fetching once the consumer queue holds
/// `queued.min.messages` messages or `queued.max.messages.kbytes` of payload (counted over the
/// whole queue, since every partition's queue forwards to it), and looks again only when its
/// broker thread wakes: for a request to send, an answer to read, or after up to a second.
/// Draining the queue wakes nothing, so a consumer that works on what it reads empties the
/// queue and then waits out that second (librdkafka 2.2 added `fetch.queue.backoff.ms` for
/// this). A deep prefetch hides the wait but holds hundreds of megabytes that the kernel must
/// hand out fresh, which cost a fifth of the worker's CPU (docs/performance.md); a shallow one
/// with a wake-up costs neither.
///
/// The policy sees the queue before and after each gather and counts what it gathered, so it
/// knows when the fetcher delivered (the queue holds more than it would from draining alone).
/// If the fetcher may have stopped (the queue stood at or near a threshold when it delivered)
/// and the queue has since drained below both: wake. If it keeps draining without a delivery,
/// the wake may have come too early (the payload is an estimate, from the average size of the
/// messages gathered): wake again each time the queue has halved. A delivery ends the episode;
/// a queue that stays empty (a consumer at the end of its partitions) stops the waking after a
/// few halvings, so a caught-up consumer costs nothing, and so does one that keeps up.
///
/// A value, used only on the polling thread.
struct FetchWakePolicy: Sendable, Equatable {
    /// librdkafka's `queued.min.messages`.
    let minMessages: Int
    /// librdkafka's `queued.max.messages.kbytes`, in bytes.
    let maxBytes: Int

    /// Average payload of the messages gathered, in bytes (librdkafka counts payloads, not keys).
    private(set) var averagePayload = 0.0
    /// The most the queue may have held when the fetcher last looked, after its last delivery.
    private var peak = 0
    /// Messages gathered so far plus the queue's length when last seen: it grows only when the
    /// fetcher delivers.
    private var delivered = 0
    private var gathered = 0
    /// The queue's length at the last wake since that delivery; nil: none yet.
    private var lastWakeLength: Int?

    init(minMessages: Int, maxBytes: Int) {
        self.minMessages = max(1, minMessages)
        self.maxBytes = max(1, maxBytes)
    }

    /// The fetcher may have stopped since it last delivered.
    var armed: Bool { mayHaveStopped(peak) }

    /// The queue's length before a gather.
    mutating func beforeGathering(queued: Int) {
        see(queued: queued, justGathered: 0)
    }

    /// The queue's length after a gather of `messages` messages with `payloadBytes` of payload
    /// in all; true if the fetcher should be woken now. `wakeInFlight`: the last wake has not
    /// been answered yet (one at a time).
    mutating func afterGathering(queued: Int, messages: Int, payloadBytes: Int, wakeInFlight: Bool) -> Bool {
        if messages > 0 {
            let batchAverage = Double(payloadBytes) / Double(messages)
            // Weighted towards recent batches: a topic's message sizes drift.
            averagePayload = averagePayload == 0 ? batchAverage : averagePayload * 0.75 + batchAverage * 0.25
        }
        gathered += messages
        see(queued: queued, justGathered: messages)
        guard armed, !wakeInFlight, belowThresholds(queued) else { return false }
        if let previous = lastWakeLength, queued > previous / 2 || queued == previous { return false }
        lastWakeLength = queued
        return true
    }

    /// A delivery (more in the queue than draining leaves) begins an episode; the queue may
    /// have stood at most at `queued + justGathered` when the fetcher looked after it.
    private mutating func see(queued: Int, justGathered: Int) {
        let now = gathered + queued
        defer { delivered = now }
        guard now > delivered else { return }
        peak = queued + justGathered
        lastWakeLength = nil
    }

    private var bytesPerMessage: Double { max(averagePayload, 1) }

    /// The fetcher stops at either threshold. Messages are counted exactly; the payload is
    /// estimated, so three quarters of that threshold counts.
    private func mayHaveStopped(_ queued: Int) -> Bool {
        queued >= minMessages || Double(queued) * bytesPerMessage * 4 >= Double(maxBytes) * 3
    }

    /// Below both thresholds, the payload with a tenth to spare: the fetcher would fetch if it
    /// looked.
    private func belowThresholds(_ queued: Int) -> Bool {
        queued < minMessages && Double(queued) * bytesPerMessage * 10 < Double(maxBytes) * 9
    }
}
