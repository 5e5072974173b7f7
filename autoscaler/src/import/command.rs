//! The `import-config` command: reads the file, writes the configuration, reports the rest.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::{ImportError, Imported, Options, import};

/// sysexits(3): the input is not what was expected (not a runner configuration).
const DATA_ERROR: u8 = 65;
/// The input file cannot be read.
const NO_INPUT: u8 = 66;
/// The output cannot be written.
const CANNOT_CREATE: u8 = 73;

pub fn import_config(file: &Path, output: Option<&Path>, provisioners_dir: PathBuf) -> ExitCode {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("{}: cannot read it: {e}", file.display());
            return ExitCode::from(NO_INPUT);
        }
    };
    let imported = match import(&text, &Options { provisioners_dir }) {
        Ok(imported) => imported,
        Err(
            e @ (ImportError::NotToml(_) | ImportError::NoRunners | ImportError::NothingAutoscales),
        ) => {
            eprintln!("{}: {e}", file.display());
            return ExitCode::from(DATA_ERROR);
        }
    };
    let config = with_header(file, &imported);
    let written = match output {
        Some(path) => write_private(path, &config),
        None => std::io::stdout().write_all(config.as_bytes()),
    };
    if let Err(e) = written {
        eprintln!("cannot write the configuration: {e}");
        return ExitCode::from(CANNOT_CREATE);
    }
    eprint!("{}", summary(&imported));
    ExitCode::SUCCESS
}

fn with_header(file: &Path, imported: &Imported) -> String {
    format!(
        "# Imported from {} by `autoscaler import-config`. It holds the runners' tokens:\n\
         # keep it private. Check it with `autoscaler check-config --config FILE`.\n\n{}",
        file.display(),
        imported.config
    )
}

/// What could not be carried over and what needs a look, one setting a line.
pub fn summary(imported: &Imported) -> String {
    let mut out = String::new();
    for (title, notes) in [
        ("not carried over", &imported.not_carried),
        ("to check", &imported.to_check),
    ] {
        if notes.is_empty() {
            continue;
        }
        out.push_str(&format!("{title}:\n"));
        for note in notes {
            out.push_str(&format!("  {}: {}\n", note.key, note.reason));
        }
    }
    out
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())
}
