import HitGenerator

/// The simulator's random choices: the project's SplitMix64 with the few draws a schedule
/// needs, written out here so that a seed gives the same schedule on every Swift version (the
/// standard library may change how `random(in:using:)` consumes a generator).
struct SplitMix {
    private var generator: SplitMix64

    init(_ seed: UInt64) { generator = SplitMix64(seed: seed) }

    mutating func next() -> UInt64 { generator.next() }

    /// Uniform in 0..<bound (bound > 0), by the high half of a 128-bit product.
    mutating func below(_ bound: UInt64) -> UInt64 {
        precondition(bound > 0)
        return next().multipliedFullWidth(by: bound).high
    }

    /// Uniform in the range.
    mutating func int(_ range: ClosedRange<Int64>) -> Int64 {
        let width = UInt64(bitPattern: range.upperBound &- range.lowerBound) &+ 1
        if width == 0 { return Int64(bitPattern: next()) }
        return range.lowerBound &+ Int64(bitPattern: below(width))
    }

    mutating func int(_ range: ClosedRange<Int>) -> Int {
        Int(int(Int64(range.lowerBound)...Int64(range.upperBound)))
    }

    /// True with probability `p`.
    mutating func chance(_ p: Double) -> Bool {
        Double(next() >> 11) / Double(1 << 53) < p
    }

    mutating func pick<T>(_ values: [T]) -> T { values[Int(below(UInt64(values.count)))] }

    /// A seed for something that draws on its own (an operation's batch cut).
    mutating func seed() -> UInt64 { next() }
}
