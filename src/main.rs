//! The `readyprobe` binary: everything lives in the library; see `cli/mod.rs`.

/// SIGHUP's default action ends the process, and `run` takes SIGHUP as "re-read the config": the
/// flag-only handler is installed by the loader, before Rust's start-up and `main`, so no SIGHUP
/// that arrives once the process runs its own code can end it.
#[used]
#[unsafe(link_section = ".init_array")]
static HOLD_SIGHUP: extern "C" fn() = {
    extern "C" fn hold() {
        readyprobe::cli::hold_sighup();
    }
    hold
};

fn main() -> std::process::ExitCode {
    readyprobe::cli::main()
}
