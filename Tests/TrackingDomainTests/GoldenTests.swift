import Foundation
import Testing
@testable import TrackingDomain

@Suite("Golden verdicts")
struct GoldenTests {
    @Test("there are golden cases for every shape and every normalizer reject reason")
    func coverage() {
        let cases = GoldenCase.all
        #expect(cases.count > 100)
        let lines = cases.compactMap(\.expectedLine)
        for shape in HitShape.allCases {
            #expect(lines.contains { $0.contains("\"shape\":\"\(shape.name)\"") }, "no accepted golden case of shape \(shape.name)")
        }
        // too_large is covered in NormalizerTests (a golden file would have to be over a megabyte);
        // The other origins need a Kafka record, the windows or the shuffle.
        for reason in RejectReason.allCases where reason.origin == .normalizer && reason != .tooLarge {
            #expect(lines.contains { $0.contains("\"reason\":\"\(reason.rawValue)\"") }, "no golden case rejected as \(reason.rawValue)")
        }
        #expect(lines.contains { $0.contains("\"status\":\"filtered\"") })
    }

    @Test("each golden input yields exactly its expected verdict line", arguments: GoldenCase.all)
    func verdictMatchesGolden(_ golden: GoldenCase) throws {
        let verdict = Normalizer().normalize(golden.input, kafkaTimestamp: golden.kafkaTimestamp)
        let line = verdict.jsonLine
        if ProcessInfo.processInfo.environment["TRACKPIPE_UPDATE_GOLDEN"] == "1" {
            let url = GoldenCase.sourceGoldenDirectory.appendingPathComponent(golden.relativePath + ".expected.json")
            try (line + "\n").write(to: url, atomically: true, encoding: .utf8)
            return
        }
        let expected = try #require(golden.expectedLine, "missing \(golden.relativePath).expected.json")
        #expect(line == expected)
        if case .rejected(let reason, let detail) = verdict {
            #expect(!detail.hasPrefix(reason.rawValue), "the code is written before a detail once, by RejectReason.written(detail:)")
        }
    }
}

extension RejectReason {
    /// Where a reason is decided.
    enum Origin: Sendable, Hashable {
        /// From the message's bytes alone (`Normalizer`): the reasons golden inputs show.
        case normalizer
        /// From the Kafka record around the message: its headers, its timestamp.
        case record
        /// By the window engine, from event time.
        case windows
        /// By the window stage, reading what the normalize stage wrote.
        case shuffle
    }

    var origin: Origin {
        switch self {
        case .malformedJSON, .notAnObject, .duplicateField, .notATrackingAction, .malformedTrackingURL, .conflictingIds,
            .missingDeliveryId, .missingBroadlogId, .unknownAction, .invalidTimestamp, .tooLarge, .tooDeep, .idTooLong:
            .normalizer
        case .tooManyHeaders, .futureTimestamp: .record
        case .tooLate: .windows
        case .unreadableRepartitionRecord: .shuffle
        }
    }
}
