//! The `readyprobe` binary: everything lives in the library; see `cli/mod.rs`.

fn main() -> std::process::ExitCode {
    readyprobe::cli::main()
}
