use std::process::ExitCode;

fn main() -> ExitCode {
    monitor::cli::main()
}
