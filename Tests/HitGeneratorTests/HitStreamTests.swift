@testable import HitGenerator
import Testing
import TrackingDomain

@Suite("Generated hit streams")
struct HitStreamTests {
    let stream = HitStream(HitStreamConfig(count: 20_000, seed: 42, deliveries: 12, staleCount: 5))

    @Test("the same seed gives the same stream, byte for byte; another seed does not")
    func reproducible() {
        let again = HitStream(stream.config).generate()
        let first = stream.generate()
        #expect(first.map(\.value) == again.map(\.value))
        #expect(first.map(\.key) == again.map(\.key))
        var other = stream.config
        other.seed = 43
        #expect(HitStream(other).generate().map(\.value) != first.map(\.value))
    }

    @Test("exactly --count messages, stale hits last")
    func exactCount() {
        let hits = stream.generate()
        #expect(hits.count == 20_000)
        #expect(hits.suffix(5).allSatisfy { if case .stale = $0.truth { true } else { false } })
        #expect(hits.dropLast(5).allSatisfy { if case .stale = $0.truth { false } else { true } })
    }

    @Test("a realistic mix: every shape, duplicates, tracking off, every bad-message reason, ~230 bytes a hit")
    func realisticMix() {
        let hits = stream.generate()
        let normalizer = Normalizer()
        var shapes = Set<HitShape>()
        var reasons = Set<RejectReason>()
        var off = 0
        var values = Set<[UInt8]>()
        var duplicates = 0
        for hit in hits {
            if !values.insert(hit.value).inserted { duplicates += 1 }
            if case .accepted(let event) = normalizer.normalize(hit.value, kafkaTimestamp: hit.kafkaTimestamp) {
                shapes.insert(event.shape)
            }
            switch hit.truth {
            case .trackingOff: off += 1
            case .rejected(let reason): reasons.insert(reason)
            default: break
            }
        }
        #expect(shapes == Set(HitShape.allCases))
        #expect(duplicates > 500)
        #expect(off > 1000)
        #expect(reasons.count == 9)
        let average = Double(hits.map(\.value.count).reduce(0, +)) / Double(hits.count)
        #expect((150...300).contains(average))
    }

    @Test("the normalizer's verdict on every generated message agrees with the generator's own truth")
    func normalizerAgreesWithTruth() {
        let normalizer = Normalizer()
        var disagreements: [String] = []
        for hit in stream.generate() {
            let verdict = normalizer.normalize(hit.value, kafkaTimestamp: hit.kafkaTimestamp)
            let text = String(decoding: hit.value, as: UTF8.self)
            switch (hit.truth, verdict) {
            case (.counted(let expected), .accepted(let event)), (.stale(let expected), .accepted(let event)):
                if event.deliveryId != DeliveryID(expected.deliveryId) || event.broadlogId != BroadlogID(expected.broadlogId)
                    || event.action != expected.action || event.channel != expected.channel
                    || event.platform != expected.platform || event.eventTime != expected.eventTime
                {
                    disagreements.append("\(text) -> \(event) expected \(expected)")
                }
            case (.trackingOff, .filtered(.trackingOff)):
                break
            case (.rejected(let reason), .rejected(let got, _)) where reason == got:
                break
            default:
                disagreements.append("\(text): truth \(hit.truth), verdict \(verdict)")
            }
        }
        #expect(disagreements.isEmpty, "\(disagreements.prefix(5).joined(separator: "\n"))")
    }

    @Test("timed batches: the same hits in arrival order, none arriving before its event time or past the reaches")
    func timedBatches() {
        var config = stream.config
        config.staleCount = 0
        let plain = HitStream(config).generate()
        let timed = HitStream(config).generateTimed().hits
        #expect(timed.map(\.hit.value) == plain.map(\.value))
        #expect(zip(timed, timed.dropFirst()).allSatisfy { $0.arrival <= $1.arrival })
        for item in timed {
            #expect(item.arrival >= item.hit.kafkaTimestamp)
            #expect(item.arrival - item.hit.kafkaTimestamp <= HitStream.arrivalReach)
            #expect(item.hit.kafkaTimestamp >= config.start)
            #expect(item.hit.kafkaTimestamp < config.start + config.span + HitStream.interactionReach)
        }
    }

