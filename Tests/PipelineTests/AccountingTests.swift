import Testing
import TrackingDomain
import Windowing
@testable import Pipeline
@testable import Runner

/// `add` sums the reports of a run and `subtracting` gives the figures of one progress line:
/// a counter left out of either would show as 0 in the summary, the metrics or the progress
/// lines while the work was done. Both go through `Accounting.counters` and
/// `Accounting.filteredByReason` and `deadLetteredByReason`; these tests hold those lists to every stored field.
@Suite("accounting arithmetic")
struct AccountingTests {
    /// The name of the stored property each key path writes, found by writing a marker through
    /// it and looking for the marker among the fields Mirror lists.
    static func names<Value: Equatable>(
        of paths: [WritableKeyPath<Accounting, Value> & Sendable], marker: Value
    ) -> [String] {
        paths.map { path in
            var accounting = Accounting()
            accounting[keyPath: path] = marker
            let written = Mirror(reflecting: accounting).children.filter { ($0.value as? Value) == marker }
            return written.count == 1 ? written[0].label ?? "?" : "(\(written.count) fields)"
        }
    }

    static func storedFields<Value>(of type: Value.Type) -> Set<String> {
        Set(Mirror(reflecting: Accounting()).children.filter { $0.value is Value }.compactMap(\.label))
    }

