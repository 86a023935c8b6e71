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

    @Test("trackpipe --version prints the same as trackpipe version")
    func versionFlag() throws {
        let binary = try TrackpipeBinary.locate()
        let flag = try binary.run(["--version"])
        #expect(flag.exitCode == 0, "\(flag.stderr)")
        #expect(flag.stdout == (try binary.run(["version"])).stdout)
        #expect(flag.stdoutLines.count == 2)
    }
}
