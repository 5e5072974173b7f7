//! Everything an SSH injection does after the binary is in place, as one script sent on stdin
//! to `sh -s`: the files beside the sidecar (token, configuration), the CA bundle, the job
//! user, then stop an earlier sidecar, start the new one detached and check that it still runs
//! a second later.
//!
//! One SSH round trip instead of one per step: each remote command costs a session, a login
//! shell and a wrapper on the machine, which on a busy machine is 0.2–0.4 s apiece. Secrets
//! stay off command lines: the script travels on stdin, and file contents are base64-decoded
//! by shell builtins into their files, as in the boot script (`bootstrap.rs`).
//!
//! What the script prints, one fact per line, is read back by [`parse`].

use super::bootstrap::{decoded, write_file};
use super::recipe::{self, Launch};

/// Exit status of a step that failed (its id and output follow `failed`).
const STEP_FAILED: u32 = 3;
/// Exit status when the sidecar died within its first second (its log follows `exited`).
const SIDECAR_EXITED: u32 = 4;

/// The steps that can fail, by the id the script prints, with what the operator reads.
const STEPS: [(&str, &str); 3] = [
    ("files", "writing the sidecar's configuration"),
    ("ca", "writing the CA bundle"),
    ("job-user", "creating the job user"),
];

/// The script for `l`: writes `files` (from [`recipe::files`]) and, with TLS, the CA bundle
/// (`ca`: the relay's PEM and the system CA files to append), then starts the sidecar.
pub fn script(
    l: &Launch<'_>,
    files: &[(&str, u32, String)],
    ca: Option<(&str, &[String])>,
) -> String {
    let dir = l.dir;
    let mut s = String::from("set -u\numask 077\n");
    if let Some(user) = l.job_user {
        s.push_str(&step("job-user", &recipe::ensure_job_user(user)));
    }
    let writes: String = files
        .iter()
        .map(|(file, mode, contents)| write_file(&format!("{dir}/{file}"), *mode, contents))
        .collect();
    s.push_str(&step("files", writes.trim_end()));
    if let Some((pem, system)) = ca {
        let bundle = format!(
            "{} | {{ {}; }}",
            decoded(pem),
            recipe::write_ca_bundle(dir, system)
        );
        s.push_str(&step("ca", &bundle));
        s.push_str("echo \"ca-system $out\"\n");
    }
    s.push_str(&start(dir, &recipe::command(l)));
    s
}

/// Runs `fragment` in a subshell (an `exit` in it leaves only the subshell), keeping its
/// output in `$out`; on failure prints the step's id and that output, and stops.
fn step(id: &str, fragment: &str) -> String {
    format!(
        "out=$( {{ {fragment}\n}} 2>&1 ) || {{ printf 'failed {id}\\n%s\\n' \"$out\"; exit {STEP_FAILED}; }}\n"
    )
}

/// Stops a sidecar left by an earlier attempt, starts `command` detached from the session
/// (its own session, output to `sidecar.log`), prints its pid, and fails with the log's end
/// when it is gone (or a zombie) a second later.
fn start(dir: &str, command: &str) -> String {
    format!(
        "if [ -f {dir}/sidecar.pid ]; then kill \"$(cat {dir}/sidecar.pid)\" 2>/dev/null || true; fi\n\
         nohup setsid sh -c {cmd} > {dir}/sidecar.log 2>&1 < /dev/null &\n\
         pid=$!\n\
         echo \"$pid\" > {dir}/sidecar.pid\n\
         echo \"pid $pid\"\n\
         sleep 1\n\
         if kill -0 \"$pid\" 2>/dev/null && [ \"$(ps -o stat= -p \"$pid\" 2>/dev/null | cut -c1)\" != Z ]; then exit 0; fi\n\
         echo exited\n\
         tail -n 20 {dir}/sidecar.log 2>/dev/null\n\
         exit {SIDECAR_EXITED}\n",
        cmd = recipe::quote(command),
    )
}

/// What the script reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The sidecar runs; `ca_system` is the system CA file appended to the bundle (TLS only).
    Started {
        pid: String,
        ca_system: Option<String>,
    },
    /// A step failed: what the operator reads, and the step's output.
    StepFailed { step: &'static str, output: String },
    /// The sidecar exited within its first second: the last lines of its log.
    Exited { log: String },
    /// The script itself could not run as written (no `sh`, killed): its exit and output.
    Broken { status: Option<u32>, output: String },
}

/// Reads the script's exit status and standard output.
pub fn parse(status: Option<u32>, stdout: &str) -> Outcome {
    let value = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
    };
    match status {
        Some(0) => match value("pid ") {
            Some(pid) => Outcome::Started {
                pid,
                ca_system: value("ca-system "),
            },
            None => Outcome::Broken {
                status,
                output: "the script printed no pid".into(),
            },
        },
        Some(STEP_FAILED) => {
            let id = value("failed ").unwrap_or_default();
            let step = STEPS
                .iter()
                .find(|(known, _)| *known == id)
                .map_or("installing the sidecar", |(_, what)| what);
            Outcome::StepFailed {
                step,
                output: after(stdout, "failed "),
            }
        }
        Some(SIDECAR_EXITED) => Outcome::Exited {
            log: after(stdout, "exited")
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join(" | "),
        },
        _ => Outcome::Broken {
            status,
            output: stdout.lines().rev().take(3).collect::<Vec<_>>().join(" | "),
        },
    }
}

/// The lines after the first one that starts with `marker`.
fn after(stdout: &str, marker: &str) -> String {
    stdout
        .lines()
        .skip_while(|l| !l.starts_with(marker))
        .skip(1)
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests;
