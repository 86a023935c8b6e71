/// An endless stream whose event times follow a clock, for `trackpipe generate --rate`.
///
/// A message is handed out only once the clock has reached its arrival time, and arrival is
/// never before event time, so no message carries an event time in the future: a worker's
/// watermark then tracks the clock instead of running ahead of it. Notifications are shown
/// continuously (batches of `tick` ms, each a `HitStream` with its own seed but the same
/// delivery ids), and their interactions arrive when they happen: the stream is in order
/// apart from the realistic delays, duplicates and late hits of `HitStream`.
///
/// Joining a world already running: at the start, notifications shown in the few minutes
/// before are generated too and only what arrives from the start on is handed out, so the
/// stream has its full rate and mix from the first second (instead of impressions alone for a
/// minute while clicks build up).
public struct LiveHitStream: Sendable {
    public let rate: Double
    public let seed: UInt64
    public let deliveries: Int
    /// The moment the stream joins (epoch ms): nothing arriving before it is handed out.
    public let start: Int64
    /// Shown times each batch covers (ms); long enough for about 50 messages a batch, since
    /// `HitStream` cuts the last notification of a batch short (a batch of one message would
    /// almost always be an impression).
    public let tick: Int64

    private let firstTick: Int64
    private var nextTick: Int64
    private var nextRecipient: UInt64 = 0
    /// Waiting messages, latest arrival first, so that the due ones come off the end.
    private var pending: [(arrival: Int64, sequence: Int64, hit: GeneratedHit)] = []
    private var sequence: Int64 = 0

    /// - Parameter rate: messages a second, more than 0.
    public init(rate: Double, seed: UInt64, deliveries: Int, start: Int64) {
        precondition(rate > 0 && rate.isFinite, "rate must be a positive number")
        self.rate = rate
        self.seed = seed
        self.deliveries = max(1, deliveries)
        self.start = start
        tick = Int64(min(max((50_000 / rate).rounded(.up), 200), 60_000))
        // Far enough back that every message arriving after `start` is generated.
        let reach = HitStream.interactionReach + HitStream.arrivalReach
        firstTick = -((reach + tick - 1) / tick) - 1
        nextTick = firstTick
    }

    /// The messages arrived by `now` (epoch ms) and not handed out before, in arrival order.
    public mutating func due(at now: Int64) -> [GeneratedHit] {
        var added = false
        while start + nextTick * tick <= now {
            let config = batchConfig(count: batchSize(nextTick), tick: nextTick)
            let (hits, recipients) = HitStream(config).generateTimed()
            nextRecipient &+= recipients
            for timed in hits where timed.arrival >= start {
                pending.append((timed.arrival, sequence, timed.hit))
                sequence += 1
            }
            nextTick += 1
            added = true
        }
        if added { pending.sort { ($0.arrival, $0.sequence) > ($1.arrival, $1.sequence) } }
        var out: [GeneratedHit] = []
        while let last = pending.last, last.arrival <= now {
            out.append(last.hit)
            pending.removeLast()
        }
        return out
    }

    /// When `due` will next have something (epoch ms): the next arrival, or the start of the
    /// next batch, whose first impressions may arrive at once.
    public var nextDue: Int64 {
        let nextBatch = start + nextTick * tick
        return pending.last.map { min($0.arrival, nextBatch) } ?? nextBatch
    }

    /// Messages of batch `index`: cumulative rounding, so that fractional rates add up.
    private func batchSize(_ index: Int64) -> Int {
        let perTick = rate * Double(tick) / 1_000
        return Int((perTick * Double(index - firstTick + 1)).rounded(.down) - (perTick * Double(index - firstTick)).rounded(.down))
    }

    private func batchConfig(count: Int, tick index: Int64) -> HitStreamConfig {
        var mixer = SplitMix64(seed: seed ^ (UInt64(bitPattern: index) &* 0xA24B_AED4_963E_E407))
        return HitStreamConfig(
            count: count, seed: mixer.next(), deliveries: deliveries, start: start + index * tick, span: tick,
            deliverySeed: seed, firstRecipient: nextRecipient)
    }
}
