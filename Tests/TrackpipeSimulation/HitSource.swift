import HitGenerator
import TrackingDomain

/// What must become of an input message, from the generator's truth (never from the engine).
enum Fate: Sendable, Equatable {
    /// A tracked hit: counted in its window, unless it is dead-lettered `too_late`.
    case counted(GeneratedHit.Expected)
    /// Tracking off: neither counted nor dead-lettered.
    case filtered
    /// Dead-lettered with this reason.
    case rejected(String)
    /// No message: an offset of the input no consumer is handed (a transaction marker, a record
    /// compaction removed).
    case neverDelivered
}

/// The timed stream a schedule produces: realistic hits from `HitStream` (every shape, SDK
/// retries, bad messages, tracking off), shown continuously as the simulated clock moves and
/// handed out when they reach Kafka, with the simulator's own disturbances on top: hits held
/// back past the grace period or past the retention, and device clocks ahead of the Kafka
/// timestamp (within `--max-future-skew`, or beyond it).
struct HitSource {
    enum Kind: String, Sendable {
        case ordinary
        /// Arrives after its window was emitted, within the retention: a correction.
        case late
        /// Arrives a retention or more after its time: usually `too_late`.
        case beyondRetention
        /// Stamped ahead of its Kafka timestamp, within the allowed skew.
        case fastClock
        /// Stamped further ahead than the allowed skew: `future_timestamp`.
        case wrongClock
        /// Held back by a quiet pause.
        case postponed
    }

    struct Message {
        var key: [UInt8]?
        var value: [UInt8]
        /// nil: the moment it reaches Kafka.
        var kafkaTimestamp: Int64?
        var fate: Fate
        /// Whether the value carries its own `timestamp`; without one the Kafka timestamp is the
        /// event time (the contract), so the truth's time is fixed when it is produced.
        var hasOwnTime: Bool
        var produceAt: Int64
        var sequence: Int
        var kind: Kind
    }

    struct Settings {
        var seed: UInt64
        var start: Int64
        /// Messages a second.
        var rate: Double
        var deliveries: Int
        var badRate: Double
        var duplicateRate: Double
        var trackingOffEvery: Int
        var lateShare: Double
        var beyondShare: Double
        var fastClockShare: Double
        var wrongClockShare: Double
        var window: (size: Int64, grace: Int64, retention: Int64)
        var maxFutureSkew: Int64
    }

    /// Shown times each `HitStream` batch covers (ms).
    static let batchSpan: Int64 = 1_000

    let settings: Settings
    private var random: SplitMix
    private var nextBatch: Int64
    private var batchIndex: UInt64 = 0
    private var carry = 0.0
    private var recipients: UInt64 = 0
    /// Waiting messages, latest first, so that the due ones come off the end.
    private var pending: [Message] = []
    private var sequence = 0
    private(set) var generating = true

    init(_ settings: Settings) {
        self.settings = settings
        random = SplitMix(settings.seed ^ 0x5EED_0F_417)
        nextBatch = settings.start
    }

    var isEmpty: Bool { pending.isEmpty }

    /// The messages that reached Kafka by `now`, in arrival order.
    mutating func due(at now: Int64) -> [Message] {
        var added = false
        while generating, nextBatch <= now {
            generateBatch()
            added = true
        }
        if added { pending.sort { ($0.produceAt, $0.sequence) > ($1.produceAt, $1.sequence) } }
        var out: [Message] = []
        while let last = pending.last, last.produceAt <= now {
            out.append(last)
            pending.removeLast()
        }
        return out
    }

    /// Nobody sends anything from now until `end`: no notification is shown meanwhile, and
    /// what would have arrived arrives at `end`, stamped then.
    mutating func quiet(until end: Int64) {
        if generating, nextBatch < end {
            let skipped = (end - nextBatch + Self.batchSpan - 1) / Self.batchSpan
            nextBatch += skipped * Self.batchSpan
            batchIndex &+= UInt64(skipped)
        }
        for index in pending.indices where pending[index].produceAt < end {
            pending[index].produceAt = end
            if pending[index].kafkaTimestamp == nil { pending[index].kind = .postponed }
        }
        pending.sort { ($0.produceAt, $0.sequence) > ($1.produceAt, $1.sequence) }
    }

