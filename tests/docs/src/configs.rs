//! `toml` blocks are configurations: each passes `autoscaler check-config`, in a scratch root
//! where the absolute paths it names exist (as `deploy/check` installs the samples).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use toml::{Table, Value};

/// Where paths of the book's examples live on a real VM; moved into the scratch root.
const ROOTED: &[&str] = &["/etc/", "/var/", "/usr/", "/opt/", "/srv/", "/home/"];

/// Keys naming a file (or the book's directory) that must exist for `check-config` to pass.
fn names_a_file(key: &str) -> bool {
    key.ends_with("_file") || key == "command" || key == "binary" || key == "book_dir"
}

/// A block as the configuration `check-config` reads: a block with `[[pools]]` as written, a
/// fragment merged into `base` (its `[pools.…]` tables into the base's single pool).
pub fn complete(block: &str, base: &str) -> Result<Table> {
    let fragment: Table = toml::from_str(block).context("the block is not valid TOML")?;
    if matches!(fragment.get("pools"), Some(Value::Array(_))) {
        return Ok(fragment);
    }
    let mut config: Table = toml::from_str(base).context("docs/examples/base.toml")?;
    for (key, value) in fragment {
        if key == "pools" {
            let Some(Value::Array(pools)) = config.get_mut("pools") else {
                bail!("docs/examples/base.toml has no [[pools]]");
            };
            let Some(Value::Table(pool)) = pools.first_mut() else {
                bail!("docs/examples/base.toml's pool is not a table");
            };
            merge(pool, value);
        } else {
            merge_key(&mut config, key, value);
        }
    }
    Ok(config)
}

fn merge(into: &mut Table, value: Value) {
    if let Value::Table(table) = value {
        for (key, value) in table {
            merge_key(into, key, value);
        }
    }
}

fn merge_key(into: &mut Table, key: String, value: Value) {
    match (into.get_mut(&key), value) {
        (Some(Value::Table(existing)), Value::Table(more)) => {
            merge(existing, Value::Table(more));
        }
        // A fragment's `[[pools.sources]]` replaces the base's `[pools.provisioner]`: a pool has
        // one or the other.
        (_, value) => {
            if key == "sources" {
                into.remove("provisioner");
            }
            into.insert(key, value);
        }
    }
}

/// Moves every rooted path of `config` under `root` and creates the files its `*_file`,
/// `command`, `binary` and `book_dir` keys name (a dummy token; an executable for a command; a
/// directory with an `index.html` for the book), so that
/// `check-config` judges the configuration and not this machine. `provisioners/` of the
/// repository is reachable where the samples install it.
pub fn install(config: &mut Table, root: &Path) -> Result<()> {
    let shipped = root.join("usr/local/lib/autoscaler/provisioners");
    if !shipped.exists() {
        std::fs::create_dir_all(shipped.parent().context("no parent")?)?;
        std::os::unix::fs::symlink(crate::repo_root().join("provisioners"), &shipped)?;
    }
    let mut files = Vec::new();
    reroot(config, root, &mut files);
    write_tls_files(config)?;
    for (key, path) in files {
        let path = if path.is_absolute() {
            path
        } else {
            root.join("etc/autoscaler").join(path)
        };
        if path.exists() {
            continue;
        }
        std::fs::create_dir_all(path.parent().context("a file at /")?)?;
        if key == "book_dir" {
            // The built book: a directory with its first page.
            std::fs::create_dir_all(&path)?;
            std::fs::write(path.join("index.html"), "<h1>book</h1>\n")?;
        } else if key == "command" || key == "binary" {
            std::fs::write(&path, "#!/bin/sh\nexit 0\n")?;
            let mut perms = std::fs::metadata(&path)?.permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
            std::fs::set_permissions(&path, perms)?;
        } else {
            std::fs::write(&path, "glrt-docs-check-dummy\n")?;
            let mut perms = std::fs::metadata(&path)?.permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o600);
            std::fs::set_permissions(&path, perms)?;
        }
    }
    Ok(())
}

