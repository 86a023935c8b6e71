/// How a setting reached trackpipe, so that a message names it as the user gave it: a message
/// about `--window 5m` sends an operator whose manifest sets `TRACKPIPE_WINDOW=5m` looking for
/// a flag they never pass.
public struct GivenSetting: Sendable, Hashable {
    public enum Source: Sendable, Hashable {
        case commandLine, environment, defaultValue
    }

    /// The flag's name without dashes: `window`.
    public var flag: String
    /// The value as given: `5m`; for a switch on the command line, empty.
    public var text: String
    public var source: Source

    public init(flag: String, text: String, source: Source) {
        self.flag = flag
        self.text = text
        self.source = source
    }

    /// `--window 5m`, `TRACKPIPE_WINDOW=5m` or `--window (default 1m)`.
    public var label: String {
        switch source {
        case .commandLine: text.isEmpty ? "--\(flag)" : "--\(flag) \(text)"
        case .environment: "\(variable)=\(text)"
        case .defaultValue: "--\(flag) (default \(text))"
        }
    }

    /// The same setting with another value, given the same way (a default as the flag): what
    /// to write to go back to it.
    public func label(for value: String) -> String {
        source == .environment ? "\(variable)=\(value)" : "--\(flag) \(value)"
    }

    /// `TRACKPIPE_WINDOW`: the variable every flag falls back to.
    var variable: String { "TRACKPIPE_" + flag.uppercased().replacingOccurrences(of: "-", with: "_") }
}