    /// No new notifications from now on; what is pending still arrives.
    mutating func stopGenerating() { generating = false }

    /// When the next pending message arrives; nil when none is.
    var nextArrival: Int64? { pending.last?.produceAt }

    private mutating func generateBatch() {
        let generatedAt = nextBatch
        carry += settings.rate * Double(Self.batchSpan) / 1_000
        let count = Int(carry.rounded(.down))
        carry -= Double(count)
        var mixer = SplitMix64(seed: settings.seed ^ (batchIndex &* 0xA24B_AED4_963E_E407))
        let config = HitStreamConfig(
            count: count, seed: mixer.next(), deliveries: settings.deliveries, start: generatedAt, span: Self.batchSpan,
            duplicateRate: settings.duplicateRate, lateRate: 0, badRate: settings.badRate, trackingOffEvery: settings.trackingOffEvery,
            staleCount: 0, deliverySeed: settings.seed, firstRecipient: recipients)
        let (hits, used) = HitStream(config).generateTimed()
        recipients &+= used
        batchIndex &+= 1
        nextBatch += Self.batchSpan
        for timed in hits {
            pending.append(disturb(timed, generatedAt: generatedAt))
        }
    }

    /// Gives a generated message its arrival and Kafka timestamp, with the scenario's
    /// disturbances.
    private mutating func disturb(_ timed: TimedHit, generatedAt: Int64) -> Message {
        let hit = timed.hit
        let fate: Fate =
            switch hit.truth {
            case .counted(let expected), .stale(let expected): .counted(expected)
            case .trackingOff: .filtered
            case .rejected(let reason): .rejected(reason.rawValue)
            }
        var message = Message(
            key: hit.key, value: hit.value, kafkaTimestamp: nil, fate: fate, hasOwnTime: Self.hasOwnTime(hit.value),
            produceAt: timed.arrival, sequence: sequence, kind: .ordinary)
        sequence += 1
        let window = settings.window
        // The same draws for every message, whatever the shares: switching a disturbance off
        // leaves the others where they were.
        let roll = Double(random.next() >> 11) / Double(1 << 53)
        let fastSkew = random.int(1...max(1, settings.maxFutureSkew))
        let wrongSkew = settings.maxFutureSkew + random.int(1...max(1, settings.maxFutureSkew))
        let earliest = window.grace + window.size / 2
        let lateDelay = random.int(earliest...max(earliest, min(window.retention, window.grace + 4 * window.size)))
        let beyondDelay = random.int(window.retention + window.size...window.retention + 3 * window.size)
        var threshold = settings.fastClockShare
        if case .counted(let expected) = fate, message.hasOwnTime, roll < threshold {
            // The device clock runs ahead: stamped up to the allowed skew after its Kafka time.
            let skew = fastSkew
            message.kafkaTimestamp = expected.eventTime - skew
            message.produceAt = max(expected.eventTime - skew, generatedAt)
            message.kind = .fastClock
            return message
        }
        threshold += settings.wrongClockShare
        if case .counted(let expected) = fate, message.hasOwnTime, roll < threshold {
            let skew = wrongSkew
            message.kafkaTimestamp = expected.eventTime - skew
            message.produceAt = max(expected.eventTime - skew, generatedAt)
            message.fate = .rejected("future_timestamp")
            message.kind = .wrongClock
            return message
        }
        threshold += settings.lateShare
        if roll < threshold {
            // After its window's grace, within the retention (and a few windows, so that a long
            // retention does not keep the schedule waiting): its window is corrected.
            message.produceAt += lateDelay
            message.kind = .late
            return message
        }
        threshold += settings.beyondShare
        if roll < threshold {
            message.produceAt += beyondDelay
            message.kind = .beyondRetention
        }
        return message
    }

    /// Whether a message names its own time: every shape but the iOS local notification does.
    static func hasOwnTime(_ value: [UInt8]) -> Bool {
        let needle = Array("\"timestamp\"".utf8)
        guard value.count >= needle.count else { return false }
        for start in 0...(value.count - needle.count) where value[start] == needle[0] {
            if value[start..<start + needle.count].elementsEqual(needle) { return true }
        }
        return false
    }
}
