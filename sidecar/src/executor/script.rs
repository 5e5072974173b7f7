//! Bash script generation (pure): variable expansion, quoting, exported environment and
//! the command echo lines the runner prints (`$ <command>` in bold green).

use std::collections::HashMap;
use std::path::Path;

use crate::trace::{ANSI_BOLD_GREEN, ANSI_RESET};

/// Quote `value` as a bash ANSI-C string (`$'…'`): any byte sequence survives, and nothing
/// inside is expanded by the shell.
pub fn bash_quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 3);
    out.push_str("$'");
    for ch in value.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A valid shell variable name: only those can be exported.
pub fn is_valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Expand `$NAME` and `${NAME}` references in a non-raw variable value, like the runner
/// does before exporting (Go `os.Expand` semantics: unknown names expand to nothing).
/// `$$` stays a literal `$`; a `$` not followed by a name is kept as is.
pub fn expand(value: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let bytes = value.as_bytes();
    let mut out = String::with_capacity(value.len());
    let mut i = 0;
    let mut literal_start = 0;
    while i < bytes.len() {
        if bytes[i] != b'$' || i + 1 >= bytes.len() {
            i += 1;
            continue;
        }
        let next = bytes[i + 1];
        let (name, consumed) = if next == b'$' {
            out.push_str(&value[literal_start..i]);
            out.push('$');
            i += 2;
            literal_start = i;
            continue;
        } else if next == b'{' {
            match value[i + 2..].find('}') {
                Some(end) => (&value[i + 2..i + 2 + end], end + 3),
                None => {
                    i += 1;
                    continue;
                }
            }
        } else {
            let len = bytes[i + 1..]
                .iter()
                .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
                .count();
            if len == 0 {
                i += 1;
                continue;
            }
            (&value[i + 1..i + 1 + len], len + 1)
        };
        out.push_str(&value[literal_start..i]);
        out.push_str(&lookup(name).unwrap_or_default());
        i += consumed;
        literal_start = i;
    }
    out.push_str(&value[literal_start..]);
    out
}

/// Expand all non-raw values of `vars` (in order, later definitions win for lookups).
/// Input: (name, value, raw). Output: (name, value).
pub fn expand_all(vars: &[(String, String, bool)]) -> Vec<(String, String)> {
    let table: HashMap<&str, &str> = vars
        .iter()
        .map(|(k, v, _)| (k.as_str(), v.as_str()))
        .collect();
    let lookup = |name: &str| table.get(name).map(|v| (*v).to_owned());
    vars.iter()
        .map(|(k, v, raw)| {
            let value = if *raw { v.clone() } else { expand(v, &lookup) };
            (k.clone(), value)
        })
        .collect()
}

/// The line the runner prints before running a command: only the first line of a
/// multi-line command, with a note.
pub fn echo_line(command: &str) -> String {
    let trimmed = command.trim();
    let mut lines = trimmed.lines();
    let first = lines.next().unwrap_or("");
    let shown = if lines.next().is_some() {
        format!("{first} # collapsed multi-line command")
    } else {
        first.to_owned()
    };
    format!("{ANSI_BOLD_GREEN}$ {shown}{ANSI_RESET}")
}

/// What goes into one stage script.
#[derive(Debug, Clone, Copy)]
pub struct ScriptSpec<'a> {
    /// Exported in order (names that are not valid shell names are skipped).
    pub env: &'a [(String, String)],
    pub workdir: &'a Path,
    pub commands: &'a [String],
    /// Echo `$ <command>` before each command (user scripts); internal stages print their
    /// own messages instead.
    pub echo_commands: bool,
}