    @Test("successive batches of a live stream keep the deliveries and use new recipients")
    func successiveBatches() {
        let first = HitStream(HitStreamConfig(count: 200, seed: 7, deliveries: 5, deliverySeed: 1))
        let (firstHits, recipients) = first.generateTimed()
        let second = HitStream(HitStreamConfig(count: 200, seed: 8, deliveries: 5, deliverySeed: 1, firstRecipient: recipients))
        #expect(first.deliveryIds == second.deliveryIds)
        #expect(first.deliveryIds != HitStream(HitStreamConfig(count: 200, seed: 7, deliveries: 5)).deliveryIds)
        func recipientsOf(_ hits: [TimedHit]) -> Set<String> {
            Set(hits.compactMap { if case .counted(let expected) = $0.hit.truth { expected.broadlogId } else { nil } })
        }
        let firstRecipients = recipientsOf(firstHits), secondRecipients = recipientsOf(second.generateTimed().hits)
        #expect(!firstRecipients.isEmpty && !secondRecipients.isEmpty)
        #expect(firstRecipients.isDisjoint(with: secondRecipients))
    }

    @Test("a live stream hands out each message once the clock reaches it, at the rate, in order, with the full mix")
    func liveStream() {
        let start: Int64 = 1_795_341_600_000
        var stream = LiveHitStream(rate: 200, seed: 5, deliveries: 10, start: start)
        var hits: [(handedOut: Int64, hit: GeneratedHit)] = []
        var now = start
        while now < start + 60_000 {
            hits += stream.due(at: now).map { (now, $0) }
            #expect(stream.nextDue > now)
            now += 100
        }
        // The full rate from the first second, since the world was already running.
        let firstTen = hits.filter { $0.handedOut < start + 10_000 }.count
        #expect((1_700...2_300).contains(firstTen))
        #expect((10_800...13_200).contains(hits.count))
        #expect(hits.allSatisfy { $0.hit.kafkaTimestamp <= $0.handedOut })
        // In order apart from the delays: nearly every message is at most 2 s old.
        let fresh = hits.filter { $0.handedOut - $0.hit.kafkaTimestamp <= 2_100 }.count
        #expect(Double(fresh) > 0.9 * Double(hits.count))
        #expect(hits.allSatisfy { $0.handedOut - $0.hit.kafkaTimestamp <= HitStream.arrivalReach + 100 })

        var actions: [HitAction: Int] = [:], deliveries = Set<String>(), recipients = Set<String>()
        var off = 0, bad = 0, counted = 0
        for (_, hit) in hits {
            switch hit.truth {
            case .counted(let expected):
                counted += 1
                actions[expected.action, default: 0] += 1
                deliveries.insert(expected.deliveryId)
                recipients.insert(expected.broadlogId)
            case .trackingOff: off += 1
            case .rejected: bad += 1
            case .stale: Issue.record("a live stream has no stale hits")
            }
        }
        // Every batch draws from the same ten deliveries: a minute of the stream hits most of them.
        #expect((8...10).contains(deliveries.count))
        #expect((actions[.click] ?? 0) > (actions[.impression] ?? 0) / 3, "clicks follow impressions from the start")
        #expect((actions[.open] ?? 0) > 0)
        #expect(off > 0 && bad > 0)
        #expect(recipients.count > counted / 4, "recipients are not reused from batch to batch")

        var again = LiveHitStream(rate: 200, seed: 5, deliveries: 10, start: start)
        #expect(again.due(at: start + 5_000).map(\.value) == hits.filter { $0.handedOut <= start + 5_000 }.map(\.hit.value))
    }
}
