import Foundation
@testable import Kafka
import Testing

/// scripts/compat.sh runs these suites with a newer librdkafka on LD_LIBRARY_PATH and names the
/// version it expects: this proves the test process itself loaded that library (not only the
/// `trackpipe version` the script asks first), so a passing run was a run on it.
@Suite("the librdkafka loaded at run time")
struct LoadedLibraryTests {
    static let expected = ProcessInfo.processInfo.environment["TRACKPIPE_EXPECTED_LIBRDKAFKA"]

    @Test(
        "is the version scripts/compat.sh put first on the library path",
        .enabled(if: expected != nil, "set by scripts/compat.sh only"))
    func loadedVersionIsTheExpectedOne() {
        #expect(Librdkafka.version == Self.expected, "LD_LIBRARY_PATH did not take effect in the test process")
    }

    @Test("its version number and its version string agree (the guards read the number)")
    func versionNumberMatchesTheString() {
        let number = Librdkafka.versionNumber
        let parts = Librdkafka.version.split(separator: ".").prefix(3).map { Int($0.prefix { $0.isNumber }) ?? -1 }
        #expect(parts == [Int(number >> 24), Int((number >> 16) & 0xFF), Int((number >> 8) & 0xFF)])
    }
}