/// `[server.tls]` names a certificate and key that must parse and belong together: a fresh
/// self-signed pair is written where the example says (the CA bundle is that certificate).
fn write_tls_files(config: &Table) -> Result<()> {
    let Some(Value::Table(tls)) = config.get("server").and_then(|s| s.get("tls")) else {
        return Ok(());
    };
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec!["autoscaler.internal".to_string()])?
        .self_signed(&key)?;
    for (name, pem) in [
        ("certificate", cert.pem()),
        ("ca_bundle", cert.pem()),
        ("key", key.serialize_pem()),
    ] {
        if let Some(Value::String(path)) = tls.get(name) {
            let path = Path::new(path);
            std::fs::create_dir_all(path.parent().context("a file at /")?)?;
            std::fs::write(path, pem)?;
        }
    }
    Ok(())
}

fn reroot(table: &mut Table, root: &Path, files: &mut Vec<(String, PathBuf)>) {
    for (key, value) in table.iter_mut() {
        match value {
            Value::String(s) => {
                if ROOTED.iter().any(|p| s.starts_with(p)) {
                    *s = format!("{}{s}", root.display());
                }
                if names_a_file(key) {
                    files.push((key.clone(), PathBuf::from(s.as_str())));
                }
            }
            Value::Table(t) => reroot(t, root, files),
            Value::Array(items) => {
                for item in items {
                    if let Value::Table(t) = item {
                        reroot(t, root, files);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Runs `autoscaler check-config` on `config`, installed under a fresh scratch root; the
/// error carries check-config's own output.
pub fn check(config: &Table) -> Result<String> {
    let scratch = tempfile::tempdir()?;
    let mut config = config.clone();
    install(&mut config, scratch.path())?;
    let file = scratch.path().join("etc/autoscaler/autoscaler.toml");
    std::fs::create_dir_all(file.parent().context("no parent")?)?;
    std::fs::write(&file, toml::to_string(&config)?)?;
    autoscaler(
        &[
            "check-config".as_ref(),
            "--config".as_ref(),
            file.as_os_str(),
        ],
        "check-config",
    )
}

/// Runs `autoscaler import-config` on a gitlab-runner `config.toml`.
pub fn import(runner_config: &str) -> Result<String> {
    let scratch = tempfile::tempdir()?;
    let file = scratch.path().join("config.toml");
    std::fs::write(&file, runner_config)?;
    let out = scratch.path().join("autoscaler.toml");
    autoscaler(
        &[
            "import-config".as_ref(),
            file.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ],
        "import-config",
    )
}

/// Runs the debug build's `autoscaler` with `args`; its output, or an error carrying it.
fn autoscaler(args: &[&std::ffi::OsStr], what: &str) -> Result<String> {
    let output = std::process::Command::new(crate::debug_binary("autoscaler")?)
        .args(args)
        .env_remove("AUTOSCALER_CONFIG")
        .output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() {
        bail!("{what} refused it ({}):\n{text}", output.status);
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "[upstream]\nurl = \"https://g\"\n[[pools]]\nname = \"linux\"\n[pools.provisioner]\ncommand = \"/usr/p\"\n";

    #[test]
    fn a_fragment_goes_into_the_base_pool() {
        let config = complete(
            "[pools.scaling]\nidle_count = 2\n[log]\nlevel = \"debug\"\n",
            BASE,
        )
        .unwrap();
        let pool = &config["pools"].as_array().unwrap()[0];
        assert_eq!(pool["scaling"]["idle_count"].as_integer(), Some(2));
        assert_eq!(pool["name"].as_str(), Some("linux"));
        assert_eq!(config["log"]["level"].as_str(), Some("debug"));
    }

    #[test]
    fn sources_replace_the_base_provisioner() {
        let config = complete(
            "[[pools.sources]]\nname = \"spot\"\ncommand = \"/usr/p\"\n",
            BASE,
        )
        .unwrap();
        let pool = config["pools"].as_array().unwrap()[0].as_table().unwrap();
        assert!(pool.get("provisioner").is_none());
        assert!(pool.get("sources").is_some());
    }

    #[test]
    fn rooted_paths_move_and_their_files_appear() {
        let dir = tempfile::tempdir().unwrap();
        let mut config: Table =
            toml::from_str("[[pools]]\nupstream_token_file = \"/etc/autoscaler/t\"\n").unwrap();
        install(&mut config, dir.path()).unwrap();
        let moved = config["pools"].as_array().unwrap()[0]["upstream_token_file"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(moved.starts_with(&dir.path().display().to_string()));
        assert!(Path::new(&moved).is_file());
    }
}
