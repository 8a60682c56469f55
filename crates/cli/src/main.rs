//! `tomus`: servers, embedded cluster, blob commands, demo and benchmarks.

fn main() {
    std::process::exit(tomus_cli::app::main_with(std::env::args_os()));
}
