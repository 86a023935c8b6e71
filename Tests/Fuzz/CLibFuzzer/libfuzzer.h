// libFuzzer's entry point for programs that keep their own main (LLVM 11 and later).
// SwiftPM gives every executable target a Swift main, so the harnesses start libFuzzer through
// this instead of libFuzzer's own main. The definition comes from the clang runtime library
// that -sanitize=fuzzer links (libclang_rt.fuzzer in the Swift toolchain); nothing is linked
// here, and only builds with -D TRACKPIPE_LIBFUZZER refer to it.
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*UserCb)(const uint8_t *Data, size_t Size));
