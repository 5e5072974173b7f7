//! `console` blocks: transcripts of commands and what they print, run and compared.
//!
//! `$ ` starts a command (a trailing `\` continues it); the lines up to the next command are
//! its expected output, stdout and stderr together. `...` alone matches any run of lines,
//! `[..]` any text within a line, and a last line `[exit: N]` the exit status (else 0).
//! Trailing whitespace and trailing empty lines are not compared.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use wait_timeout::ChildExt;

/// One command of a transcript and what it must print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub command: String,
    pub expected: Vec<String>,
    pub exit: i32,
}

pub fn parse(body: &str) -> Result<Vec<Step>> {
    let mut steps: Vec<Step> = Vec::new();
    let mut lines = body.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(first) = line.strip_prefix("$ ") {
            let mut command = first.to_string();
            // Kept as written: bash reads `\` and a newline as one line.
            while command.ends_with('\\') {
                let next = lines
                    .next()
                    .context("a command ends in `\\` at the block's end")?;
                command.push('\n');
                command.push_str(next);
            }
            steps.push(Step {
                command,
                expected: Vec::new(),
                exit: 0,
            });
        } else {
            let Some(step) = steps.last_mut() else {
                bail!("a console block must start with a `$ ` command, not {line:?}");
            };
            step.expected.push(line.trim_end().to_string());
        }
    }
    for step in &mut steps {
        while step.expected.last().is_some_and(String::is_empty) {
            step.expected.pop();
        }
        if let Some(last) = step.expected.last()
            && let Some(code) = last
                .strip_prefix("[exit: ")
                .and_then(|rest| rest.strip_suffix(']'))
        {
            step.exit = code
                .parse()
                .with_context(|| format!("bad exit line {last:?}"))?;
            step.expected.pop();
            while step.expected.last().is_some_and(String::is_empty) {
                step.expected.pop();
            }
        }
    }
    Ok(steps)
}

/// What one command printed.
#[derive(Debug)]
pub struct Outcome {
    pub output: String,
    pub exit: i32,
}

/// The longest a command in the book may take: a guard against a hung command, not a speed
/// check (speed lives in the benchmarks). The replay page's block runs two day-long
/// simulations with the debug build, about 40 s alone, and took over 120 s in CI beside two
/// other test binaries on two cores.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(300);

/// Runs `command` with bash in `dir`, with `path_first` ahead of `PATH`, stdout and stderr
/// merged as a terminal shows them.
pub fn run(command: &str, dir: &Path, path_first: &Path) -> Result<Outcome> {
    let path = format!(
        "{}:{}",
        path_first.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(format!("exec 2>&1\n{command}"))
        .current_dir(dir)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting bash for {command:?}"))?;
    let mut stdout = child.stdout.take().context("no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut buf).map(|_| buf)
    });
    let Some(status) = child.wait_timeout(COMMAND_TIMEOUT)? else {
        let _ = child.kill();
        let _ = child.wait();
        bail!("{command:?} did not finish within {COMMAND_TIMEOUT:?}");
    };
    let output = reader
        .join()
        .map_err(|_| anyhow::anyhow!("the output reader panicked"))??;
    Ok(Outcome {
        output: String::from_utf8_lossy(&output).into_owned(),
        exit: status.code().unwrap_or(-1),
    })
}

/// Whether `actual` (the command's output) is what `expected` shows.
pub fn matches(expected: &[String], actual: &str) -> bool {
    let mut actual: Vec<&str> = actual.lines().map(str::trim_end).collect();
    while actual.last().is_some_and(|l| l.is_empty()) {
        actual.pop();
    }
    lines_match(expected, &actual)
}

fn lines_match(expected: &[String], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first == "..." => {
            (0..=actual.len()).any(|skip| lines_match(rest, &actual[skip..]))
        }
        Some((first, rest)) => actual
            .split_first()
            .is_some_and(|(line, more)| line_matches(first, line) && lines_match(rest, more)),
    }
}

fn line_matches(expected: &str, actual: &str) -> bool {
    let parts: Vec<&str> = expected.split("[..]").collect();
    if parts.len() == 1 {
        return expected == actual;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !actual.starts_with(first) || actual.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &actual[first.len()..];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_commands_outputs_and_exit() {
        let steps = parse("$ a \\\n  --b\nout\n\n[exit: 64]\n$ c\n").unwrap();
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0].command, "a \\\n  --b");
        assert_eq!(steps[0].expected, ["out"]);
        assert_eq!(steps[0].exit, 64);
        assert_eq!(steps[1].exit, 0);
        assert!(steps[1].expected.is_empty());
    }

    #[test]
    fn wildcards_match_lines_and_text() {
        let expected = ["a [..] c".to_string(), "...".to_string(), "end".to_string()];
        assert!(matches(&expected, "a b c\nx\ny\nend\n"));
        assert!(matches(&expected, "a  c\nend"));
        assert!(!matches(&expected, "a b c\nx\n"));
        assert!(!matches(&["exact".to_string()], "exactly"));
        assert!(matches(&["[..]ly".to_string()], "exactly"));
    }
}
