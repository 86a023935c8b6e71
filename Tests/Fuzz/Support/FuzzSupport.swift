/// What the libFuzzer harnesses in `Tests/Fuzz` share: how a violated property stops the run,
/// and their `main`, which either hands over to libFuzzer or replays files.
///
/// A harness checks properties with ``fuzzRequire(_:_:file:line:)`` rather than `precondition`,
/// because `precondition` drops its message in optimized builds and the message (with the
/// input) is what makes a crash report readable without re-running it.
#if TRACKPIPE_LIBFUZZER
import CLibFuzzer
import Glibc
#else
import Foundation
#endif

/// The body of every harness's `main`. Built by scripts/fuzz.sh (`-D TRACKPIPE_LIBFUZZER`,
/// `-sanitize=fuzzer`), it runs libFuzzer's loop with the command line as libFuzzer's options
/// and corpus directories. In an ordinary build, where libFuzzer is not linked, it replays the
/// files named on the command line through the same checks (see `replayFiles`).
public func fuzzMain(
    testOneInput: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt,
    check: (UnsafeRawBufferPointer) -> Void
) -> Never {
    #if TRACKPIPE_LIBFUZZER
    var argc = CommandLine.argc
    var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
    exit(LLVMFuzzerRunDriver(&argc, &argv, testOneInput))
    #else
    replayFiles(CommandLine.arguments, through: check)
    #endif
}

/// Stops the process with `message` when `condition` is false. libFuzzer sees the trap as a
/// crash and saves the input; the replay tool stops at the first failing file.
@inline(__always)
public func fuzzRequire(
    _ condition: Bool, _ message: @autoclosure () -> String,
    file: StaticString = #fileID, line: UInt = #line
) {
    if !condition {
        fatalError("fuzz property violated: \(message())", file: file, line: line)
    }
}

/// `bytes` as a quoted Swift string literal (invalid UTF-8 shown as U+FFFD), cut to 300
/// characters, for failure messages.
public func describeInput(_ bytes: UnsafeRawBufferPointer) -> String {
    let text = String(decoding: bytes, as: UTF8.self)
    let shown = text.count > 300 ? String(text.prefix(300)) + "…" : text
    return "\(shown.debugDescription) (\(bytes.count) bytes)"
}

#if !TRACKPIPE_LIBFUZZER
/// The entry point of a harness built without libFuzzer (the ordinary `swift build`): runs
/// every file named on the command line, or every file under a named directory, through
/// `check`. This is how a crash file from a fuzz run is reproduced in a debugger or a
/// non-sanitized build: `swift run fuzz-normalizer path/to/crash-…`. Exits 0 when every input
/// passed, 64 without arguments, 66 when a path cannot be read.
public func replayFiles(_ arguments: [String], through check: (UnsafeRawBufferPointer) -> Void) -> Never {
    exit(replay(arguments, through: check))
}

private func replay(_ arguments: [String], through check: (UnsafeRawBufferPointer) -> Void) -> Int32 {
    let paths = arguments.dropFirst()
    guard !paths.isEmpty else {
        let name = arguments.first.map { URL(fileURLWithPath: $0).lastPathComponent } ?? "fuzz-…"
        print("usage: \(name) FILE|DIRECTORY...\nRuns each input through the harness's checks (scripts/fuzz.sh fuzzes them).")
        return 64
    }
    let fm = FileManager.default
    var files: [String] = []
    for path in paths {
        var isDirectory: ObjCBool = false
        guard fm.fileExists(atPath: path, isDirectory: &isDirectory) else {
            print("error: no such file or directory: \(path)")
            return 66
        }
        if isDirectory.boolValue {
            let found = (fm.enumerator(atPath: path)?.compactMap { $0 as? String } ?? [])
                .map { (path as NSString).appendingPathComponent($0) }
                .filter { fm.fileExists(atPath: $0, isDirectory: &isDirectory) && !isDirectory.boolValue }
            files.append(contentsOf: found.sorted())
        } else {
            files.append(path)
        }
    }
    for file in files {
        guard let data = fm.contents(atPath: file) else {
            print("error: cannot read \(file)")
            return 66
        }
        data.withUnsafeBytes { check($0) }
    }
    print("\(files.count) input(s) passed")
    return 0
}
#endif
