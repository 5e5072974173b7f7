//! The demo, run as an operator runs it: it must exit 0, which it does only when every job
//! ended as designed (status, failure reason, exit code, the runner's trace checksum, and what
//! each job's log or artifacts must show) and no machine was left at the provider.

use anyhow::{Result, ensure};
use e2e::process::binary;

#[test]
fn the_demo_ends_every_job_as_designed() -> Result<()> {
    let output = std::process::Command::new(binary("demo")?).output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.success(),
        "the demo failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    ensure!(stdout.contains("Every job ended as designed."), "{stdout}");
    ensure!(
        stdout.contains("Machines left at the provider: 0."),
        "{stdout}"
    );
    Ok(())
}
