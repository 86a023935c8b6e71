import HitGenerator
import Testing
import TrackingDomain
@testable import Windowing

/// What an engine that keeps a changelog hands out: per window only what changed, and enough
/// that every change applied in turn rebuilds the window.
@Suite("state changes")
struct StateChangesTests {
    static let config = WindowConfig(size: 60_000, grace: 5_000, retention: 300_000, idleTimeout: 3_600_000)

    /// A window as its changes rebuild it.
    struct Rebuilt: Equatable {
        var counters = WindowCounters()
        var countedThrough: Int64 = .min
        var emittedRevision: UInt32 = 0
        var broadlogs: [BroadlogID: UInt8] = [:]
    }

    /// Applies one export, checking that each broadlog it hands out is new or shows a new action.
    static func apply(_ changes: StateChanges, to rebuilt: inout [WindowKey: Rebuilt]) {
        for change in changes.windows {
            var window = rebuilt[change.window] ?? Rebuilt()
            var seen: Set<BroadlogID> = []
            for broadlog in change.broadlogs {
                #expect(seen.insert(broadlog.id).inserted, "\(broadlog.id) handed out twice in one export")
                let before = window.broadlogs[broadlog.id, default: 0]
                #expect(broadlog.actions & before == before && broadlog.actions != before, "\(broadlog.id) handed out unchanged: \(before) then \(broadlog.actions)")
                window.broadlogs[broadlog.id] = broadlog.actions
            }
            #expect(change.broadlogCount == window.broadlogs.count)
            window.counters = change.counters
            window.countedThrough = change.countedThrough
            window.emittedRevision = change.emittedRevision
            rebuilt[change.window] = window
        }
        for key in changes.evicted { rebuilt[key] = nil }
    }

    static func held(_ engine: WindowEngine, _ keys: some Sequence<WindowKey>) -> [WindowKey: Rebuilt] {
        var held: [WindowKey: Rebuilt] = [:]
        for state in engine.states(of: Array(keys)) {
            held[state.key] = Rebuilt(
                counters: state.counters, countedThrough: state.countedThrough, emittedRevision: state.emittedRevision,
                broadlogs: Dictionary(state.broadlogs.map { ($0.id, $0.actions) }, uniquingKeysWith: |))
        }
        return held
    }

    @Test("every change handed out, applied in turn, rebuilds each window: the union of their broadlogs, the latest counters, marks and revision; no broadlog is handed out unless it changed", arguments: [1, 2, 3] as [UInt64])
    func changesRebuildTheWindows(seed: UInt64) {
        // One partition: a changelog's engine is one partition's (positions compare within it).
        let stream = RandomStream.make(seed: seed, hits: 4_000, partitions: 1, deliveries: 5, broadlogs: 400, stepMs: 90)
        var engine = WindowEngine(config: Self.config, exportsChanges: true)
        engine.assign(partitions: [0], now: 0)
        var rebuilt: [WindowKey: Rebuilt] = [:]
        var evicted = 0
        for (index, (batch, now)) in zip(stream.batches, stream.clock).enumerated() {
            _ = engine.process(batch, now: now)
            if index % 4 == 3 {
                let changes = engine.exportChanges()
                evicted += changes.evicted.count
                Self.apply(changes, to: &rebuilt)
            }
        }
        _ = engine.flushAll()
        Self.apply(engine.exportChanges(), to: &rebuilt)
        #expect(evicted > 0, "windows were evicted along the way")
        #expect(!rebuilt.isEmpty)
        #expect(Self.held(engine, rebuilt.keys) == rebuilt)
        #expect(engine.exportChanges().isEmpty, "nothing changed since")
    }

    @Test("an evicted window's final change completes it: its counters and broadlogs as it was last emitted")
    func evictedWindowsHandOutTheirFinalChange() {
        var engine = WindowEngine(config: Self.config, exportsChanges: true)
        engine.assign(partitions: [0], now: 0)
        let base: Int64 = 1_795_300_020_000 - 1_795_300_020_000 % 60_000
        _ = engine.process([Hits.input("d1", "a", .impression, at: base + 1_000, offset: 0)], now: 1)
        var rebuilt: [WindowKey: Rebuilt] = [:]
        Self.apply(engine.exportChanges(), to: &rebuilt)
        _ = engine.process([Hits.input("d1", "a", .click, at: base + 2_000, offset: 1), Hits.input("d1", "b", .open, at: base + 3_000, offset: 2)], now: 2)
        // Event time far past the window's end plus retention: evicted, with its last hits.
        let output = engine.process([Hits.input("d2", "x", .impression, at: base + 3_600_000, offset: 3)], now: 3)
        #expect(output.emitted.contains { $0.deliveryId == "d1" && $0.revision == 3 })
        let changes = engine.exportChanges()
        let key = WindowKey(size: 60_000, windowStart: base, deliveryId: "d1")
        #expect(changes.evicted.contains(key))
        let final = changes.windows.first { $0.window == key }
        #expect(final?.broadlogs.map(\.id).sorted() == ["a", "b"] && final?.emittedRevision == 3 && final?.counters.hitCount == 3)
        #expect(final?.broadlogs.first { $0.id == "a" }?.actions == 0b011)
    }

    @Test("windows put back from a changelog are not handed out again: nothing of them changed")
    func restoredWindowsCarryNoChanges() {
        var engine = WindowEngine(config: Self.config, exportsChanges: true)
        let state = WindowState(
            size: 60_000, deliveryId: "d1", windowStart: 1_795_300_020_000 - 1_795_300_020_000 % 60_000, counters: WindowCounters(),
            broadlogs: (0..<100).map { BroadlogActions(id: BroadlogID("b\($0)"), actions: 1) }, countedThrough: 7, emittedRevision: 0)
        engine.restore([state])
        engine.finishRestore()
        #expect(engine.exportChanges().isEmpty)
        #expect(engine.states(of: [state.key]).first?.broadlogs.count == 100)
    }
}
