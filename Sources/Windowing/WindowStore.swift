import TrackingDomain

/// The single-threaded windowing core: counts hits into (window, delivery) state, emits,
/// re-emits corrections and evicts, driven by a watermark and eviction horizon it is given.
///
/// It never decides the watermark itself and never reads a clock, so it is deterministic and
/// the same code serves every shard of the engine, and tests.
struct WindowStore: Sendable {
    /// The size this store counts in: an engine has a store per size (and shard).
    let sized: WindowSize
    let retention: Int64
    /// Whether the store keeps what a changelog needs: how far each window has counted (so that
    /// a restored window skips reread hits it already holds), what was emitted, and what
    /// changed since the state was last handed out (see `WindowEngine.init`).
    let exportsChanges: Bool
    /// Windows evicted since the state was last handed out.
    private var evictedSinceExport: [WindowKey] = []
    /// The final change of windows evicted since the state was last handed out, where they moved on.
    private var finalsSinceExport: [WindowChange] = []
    /// Alive window starts, ascending.
    private(set) var slots: [WindowSlot] = []
    /// Index of the slot the previous hit went to: hits are mostly in order, so usually the
    /// next one goes there too.
    private var cursor = 0
    /// Windows with end + retention <= horizon are gone; hits for them are too late.
    private(set) var horizon: Int64 = .min
    private(set) var watermark: Int64?
    private(set) var entries = 0

    init(window: WindowSize, retention: Int64, exportsChanges: Bool = false) {
        self.sized = window
        self.retention = retention
        self.exportsChanges = exportsChanges
    }

    // MARK: Ingest

    /// Counts one hit, or classifies it as reread-final or too late. The watermark and
    /// horizon are those settled before the batch: the engine moves them at batch boundaries.
    ///
    /// The hit is read where the batch holds it, a field at a time: taken as a value, it was
    /// copied and destroyed through its value witnesses twice per hit (its ids' references
    /// retained and released), about 180 instructions a hit (callgrind, one stage).
    @inline(__always)
    mutating func ingest(_ input: UnsafePointer<WindowInput>, restore: [Int32: RestorePoint], into out: inout StoreOutput) {
        out.hitsProcessed += 1
        guard let time = input.pointee.event.eventTime else {
            out.tooLate.append(LateHit(
                event: input.pointee.event, partition: input.pointee.partition, offset: input.pointee.offset, tag: input.pointee.tag,
                detail: "hit has no event time, so it belongs to no window"))
            return
        }
        let start = EventTimeMath.windowStart(of: time, size: sized.size)
        let end = EventTimeMath.add(start, sized.size)
        let expiry = EventTimeMath.expiry(ofWindowEndingAt: end, retention: retention)
        if !restore.isEmpty, let point = restore[input.pointee.partition] {
            if input.pointee.offset < point.processedMark {
                if let counted = point.counted {
                    // The state read back settles every verdict of the reread interval: a hit its
                    // window holds was counted, any other was judged too late (a window takes every
                    // hit until it is evicted, and the horizon never moves back), whatever the
                    // horizon in force now. Its dead letter may have been lost with the previous owner.
                    if let held = counted[key(start, input.pointee.event.deliveryId)], input.pointee.position <= held {
                        out.rereadFinal.append(HitPlace(input.pointee))
                    } else {
                        out.tooLate.append(LateHit(
                            event: input.pointee.event, partition: input.pointee.partition, offset: input.pointee.offset,
                            tag: input.pointee.tag,
                            detail: LateHit.detail(
                                eventTime: time, windowStart: start, windowEnd: end, retention: retention,
                                horizon: Swift.max(horizon, point.evictedBefore))))
                    }
                    return
                }
                if expiry <= point.evictedBefore {
                    out.rereadFinal.append(HitPlace(input.pointee))
                    return
                }
            } else if input.pointee.offset < point.countedMark,
                let held = point.counted?[key(start, input.pointee.event.deliveryId)], input.pointee.position <= held
            {
                // Past the task record a crash cut off, a window whose head was written holds this
                // hit: counted, even if its window has expired since.
                out.rereadFinal.append(HitPlace(input.pointee))
                return
            }
        }
        if expiry <= horizon {
            out.tooLate.append(LateHit(
                event: input.pointee.event, partition: input.pointee.partition, offset: input.pointee.offset, tag: input.pointee.tag,
                detail: LateHit.detail(eventTime: time, windowStart: start, windowEnd: end, retention: retention, horizon: horizon)))
            return
        }
        let index = slotIndex(start: start, end: end)
        let change = slots[index].deliveries[DeliveryKey(input.pointee.event.deliveryId), default: DeliveryWindow()].record(
            broadlogId: input.pointee.event.broadlogId, action: input.pointee.event.action,
            channel: input.pointee.event.channel, platform: input.pointee.event.platform,
            trackDirty: slots[index].emitted, position: input.pointee.position, exportsChanges: exportsChanges)
        if change.alreadyCounted {
            // A restored window that holds this reread hit already.
            out.rereadFinal.append(HitPlace(input.pointee))
            return
        }
        if change.becameStateChanged { slots[index].stateChangedIds.append(input.pointee.event.deliveryId) }
        if change.newEntry {
            slots[index].entries += 1
            entries += 1
        }
        if change.becameDirty {
            slots[index].dirtyIds.append(input.pointee.event.deliveryId)
        }
        out.hitsCounted += 1
    }

