import Dispatch

/// One shard: a serial queue and the store only that queue touches.
///
/// `@unchecked Sendable` is sound because `store` is only accessed on `queue` (or, for a
/// one-shard engine, only inline under the engine's own serialisation), and the engine reads
/// results only after the dispatch group has been waited on.
final class EngineShard: @unchecked Sendable {
    let queue: DispatchQueue
    var store: WindowStore

    init(index: Int, config: WindowConfig, tracksState: Bool = false) {
        queue = DispatchQueue(label: "trackpipe.windowing.shard.\(index)")
        store = WindowStore(config: config, tracksState: tracksState)
    }
}