/// A bash script: `set -eo pipefail`, the exported environment, `cd` to the work
/// directory, then each command (optionally announced) — a failing command ends the
/// script with its exit code.
pub fn generate(spec: &ScriptSpec<'_>) -> String {
    let mut s = String::new();
    s.push_str("set -eo pipefail\n");
    s.push_str("set +o noclobber\n");
    for (name, value) in spec.env {
        if is_valid_name(name) {
            s.push_str(&format!("export {name}={}\n", bash_quote(value)));
        }
    }
    s.push_str(&format!(
        "cd {}\n",
        bash_quote(&spec.workdir.to_string_lossy())
    ));
    for command in spec.commands {
        if command.trim().is_empty() {
            continue;
        }
        if spec.echo_commands {
            s.push_str(&format!(
                "printf '%s\\n' {}\n",
                bash_quote(&echo_line(command))
            ));
        }
        s.push_str(command);
        if !command.ends_with('\n') {
            s.push('\n');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(bash_quote("plain"), "$'plain'");
        assert_eq!(bash_quote("it's"), "$'it\\'s'");
        assert_eq!(bash_quote("a\\b"), "$'a\\\\b'");
        assert_eq!(bash_quote("l1\nl2"), "$'l1\\nl2'");
        assert_eq!(bash_quote("\x1b[0m"), "$'\\x1b[0m'");
        assert_eq!(bash_quote("$HOME `x`"), "$'$HOME `x`'");
        assert_eq!(bash_quote("ünï"), "$'ünï'");
    }

    #[test]
    fn names() {
        assert!(is_valid_name("CI_JOB_ID"));
        assert!(is_valid_name("_x1"));
        assert!(!is_valid_name("1abc"));
        assert!(!is_valid_name("A-B"));
        assert!(!is_valid_name(""));
    }

    #[test]
    fn expansion() {
        let lookup = |n: &str| match n {
            "A" => Some("alpha".to_owned()),
            "B_2" => Some("beta".to_owned()),
            _ => None,
        };
        assert_eq!(expand("x$A-y", &lookup), "xalpha-y");
        assert_eq!(expand("${A}${B_2}", &lookup), "alphabeta");
        assert_eq!(expand("$UNKNOWN/z", &lookup), "/z");
        assert_eq!(expand("cost $$5", &lookup), "cost $5");
        assert_eq!(expand("end$", &lookup), "end$");
        assert_eq!(expand("a $ b", &lookup), "a $ b");
        assert_eq!(expand("${A", &lookup), "${A");
        assert_eq!(expand("ü$A", &lookup), "üalpha");
    }

    #[test]
    fn expand_all_honours_raw() {
        let vars = vec![
            ("A".to_owned(), "1".to_owned(), false),
            ("B".to_owned(), "$A".to_owned(), false),
            ("C".to_owned(), "$A".to_owned(), true),
        ];
        let out = expand_all(&vars);
        assert_eq!(out[1], ("B".to_owned(), "1".to_owned()));
        assert_eq!(out[2], ("C".to_owned(), "$A".to_owned()));
    }

    #[test]
    fn echo_lines() {
        assert_eq!(echo_line("echo hi"), "\x1b[32;1m$ echo hi\x1b[0;m");
        assert_eq!(
            echo_line("if true; then\n  echo x\nfi"),
            "\x1b[32;1m$ if true; then # collapsed multi-line command\x1b[0;m"
        );
    }

    #[test]
    fn script_layout() {
        let env = vec![
            ("GREETING".to_owned(), "hello 'world'".to_owned()),
            ("bad-name".to_owned(), "x".to_owned()),
        ];
        let commands = vec![
            "echo \"$GREETING\"".to_owned(),
            "  ".to_owned(),
            "exit 3".to_owned(),
        ];
        let script = generate(&ScriptSpec {
            env: &env,
            workdir: Path::new("/b/1/g/p"),
            commands: &commands,
            echo_commands: true,
        });
        let expected = "set -eo pipefail\n\
            set +o noclobber\n\
            export GREETING=$'hello \\'world\\''\n\
            cd $'/b/1/g/p'\n\
            printf '%s\\n' $'\\x1b[32;1m$ echo \"$GREETING\"\\x1b[0;m'\n\
            echo \"$GREETING\"\n\
            printf '%s\\n' $'\\x1b[32;1m$ exit 3\\x1b[0;m'\n\
            exit 3\n";
        assert_eq!(script, expected);
    }

    #[test]
    fn generated_script_runs_in_bash() {
        let env = vec![("V".to_owned(), "a'b\"c$d\\e\nf".to_owned())];
        let dir = tempfile::tempdir().unwrap();
        let commands = vec!["printf '%s' \"$V\" > out.txt".to_owned()];
        let script = generate(&ScriptSpec {
            env: &env,
            workdir: dir.path(),
            commands: &commands,
            echo_commands: false,
        });
        let status = std::process::Command::new("bash")
            .args(["--noprofile", "--norc", "-c", &script])
            .status()
            .unwrap();
        assert!(status.success());
        let got = std::fs::read_to_string(dir.path().join("out.txt")).unwrap();
        assert_eq!(got, "a'b\"c$d\\e\nf");
    }
}