    /// The key of this store's window of `start` for `deliveryId`.
    private func key(_ start: Int64, _ deliveryId: DeliveryID) -> WindowKey {
        WindowKey(size: sized.size, windowStart: start, deliveryId: deliveryId)
    }

    @inline(__always)
    private mutating func slotIndex(start: Int64, end: Int64) -> Int {
        if cursor < slots.count && slots[cursor].start == start { return cursor }
        var low = 0
        var high = slots.count
        while low < high {
            let mid = (low + high) / 2
            if slots[mid].start < start { low = mid + 1 } else { high = mid }
        }
        if low == slots.count || slots[low].start != start {
            slots.insert(WindowSlot(start: start, end: end), at: low)
        }
        cursor = low
        return low
    }

    // MARK: Settle

    /// Applies a new watermark and horizon: evicts windows past the horizon (emitting whatever
    /// they still owe first), emits windows whose grace has passed, and re-emits corrected ones.
    mutating func settle(watermark newWatermark: Int64?, horizon newHorizon: Int64, into out: inout StoreOutput) {
        if let newWatermark { watermark = Swift.max(watermark ?? newWatermark, newWatermark) }
        horizon = Swift.max(horizon, newHorizon)

        var evicted = 0
        while evicted < slots.count, EventTimeMath.expiry(ofWindowEndingAt: slots[evicted].end, retention: retention) <= horizon {
            let slot = slots[evicted]
            let ripe = watermark.map { EventTimeMath.add(slot.end, sized.grace) <= $0 } ?? false
            if !slot.emitted {
                emitAll(of: slot, into: &out)
                out.windowsClosed += slot.deliveries.count
                if !ripe { out.windowsEmittedEarly += slot.deliveries.count }
            } else {
                emitDirty(of: slot, into: &out)
            }
            out.windowsEvicted += slot.deliveries.count
            if exportsChanges { noteEvicted(slot) }
            out.entriesFreed += slot.entries
            entries -= slot.entries
            out.oldestEvictedStart = Swift.min(out.oldestEvictedStart ?? slot.start, slot.start)
            out.newestEvictedStart = Swift.max(out.newestEvictedStart ?? slot.start, slot.start)
            evicted += 1
        }
        if evicted > 0 {
            slots.removeFirst(evicted)
            cursor = 0
        }

        // With final emission, a window goes out only as it is evicted above (or as a bounded
        // run ends, `flushAll`).
        for index in slots.indices where sized.emission == .changes {
            if slots[index].emitted {
                if !slots[index].dirtyIds.isEmpty { reemitDirty(at: index, into: &out) }
            } else if let watermark, EventTimeMath.add(slots[index].end, sized.grace) <= watermark {
                firstEmission(at: index, into: &out)
            }
        }
        out.entries = entries
    }

