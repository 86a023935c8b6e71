import Foundation

/// Process memory figures for the benchmarks, without a C shim target.
enum HeapProbe {
    /// glibc heap bytes in use (`mallinfo2().uordblks`). Swift's Glibc module does not import
    /// <malloc.h>, so the function is looked up with dlsym. On x86-64 System V a function
    /// returning this 80-byte struct takes the result buffer as a hidden first argument, which
    /// is exactly a C function taking one pointer; other architectures return nil.
    static func bytesInUse() -> Int? {
        #if os(Linux) && arch(x86_64)
        typealias MallInfo2 = @convention(c) (UnsafeMutablePointer<Int>?) -> UnsafeMutablePointer<Int>?
        guard let handle = dlopen(nil, RTLD_NOW), let symbol = dlsym(handle, "mallinfo2") else { return nil }
        let function = unsafeBitCast(symbol, to: MallInfo2.self)
        // struct mallinfo2 { size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks,
        //                    uordblks, fordblks, keepcost; }
        var fields = [Int](repeating: 0, count: 10)
        fields.withUnsafeMutableBufferPointer { _ = function($0.baseAddress) }
        // Bytes in use: allocated arena chunks (uordblks) plus mmapped chunks (hblkhd).
        return fields[7] + fields[4]
        #else
        return nil
        #endif
    }

    /// Resident set size from /proc/self/statm.
    static func residentBytes() -> Int? {
        #if os(Linux)
        guard let file = fopen("/proc/self/statm", "r") else { return nil }
        defer { fclose(file) }
        var size = 0
        var resident = 0
        guard withUnsafeMutablePointer(to: &size, { sizePointer in
            withUnsafeMutablePointer(to: &resident) { residentPointer in
                withVaList([sizePointer, residentPointer]) { vfscanf(file, "%ld %ld", $0) }
            }
        }) == 2 else { return nil }
        return resident * Int(sysconf(Int32(_SC_PAGESIZE)))
        #else
        return nil
        #endif
    }
}
