import Logging

extension Logger {
    /// A logger under another label at the same level: each client and part of a stage logs
    /// under its own label, as the operator set the level once.
    package func with(label: String) -> Logger {
        var copy = Logger(label: label)
        copy.logLevel = logLevel
        return copy
    }
}