    /// Emits every window now, as a bounded run ends; windows stay retained, so anything that
    /// still arrives becomes a correction.
    mutating func flushAll(into out: inout StoreOutput) {
        for index in slots.indices {
            if slots[index].emitted {
                if !slots[index].dirtyIds.isEmpty { reemitDirty(at: index, into: &out) }
            } else {
                firstEmission(at: index, into: &out)
            }
        }
        out.entries = entries
    }

    private mutating func firstEmission(at index: Int, into out: inout StoreOutput) {
        let start = slots[index].start
        let end = slots[index].end
        var position = slots[index].deliveries.startIndex
        while position != slots[index].deliveries.endIndex {
            slots[index].deliveries.values[position].dirty = false
            noteEmitted(slot: index, at: position)
            let (delivery, window) = slots[index].deliveries[position]
            out.emitted.append(window.aggregate(deliveryId: delivery.id, start: start, end: end))
            slots[index].deliveries.formIndex(after: &position)
        }
        out.windowsClosed += slots[index].deliveries.count
        slots[index].emitted = true
        slots[index].dirtyIds.removeAll()
    }

    private mutating func reemitDirty(at index: Int, into out: inout StoreOutput) {
        let start = slots[index].start
        let end = slots[index].end
        for id in slots[index].dirtyIds {
            guard let position = slots[index].deliveries.index(forKey: DeliveryKey(id)) else { continue }
            slots[index].deliveries.values[position].dirty = false
            noteEmitted(slot: index, at: position)
            out.emitted.append(slots[index].deliveries.values[position].aggregate(deliveryId: id, start: start, end: end))
        }
        slots[index].dirtyIds.removeAll()
    }

    /// The window at `position` is being emitted: remember its revision, a change of state.
    @inline(__always)
    private mutating func noteEmitted(slot index: Int, at position: Dictionary<DeliveryKey, DeliveryWindow>.Index) {
        guard exportsChanges else { return }
        let revision = UInt32(truncatingIfNeeded: slots[index].deliveries.values[position].hitCount)
        slots[index].deliveries.values[position].emittedRevision = revision
        if !slots[index].deliveries.values[position].stateChanged {
            slots[index].deliveries.values[position].stateChanged = true
            slots[index].stateChangedIds.append(slots[index].deliveries.keys[position].id)
        }
    }

    private func emitAll(of slot: WindowSlot, into out: inout StoreOutput) {
        for (delivery, window) in slot.deliveries {
            out.emitted.append(window.aggregate(deliveryId: delivery.id, start: slot.start, end: slot.end))
        }
    }

    private func emitDirty(of slot: WindowSlot, into out: inout StoreOutput) {
        for id in slot.dirtyIds {
            guard let window = slot.deliveries[DeliveryKey(id)] else { continue }
            out.emitted.append(window.aggregate(deliveryId: id, start: slot.start, end: slot.end))
        }
    }

    // MARK: State

    /// An evicted slot's windows go, but their final change is handed out first where they moved
    /// on since the last export (the last hits, the final emission): until the commit that
    /// sends their last records is done, a new owner needs it to send them again.
    private mutating func noteEvicted(_ slot: WindowSlot) {
        // In delivery order, so that another run over the same input writes the same changelog.
        for (delivery, window) in slot.deliveries.sorted(by: { $0.key.id < $1.key.id }) {
            let id = delivery.id
            evictedSinceExport.append(key(slot.start, id))
            let emittedNow = !slot.emitted || window.dirty
            guard emittedNow || window.stateChanged else { continue }
            // Read in place: the window goes with its slot, and a copy of its table to change
            // would cost its whole size.
            var final = window.change(of: key(slot.start, id))
            if emittedNow { final.emittedRevision = UInt32(truncatingIfNeeded: window.hitCount) }
            finalsSinceExport.append(final)
        }
    }

