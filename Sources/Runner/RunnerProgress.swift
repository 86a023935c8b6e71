/// How far a bounded runner has got, for a progress display.
public struct RunnerProgress: Sendable {
    public var elapsedMilliseconds: Int64
    /// Records handed to the stage so far.
    public var consumed: Int
    /// Offsets read and to read in all, over every partition's bounded range; nil until known.
    public var done: Int64?
    public var total: Int64?
    public var finished: Bool
}
