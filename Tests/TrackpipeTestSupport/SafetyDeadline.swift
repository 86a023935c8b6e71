/// How long a test waits for something that must happen (a record, a log line, an exit)
/// before it gives up and fails.
///
/// Tests wait on the event itself and go on the moment it happens, so this bound only stops a
/// hang: it is never what a test checks. CI runs the suite in parallel on a loaded 2-core
/// machine, where a generator has been seen to produce nothing in its first 2.5 s and one test
/// to take 96 s, so the bound is minutes rather than seconds. A test that needs a bound of its
/// own (to tell a hang from a slow default) says why next to it.
public enum SafetyDeadline {
    public static let seconds: Double = 300
    public static var milliseconds: Int32 { Int32(seconds * 1_000) }
}
