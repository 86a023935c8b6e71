import RecordFormats
import Runner
import RecordFormats

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

extension GroupIdentity {
    /// The refusal of a run asking for `asked` under `group`, whose commit (`evidence`: "its
    /// commit on hits[0]") recorded this identity; nil when they agree. Each difference is named
    /// as `given` says the run was told it (a setting missing there is named by its value only:
    /// a stage that finds the difference at an assignment does not know how it was given).
    func refusal(group: String, asked: GroupIdentity, evidence: String, given: [Setting: GivenSetting]) -> PipelineError? {
        let differences = differences(from: asked)
        guard !differences.isEmpty else { return nil }
        let window = WindowSizeCheck.text
        var found: [String] = []
        var why: [String] = []
        var back: [String] = []
        for setting in differences {
            let label = given[setting]?.label
            switch setting {
            case .window:
                found.append("it counts windows of \(window(windowSize)) and this run asks for \(label ?? "windows of \(window(asked.windowSize))")")
                why.append("an output key <deliveryId>@<windowStart> names another window under each size, so records of both sizes would overwrite each other")
                back.append(given[.window]?.label(for: window(windowSize)) ?? "--window \(window(windowSize))")
            case .inputKeyedByDelivery:
                let environment = given[.inputKeyedByDelivery]?.source == .environment
                if let repartition = repartitionTopic {
                    found.append("it runs two stages (its repartition topic is \(repartition)) and this run asks for one stage (\(label ?? "--input-keyed-by-delivery"))")
                    back.append(
                        (environment ? "TRACKPIPE_INPUT_KEYED_BY_DELIVERY=false" : "no --input-keyed-by-delivery")
                            + " with \(given[.repartitionTopic]?.label(for: repartition) ?? "--repartition-topic \(repartition)")")
                } else {
                    let asked = given[.inputKeyedByDelivery].flatMap { $0.source == .defaultValue ? nil : $0.label } ?? "no --input-keyed-by-delivery"
                    found.append("it runs one stage (--input-keyed-by-delivery) and this run asks for two stages (\(asked))")
                    back.append(environment ? "TRACKPIPE_INPUT_KEYED_BY_DELIVERY=true" : "--input-keyed-by-delivery")
                }
                why.append("the two modes commit and keep different things: one resuming from the other's commits would count partial windows and overwrite full records with partial ones")
            case .repartitionTopic:
                let repartition = repartitionTopic ?? ""
                found.append("its repartition topic is \(repartition) and this run asks for \(label ?? asked.repartitionTopic ?? "")")
                why.append("the group's input offsets say which hits reached its repartition topic: a run sending them to another would move those offsets on, and the group's own pipeline would never count the hits in between")
                back.append(given[.repartitionTopic]?.label(for: repartition) ?? "--repartition-topic \(repartition)")
            case .stateTopic:
                found.append("its state topic is \(stateTopic) and this run asks for \(label ?? asked.stateTopic)")
                why.append("its window tasks keep their open windows in its state topic: a run on another would start them empty and overwrite full records with partial ones")
                back.append(given[.stateTopic]?.label(for: stateTopic) ?? "--state-topic \(stateTopic)")
            }
        }
        return .settingChanged(
            "the group \(group) runs another pipeline than this run asks for (\(evidence) says so): \(found.joined(separator: "; ")). One group is one pipeline: \(why.joined(separator: "; ")). Go back to the group's settings (\(back.joined(separator: ", "))), or run this pipeline under a new --group and a new --output-topic (a new group counts the input from its beginning)")
    }
}
