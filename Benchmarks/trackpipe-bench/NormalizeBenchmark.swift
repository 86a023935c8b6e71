import ArgumentParser
import Benchmarking
import Foundation
import TrackingDomain
import HitGenerator

/// Measures the normalizer against Foundation's JSONSerialization (plus the minimal field
/// extraction a Foundation-based normalizer would need) on the same deterministic mix of hits,
/// in the same run, on one thread, so the ratio is meaningful on a noisy shared machine.
struct NormalizeBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "normalize",
        abstract: "Hits per second of the normalizer vs JSONSerialization on a realistic mix of all hit shapes."
    )

    @Option(help: "Distinct hits in the mix.")
    var hits: Int = 20_000

    @Option(help: "Timed rounds per contender (the best round is reported).")
    var rounds: Int = 5

    @Option(help: "Seed for the hit mix.")
    var seed: UInt64 = 42

    @Flag(help: "Run only the normalizer (for profiling and allocation counting).")
    var skipBaseline = false

    @Option(help: "Also write the mix to this file, a hit per line (scripts/scan-floor.sh walks it with simdjson).")
    var writeMix: String?

    func run() throws {
        let mix = HitMix.make(count: hits, seed: seed)
        let totalBytes = mix.reduce(0) { $0 + $1.count }
        print("mix: \(mix.count) hits, average \(String(format: "%.1f", Double(totalBytes) / Double(mix.count))) bytes/hit")
        if let writeMix {
            // A hit of the mix is JSON text or a cut-off piece of it: never a newline.
            try Data(mix.map { $0 + [UInt8(ascii: "\n")] }.joined()).write(to: URL(fileURLWithPath: writeMix))
        }

        let normalizer = Normalizer()
        var accepted = 0
        let ours = measure(rounds: rounds, hits: mix.count) {
            var count = 0
            for hit in mix {
                let verdict = hit.withUnsafeBytes { normalizer.normalize($0, kafkaTimestamp: 1_795_300_000_000) }
                if case .accepted = verdict { count += 1 }
            }
            accepted = count
        }
        print("trackpipe normalizer:      \(BenchSupport.grouped(ours)) hits/s (\(accepted) accepted)")
        if skipBaseline { return }
        var foundationAccepted = 0
        let foundation = measure(rounds: rounds, hits: mix.count) {
            var count = 0
            for hit in mix where FoundationBaseline.extract(hit) { count += 1 }
            foundationAccepted = count
        }
        print("JSONSerialization+extract: \(BenchSupport.grouped(foundation)) hits/s (\(foundationAccepted) with ids and action)")
        print("ratio: \(String(format: "%.1f", ours / foundation))x")
    }

    private func measure(rounds: Int, hits: Int, _ body: () -> Void) -> Double {
        body()  // warm up
        var best = 0.0
        for _ in 0..<max(1, rounds) {
            best = max(best, Double(hits) / BenchSupport.seconds(body))
        }
        return best
    }
}

/// What a straightforward Foundation normalizer would do: parse everything, then dig out the ids,
/// action and timestamp from the container the shape puts them in.
enum FoundationBaseline {
    static func extract(_ hit: [UInt8]) -> Bool {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(hit))) as? [String: Any] else { return false }
        var container = object
        if let context = object["contextData"] as? [String: Any] {
            container = context
        } else if let userInfo = object["userInfo"] as? [String: Any] {
            container = userInfo
        } else if let message = object["message"] as? [String: Any], let data = message["data"] as? [String: Any] {
            container = data
        } else if let extras = object["NOTIFICATION_USER_INFO"] as? [String: Any] {
            container = extras
        }
        let delivery = (container["_dId"] as? String) ?? (container["deliveryId"] as? String)
        let broadlog = (container["_mId"] as? String) ?? (container["broadlogId"] as? String)
        let action = container["action"] ?? object["action"]
        _ = object["timestamp"]
        _ = container["_acsDeliveryTracking"] ?? object["_acsDeliveryTracking"]
        return delivery != nil && broadlog != nil && action != nil
    }
}

