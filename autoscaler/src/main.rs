use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    autoscaler::cli::Cli::parse().run()
}