    /// The windows that changed (with the final change of those evicted), and the windows
    /// evicted, since the last call; each window's broadlogs are handed out once, as they change.
    mutating func exportChanges(into changes: inout StateChanges) {
        guard exportsChanges else { return }
        changes.windows += finalsSinceExport
        finalsSinceExport.removeAll()
        for index in slots.indices where !slots[index].stateChangedIds.isEmpty {
            let start = slots[index].start
            // In delivery order: an emission notes its windows in the order of the slot's
            // dictionary, which differs between runs; another run over the same input must write the
            // same changelog.
            for id in slots[index].stateChangedIds.sorted() {
                guard let position = slots[index].deliveries.index(forKey: DeliveryKey(id)) else { continue }
                changes.windows.append(slots[index].deliveries.values[position].change(of: key(start, id)))
                slots[index].deliveries.values[position].clearChanges()
            }
            slots[index].stateChangedIds.removeAll()
        }
        changes.evicted += evictedSinceExport
        evictedSinceExport.removeAll()
    }

    /// The whole state of each of these windows that is still held (every broadlog): what a
    /// changelog writes when it merges a window's changes into one.
    func states(of keys: [WindowKey], into states: inout [WindowState]) {
        for key in keys {
            guard let slot = slots.first(where: { $0.start == key.windowStart }), let window = slot.deliveries[DeliveryKey(key.deliveryId)] else { continue }
            states.append(window.state(of: key))
        }
    }

    /// The current record of each of these windows that is still held.
    func currentRecords(_ keys: [WindowKey], into out: inout StoreOutput) {
        for key in keys {
            guard let slot = slots.first(where: { $0.start == key.windowStart }), let window = slot.deliveries[DeliveryKey(key.deliveryId)] else { continue }
            out.emitted.append(window.aggregate(deliveryId: key.deliveryId, start: slot.start, end: slot.end))
        }
    }

    /// Puts a window back as a changelog held it. A window already emitted makes its window
    /// start emitted (the first emission covers every delivery of a window).
    mutating func restore(_ state: WindowState) {
        var window = DeliveryWindow(state)
        let start = state.windowStart
        let index = slotIndex(start: start, end: EventTimeMath.add(start, sized.size))
        if let previous = slots[index].deliveries[DeliveryKey(state.deliveryId)] {
            slots[index].entries -= previous.broadlogs.count
            entries -= previous.broadlogs.count
        }
        window.dirty = false
        window.stateChanged = false
        slots[index].deliveries[DeliveryKey(state.deliveryId)] = window
        slots[index].entries += window.broadlogs.count
        entries += window.broadlogs.count
        if window.emittedRevision > 0 { slots[index].emitted = true }
    }

    /// After every restored window is back: in a window start already emitted, a delivery whose
    /// last emission is older than its counts (or that was never emitted) owes a correction.
    mutating func finishRestore() {
        for index in slots.indices where slots[index].emitted {
            for (delivery, window) in slots[index].deliveries.sorted(by: { $0.key.id < $1.key.id })
            where !window.dirty && Int(window.emittedRevision) != window.hitCount {
                slots[index].deliveries[delivery]!.dirty = true
                slots[index].dirtyIds.append(delivery.id)
            }
        }
    }

    // MARK: Snapshot

    func snapshot() -> StoreSnapshot {
        var snapshot = StoreSnapshot()
        snapshot.entries = entries
        for slot in slots {
            if slot.emitted {
                snapshot.retainedWindows += slot.deliveries.count
            } else {
                snapshot.openWindows += slot.deliveries.count
                // Slots are in order of their start, so the first open one ends first.
                if snapshot.oldestOpenEnd == nil, !slot.deliveries.isEmpty { snapshot.oldestOpenEnd = slot.end }
            }
            snapshot.entriesByWindowStart[slot.start] = slot.entries
        }
        return snapshot
    }
}