/// A deterministic mix shaped like a real input topic: mostly SDK context data and push
/// payloads, some local notifications and postbacks, a few percent of bad hits.
enum HitMix {
    static func make(count: Int, seed: UInt64) -> [[UInt8]] {
        var rng = SplitMix64(seed: seed)
        var hits: [[UInt8]] = []
        hits.reserveCapacity(count)
        for _ in 0..<count {
            let delivery = hex(rng.next() % 0xFFFFFF)
            let broadlog = "h" + hex(rng.next() % 0xFFFFFFF)
            let action = ["7", "2", "1"][Int(rng.next() % 3)]
            let millis = 1_795_300_000_000 + Int64(rng.next() % 3_600_000)
            let flag = rng.next() % 20 == 0 ? "off" : "on"
            let text: String
            switch rng.next() % 100 {
            case 0..<25:
                text = #"{"deliveryId":"\#(delivery)","broadlogId":"\#(broadlog)","action":"\#(action)","channel":"push","platform":"android","timestamp":\#(millis),"appId":"com.example.shop","sdkVersion":"3.2.1","osVersion":"14","deviceId":"6f1c2a9e-5b7d-4e3a-9c1f-0d2b8a7e6f51"}"#
            case 25..<40:
                text = #"{"actionName":"tracking","contextData":{"deliveryId":"\#(delivery)","broadlogId":"\#(broadlog)","action":"\#(action)","a.AppID":"Shop 5.1 (512)"},"platform":"ios","timestamp":"2026-11-22T10:\#(two(rng.next() % 60)):\#(two(rng.next() % 60)).120Z","deviceId":"6f1c2a9e-5b7d-4e3a-9c1f-0d2b8a7e6f51"}"#
            case 40..<60:
                text = #"{"action":"\#(action)","timestamp":\#(millis),"userInfo":{"aps":{"alert":{"title":"Sale","body":"50% off today only"},"badge":2},"_dId":"\#(delivery)","_mId":"\#(broadlog)","_acsDeliveryTracking":"\#(flag)","uri":"https://example.com/x"},"deviceId":"6f1c2a9e-5b7d-4e3a-9c1f-0d2b8a7e6f51"}"#
            case 60..<80:
                text = #"{"action":"\#(action)","timestamp":\#(millis),"message":{"collapseKey":"1476005","priority":"high","data":{"_dId":"\#(delivery)","_mId":"\#(broadlog)","_acsDeliveryTracking":"\#(flag)","title":"Sale","body":"50% off"}},"deviceId":"6f1c2a9e-5b7d-4e3a-9c1f-0d2b8a7e6f51"}"#
            case 80..<87:
                text = #"{"action":"2","timestamp":\#(millis),"NOTIFICATION_USER_INFO":{"deliveryId":"\#(delivery)","broadlogId":"\#(broadlog)"},"deviceId":"6f1c2a9e-5b7d-4e3a-9c1f-0d2b8a7e6f51","appVersion":"5.1.0"}"#
            case 87..<92:
                text = #"{"action":"1","channel":"local","platform":"ios","userInfo":{"deliveryId":"\#(delivery)","broadlogId":"\#(broadlog)"},"timestamp":\#(millis),"deviceId":"6f1c2a9e-5b7d-4e3a-9c1f-0d2b8a7e6f51"}"#
            case 92..<97:
                text = #"{"url":"https://t.example.com/r/?id=\#(broadlog),\#(delivery),\#(action)&mcId=71436720957458371935467211340216738418","timestamp":\#(millis),"ua":"Mozilla/5.0"}"#
            case 97:
                text = #"{"deliveryId":"\#(delivery)","broadlogId":"\#(broadlog)","action":"9","timestamp":\#(millis)}"#
            case 98:
                text = #"{"deliveryId":"\#(delivery)","action":"\#(action)","timestamp":\#(millis)}"#
            default:
                text = #"{"deliveryId":"\#(delivery)","broadlogId":"\#(broadlog)","action":"\#(action)","timestamp":\#(millis)"#
            }
            hits.append(Array(text.utf8))
        }
        return hits
    }

    private static func hex(_ value: UInt64) -> String { String(value, radix: 16) }
    private static func two(_ value: UInt64) -> String { value < 10 ? "0\(value)" : "\(value)" }
}
