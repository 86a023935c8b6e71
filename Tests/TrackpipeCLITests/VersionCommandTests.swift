import Kafka
import Testing

@Suite("trackpipe version")
struct VersionCommandTests {
    @Test("prints trackpipe's version and the librdkafka actually loaded")
    func printsBothVersions() throws {
        let result = try TrackpipeBinary.locate().run(["version"])
        #expect(result.exitCode == 0)
        #expect(result.stdoutLines.count == 2)
        #expect(result.stdoutLines.first?.hasPrefix("trackpipe ") == true)
        #expect(result.stdoutLines.last == "librdkafka \(Librdkafka.version)")
    }
}
