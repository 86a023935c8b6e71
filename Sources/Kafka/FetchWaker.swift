import CRdKafka
import Synchronization

import Foundation

/// Wakes a consumer's broker threads so that librdkafka 2.0.2's fetcher looks again at a queue
/// that has drained (see `FetchWakePolicy` for when and why).
///
/// librdkafka offers no call that just wakes a broker thread, so the waker asks each leader
/// of the assigned partitions for their end offsets (`rd_kafka_offsets_for_times`, one small
/// ListOffsets request per broker): queuing the request wakes the broker's thread, which then
/// decides afresh which partitions to fetch. The answer is thrown away. The request blocks
/// until answered, so it runs on a thread of the waker's own, one at a time, never on the
/// polling thread.
///
/// The thread is a plain POSIX thread signalled through a condition variable: the polling
/// thread makes no Dispatch call for it. (Enqueuing Dispatch work from a runner thread that also
/// runs `concurrentPerform` made libdispatch free a cached continuation twice when that thread
/// exited; found by AddressSanitizer.)
final class FetchWaker: Sendable {
    private let state = State()
    private let thread: ThreadHandle

    /// What the polling thread and the waker's thread share.
    private final class State: Sendable {
        let signal = WakeSignal()
        let wakes = Atomic<Int>(0)
        let inFlight = Atomic<Bool>(false)
    }

    /// A consumer's native handle, used only for librdkafka's thread-safe calls here.
    struct NativeClient: @unchecked Sendable {
        // @unchecked: librdkafka's client handle is thread-safe for the calls made with it
        // (assignment, offsets for times), and the consumer stops the waker (`stop`, which
        // joins its thread) before it destroys the handle.
        let handle: OpaquePointer
    }

    /// - Parameter timeoutMilliseconds: how long a wake waits for its answer: a broker that
    ///   does not answer delays only the next wake, never the consumer.
    init(client: OpaquePointer, timeoutMilliseconds: Int32 = 1_000) {
        let native = NativeClient(handle: client), state = self.state
        thread = ThreadHandle.start {
            while state.signal.next() {
                Self.askForEndOffsets(native.handle, timeoutMilliseconds: timeoutMilliseconds)
                state.wakes.add(1, ordering: .relaxed)
                state.inFlight.store(false, ordering: .releasing)
            }
        }
    }

    /// Whether the last wake is still waiting for its answer.
    var isWaking: Bool { state.inFlight.load(ordering: .acquiring) }

    /// Wakes performed so far (the consumer logs it when it closes).
    var count: Int { state.wakes.load(ordering: .relaxed) }

    /// Starts a wake unless one is in flight or the waker was stopped.
    func wake() {
        guard !state.inFlight.exchange(true, ordering: .acquiringAndReleasing) else { return }
        if !state.signal.post() { state.inFlight.store(false, ordering: .releasing) }
    }

    /// No wake starts after this; returns once the thread has ended (a wake in flight answered
    /// or timed out). Idempotent.
    func stop() {
        state.signal.stop()
        thread.join()
    }

    private static func askForEndOffsets(_ client: OpaquePointer, timeoutMilliseconds: Int32) {
        var assigned: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
        let err = rd_kafka_assignment(client, &assigned)
        guard let list = assigned else { return }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR, list.pointee.cnt > 0 else { return }
        for index in 0..<Int(list.pointee.cnt) { list.pointee.elems[index].offset = Int64(RD_KAFKA_OFFSET_END) }
        _ = rd_kafka_offsets_for_times(client, list, timeoutMilliseconds)
    }
}

/// One pending wake at most, or the end: a mutex and a condition variable.
private final class WakeSignal: @unchecked Sendable {
    // @unchecked: `pending` and `stopped` are read and written only with `mutex` held.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var pending = false
    private var stopped = false

    init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    /// Asks for a wake; false once stopped.
    func post() -> Bool {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        guard !stopped else { return false }
        pending = true
        pthread_cond_signal(condition)
        return true
    }

    func stop() {
        pthread_mutex_lock(mutex)
        stopped = true
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
    }

    /// Waits for the next wake: true to perform it, false when stopped.
    func next() -> Bool {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while !pending && !stopped { pthread_cond_wait(condition, mutex) }
        pending = false
        return !stopped
    }
}

/// A POSIX thread running one closure, joined once.
private final class ThreadHandle: Sendable {
    private let thread: Mutex<pthread_t?>

    private init(_ thread: pthread_t) { self.thread = Mutex(thread) }

    static func start(_ body: @escaping @Sendable () -> Void) -> ThreadHandle {
        final class Box { let body: @Sendable () -> Void; init(_ body: @escaping @Sendable () -> Void) { self.body = body } }
        let context = Unmanaged.passRetained(Box(body)).toOpaque()
        var thread = pthread_t()
        let result = pthread_create(&thread, nil, { context in
            guard let context else { preconditionFailure("pthread_create hands its start routine the argument it was given") }
            let box = Unmanaged<Box>.fromOpaque(context).takeRetainedValue()
            box.body()
            return nil
        }, context)
        precondition(result == 0, "cannot start the fetch waker's thread (pthread_create: \(result))")
        return ThreadHandle(thread)
    }

    func join() {
        guard let thread = thread.withLock({ taken -> pthread_t? in defer { taken = nil }; return taken }) else { return }
        pthread_join(thread, nil)
    }
}
