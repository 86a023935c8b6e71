import Runner
import Foundation
import Kafka
import Logging
import Synchronization

/// Asks the cluster every few seconds whether it answers, on a thread of its own, so that
/// `/health` and the log say so when no broker has been reachable for a while. librdkafka
/// retries for ever and the consume loop keeps turning meanwhile, so nothing else would tell.
final class BrokerWatch: Sendable {
    private let admin: TopicAdmin
    private let brokers: String
    private let logger: Logger
    private let interval: Int64
    private let clock: @Sendable () -> Int64
    private let lastReachable = Atomic<Int64>(0)
    private let started = Atomic<Int64>(0)
    private let stopped = Atomic<Bool>(false)
    private let done = DispatchSemaphore(value: 0)
    private let onChange: @Sendable (Bool) -> Void

    init(
        admin: TopicAdmin, brokers: String, logger: Logger, interval: Int64 = 5_000,
        clock: @escaping @Sendable () -> Int64 = wallClockMillis, onChange: @escaping @Sendable (Bool) -> Void = { _ in }
    ) {
        self.admin = admin
        self.brokers = brokers
        self.logger = logger
        self.interval = interval
        self.clock = clock
        self.onChange = onChange
    }

    func start() {
        let now = clock()
        started.store(now, ordering: .relaxed)
        lastReachable.store(now, ordering: .relaxed)
        let thread = Thread { [self] in
            var lastWarning = Int64.min / 2
            var reachable = true
            while !stopped.load(ordering: .relaxed) {
                let ok = admin.ping(timeoutMilliseconds: Int32(min(interval, 3_000)))
                let now = clock()
                if ok { lastReachable.store(now, ordering: .relaxed) }
                if ok != reachable {
                    reachable = ok
                    onChange(ok)
                    if ok { logger.notice("a Kafka broker at \(brokers) answers again") }
                }
                let down = now - lastReachable.load(ordering: .relaxed)
                if !ok && down >= interval && now - lastWarning >= 30_000 {
                    lastWarning = now
                    logger.warning(
                        "no Kafka broker at \(brokers) has answered for \(down / 1000) s: check --brokers, the network and the brokers' advertised listeners; the worker keeps retrying and commits nothing past what was delivered")
                }
                if done.wait(timeout: .now() + .milliseconds(Int(interval))) == .success { break }
            }
        }
        thread.name = "trackpipe.broker-watch"
        thread.start()
    }

    func stop() {
        stopped.store(true, ordering: .relaxed)
        done.signal()
    }

    /// Why the worker is not healthy, when no broker has answered for longer than `limit`.
    func problem(limit: Int64) -> String? {
        guard started.load(ordering: .relaxed) > 0 else { return nil }
        let down = clock() - lastReachable.load(ordering: .relaxed)
        return down > limit ? "no Kafka broker at \(brokers) has answered for \(down / 1000) s" : nil
    }
}