    @Test("the counter lists name every stored field once: every Int, every count by reason")
    func listsCoverEveryField() {
        let counters = Self.names(of: Accounting.counters, marker: 7)
        #expect(counters.count == Set(counters).count, "a counter listed twice: \(counters.sorted())")
        #expect(Set(counters) == Self.storedFields(of: Int.self), "listed \(counters.sorted())")
        let filtered = Self.names(of: Accounting.filteredByReason, marker: [.trackingOff: 7])
        let dead = Self.names(of: Accounting.deadLetteredByReason, marker: [.tooLate: 7])
        #expect(filtered.count == Set(filtered).count && dead.count == Set(dead).count, "a count by reason listed twice: \(filtered) \(dead)")
        #expect(Set(filtered) == Self.storedFields(of: ReasonCounts<FilterReason>.self), "listed \(filtered.sorted())")
        #expect(Set(dead) == Self.storedFields(of: ReasonCounts<RejectReason>.self), "listed \(dead.sorted())")
        let bySize = Self.names(of: Accounting.bySize, marker: [60_000: 7])
        #expect(Set(bySize) == Self.storedFields(of: [Int64: Int].self) && bySize.count == Set(bySize).count, "listed \(bySize.sorted())")
        // Nothing stored is of another kind, which no list could cover.
        let all = Set(Mirror(reflecting: Accounting()).children.compactMap(\.label))
        #expect(
            all == Self.storedFields(of: Int.self).union(Self.storedFields(of: ReasonCounts<FilterReason>.self))
                .union(Self.storedFields(of: ReasonCounts<RejectReason>.self)).union(Self.storedFields(of: [Int64: Int].self)))
    }

    /// An accounting whose counter number `i` (in list order) is `(i + 1) * scale`, and whose
    /// counts by reason number `i` hold `(i + 1) * scale + position` for the reasons given.
    static func distinct(scale: Int, reasons: [RejectReason]) -> Accounting {
        var accounting = Accounting()
        for (index, counter) in Accounting.counters.enumerated() { accounting[keyPath: counter] = (index + 1) * scale }
        for (index, tally) in Accounting.deadLetteredByReason.enumerated() {
            for (position, reason) in reasons.enumerated() { accounting[keyPath: tally][reason] = (index + 1) * scale + position }
        }
        for (index, tally) in Accounting.filteredByReason.enumerated() where !reasons.isEmpty {
            accounting[keyPath: tally][.trackingOff] = (index + 1) * scale
        }
        for (index, tally) in Accounting.bySize.enumerated() where !reasons.isEmpty {
            accounting[keyPath: tally] = [60_000: (index + 1) * scale, 3_600_000: scale]
        }
        return accounting
    }

    @Test("add sums every counter and every count by reason, field by field")
    func addSumsEveryField() {
        var total = Self.distinct(scale: 1, reasons: [.malformedJSON, .tooLate])
        let more = Self.distinct(scale: 100, reasons: [.tooLate, .tooLarge])
        total.add(more)
        for (index, counter) in Accounting.counters.enumerated() {
            #expect(total[keyPath: counter] == (index + 1) * 101, "counter \(index): \(total)")
        }
        for (index, tally) in Accounting.deadLetteredByReason.enumerated() {
            let base = index + 1
            #expect(
                total[keyPath: tally] == [.malformedJSON: base, .tooLate: base + 1 + base * 100, .tooLarge: base * 100 + 1], "by reason \(index)")
        }
        for (index, tally) in Accounting.filteredByReason.enumerated() {
            #expect(total[keyPath: tally] == [.trackingOff: (index + 1) * 101], "filtered \(index)")
        }
        for (index, tally) in Accounting.bySize.enumerated() {
            #expect(total[keyPath: tally] == [60_000: (index + 1) * 101, 3_600_000: 101], "by size \(index)")
        }
    }

    @Test("subtracting leaves what happened since the earlier snapshot, field by field; reasons that did not grow count 0")
    func subtractingEveryField() {
        let earlier = Self.distinct(scale: 1, reasons: [.malformedJSON, .tooLate])
        var later = Self.distinct(scale: 1_000, reasons: [.malformedJSON, .tooLate, .tooLarge])
        for tally in Accounting.deadLetteredByReason { later[keyPath: tally][.tooLate] = earlier[keyPath: tally][.tooLate] }
        let delta = later.subtracting(earlier)
        for (index, counter) in Accounting.counters.enumerated() {
            #expect(delta[keyPath: counter] == (index + 1) * 999, "counter \(index): \(delta)")
        }
        for (index, tally) in Accounting.deadLetteredByReason.enumerated() {
            let base = index + 1
            #expect(delta[keyPath: tally] == [.malformedJSON: base * 999, .tooLarge: base * 1_000 + 2], "by reason \(index): \(delta[keyPath: tally])")
            #expect(delta[keyPath: tally].description == "malformed_json \(base * 999), too_large \(base * 1_000 + 2)", "listed by code")
        }
        for (index, tally) in Accounting.bySize.enumerated() {
            #expect(delta[keyPath: tally] == [60_000: (index + 1) * 999, 3_600_000: 999], "by size \(index): \(delta[keyPath: tally])")
        }
        #expect(WindowSize.text(counts: delta.tooLateForSize) == "1m 999, 1h 999", "by size, smaller first")
        // Adding the difference back gives the later totals again.
        var rebuilt = earlier
        rebuilt.add(delta)
        #expect(rebuilt == later)
    }

    /// `ReasonCounts.add` adds column by column, taking the other's table whole when it has none:
    /// an empty table on either side, or both, must add like counts of zero.
    @Test("counts by reason add with an empty table on either side")
    func reasonCountsAddEmpty() {
        let some: ReasonCounts<RejectReason> = [.tooLate: 2, .malformedJSON: 1]
        var intoEmpty = ReasonCounts<RejectReason>()
        intoEmpty.add(some)
        #expect(intoEmpty == some && intoEmpty.total == 3)
        var fromEmpty = some
        fromEmpty.add(ReasonCounts())
        #expect(fromEmpty == some)
        var twice = some
        twice.add(some)
        #expect(twice == [.tooLate: 4, .malformedJSON: 2] && twice.description == "malformed_json 2, too_late 4")
        var none = ReasonCounts<RejectReason>()
        none.add(ReasonCounts())
        #expect(none == ReasonCounts() && none.total == 0 && none.counted.isEmpty)
    }
}
