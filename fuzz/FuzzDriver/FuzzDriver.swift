//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

// The entry point every libFuzzer target shares. SwiftPM links an executable target's entry point
// as `<module>_main`; each target declares that symbol with `@_cdecl` and hands it, with its
// `LLVMFuzzerTestOneInput`, to libFuzzer's driver here (LLVMFuzzerRunDriver, part of the libFuzzer
// that -sanitize=fuzzer links). Only `scripts/fuzz` builds this target (FORMATTEST_FUZZ=1).

@_silgen_name("LLVMFuzzerRunDriver")
func runFuzzerDriver(
    _ argc: UnsafeMutablePointer<Int32>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> Int32
) -> Int32

/// Runs libFuzzer's driver with the process's arguments and one target's input callback.
public enum FuzzDriver {
    /// Parses libFuzzer's flags from `argv` and fuzzes `callback`; returns the process's exit status.
    public static func run(
        _ argc: Int32,
        _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>,
        _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> Int32
    ) -> Int32 {
        var count = argc
        var arguments: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = argv
        return runFuzzerDriver(&count, &arguments, callback)
    }
}
