import Foundation

/// Flags fall back to `TRACKPIPE_<FLAG>` environment variables (a container's natural way to
/// be configured), then to their defaults. Precedence: command line, environment, default.
struct Environment: Sendable {
    var variables: [String: String]

    init(_ variables: [String: String] = ProcessInfo.processInfo.environment) {
        self.variables = variables
    }

    /// `--input-topic` -> `TRACKPIPE_INPUT_TOPIC`.
    static func variableName(forFlag flag: String) -> String {
        "TRACKPIPE_" + flag.uppercased().replacingOccurrences(of: "-", with: "_")
    }

    func value(forFlag flag: String) -> String? {
        variables[Self.variableName(forFlag: flag)].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// librdkafka properties from the environment: `TRACKPIPE_X` holds `key=value` pairs
    /// separated by `;` or newlines, and every `TRACKPIPE_X_<ANY>` holds one pair — so that
    /// each secret (a SASL password) can come from its own Kubernetes Secret key.
    func kafkaProperties() -> [String] {
        var pairs: [String] = []
        if let list = variables["TRACKPIPE_X"] {
            pairs += list.split(whereSeparator: { $0 == ";" || $0 == "\n" }).map(String.init)
        }
        for (name, value) in variables.sorted(by: { $0.key < $1.key }) where name.hasPrefix("TRACKPIPE_X_") {
            pairs.append(value)
        }
        return pairs.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }
}
