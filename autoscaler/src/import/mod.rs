//! `autoscaler import-config FILE`: a `gitlab-runner` `config.toml` whose runners autoscale
//! (`[runners.autoscaler]`, taskscaler; or `[runners.machine]`, docker+machine) turned into
//! this autoscaler's configuration, one pool per such runner, with every setting that could
//! not be carried over named and the reason given.

mod command;
mod machine;
mod runner;
mod source;
mod taskscaler;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use toml::{Table, Value};

pub use command::import_config;
pub use source::Note;
use source::Source;

/// Where the provisioners are installed (the layout of `deploy/`).
pub const DEFAULT_PROVISIONERS_DIR: &str = "/usr/local/lib/autoscaler/provisioners";

#[derive(Debug, Clone)]
pub struct Options {
    /// The directory holding `aws/provisioner`, `docker-machine/provisioner`, ...
    pub provisioners_dir: PathBuf,
}

/// The configuration made, and what it could not carry over or what needs a look.
#[derive(Debug)]
pub struct Imported {
    pub config: String,
    pub not_carried: Vec<Note>,
    /// Settings carried over that should be checked before the first start.
    pub to_check: Vec<Note>,
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("the file is not TOML: {0}")]
    NotToml(#[source] toml::de::Error),
    #[error("there is no [[runners]] entry: this is not a gitlab-runner configuration")]
    NoRunners,
    #[error(
        "no [[runners]] entry autoscales (none has [runners.autoscaler] or [runners.machine]): \
         there is nothing to import"
    )]
    NothingAutoscales,
}

/// What one `[[runners]]` entry became.
#[derive(Debug, Default)]
struct Pool {
    table: Table,
    url: Option<String>,
}

/// Everything the conversion found, as it goes.
#[derive(Debug, Default)]
struct Report {
    not_carried: Vec<Note>,
    to_check: Vec<Note>,
}

impl Report {
    fn not_carried(&mut self, key: String, reason: &str) {
        self.not_carried.push(Note {
            key,
            reason: reason.to_string(),
        });
    }

    fn check(&mut self, key: String, reason: &str) {
        self.to_check.push(Note {
            key,
            reason: reason.to_string(),
        });
    }
}

pub fn import(text: &str, options: &Options) -> Result<Imported, ImportError> {
    let document: Table = text.parse().map_err(ImportError::NotToml)?;
    let root = Source::new("", &document);
    let runners = root.tables("runners");
    if runners.is_empty() {
        return Err(ImportError::NoRunners);
    }
    let mut report = Report::default();
    let mut pools = Vec::new();
    let mut names = Vec::new();
    for entry in &runners {
        match runner::convert(entry, options, &mut names, &mut report) {
            Some(pool) => pools.push(pool),
            None => report.not_carried(
                entry.path().to_string(),
                "this runner does not autoscale (no [runners.autoscaler] or [runners.machine])",
            ),
        }
    }
    if pools.is_empty() {
        return Err(ImportError::NothingAutoscales);
    }
    let mut config = Table::new();
    global(&root, &pools, &mut config, &mut report);
    // The service's tables first, in the configuration reference's order, then the pools.
    let mut text = String::new();
    for name in ["server", "state", "upstream", "log"] {
        if let Some(table) = config.remove(name) {
            let mut one = Table::new();
            one.insert(name.into(), table);
            text.push_str(&toml::to_string(&one).expect("a TOML table serialises"));
            text.push('\n');
        }
    }
    let pools: Vec<Value> = pools.into_iter().map(|p| Value::Table(p.table)).collect();
    let mut one = Table::new();
    one.insert("pools".into(), Value::Array(pools));
    text.push_str(&toml::to_string(&one).expect("a TOML table serialises"));
    Ok(Imported {
        config: text,
        not_carried: report.not_carried,
        to_check: report.to_check,
    })
}

/// The service's own tables, from `config.toml`'s global keys and the runners' GitLab URL.
fn global(root: &Source<'_>, pools: &[Pool], config: &mut Table, report: &mut Report) {
    let mut server = Table::new();
    server.insert("listen".into(), "0.0.0.0:8090".into());
    server.insert(
        "public_url".into(),
        "http://autoscaler.internal:8090".into(),
    );
    report.check(
        "server.public_url".into(),
        "set to the address at which the machines reach this autoscaler",
    );
    config.insert("server".into(), Value::Table(server));
    let mut state = Table::new();
    state.insert("dir".into(), "/var/lib/autoscaler/state".into());
    config.insert("state".into(), Value::Table(state));

    let mut upstream = Table::new();
    let url = pools.iter().find_map(|p| p.url.clone());
    upstream.insert(
        "url".into(),
        url.clone()
            .unwrap_or_else(|| "https://gitlab.example.com".into())
            .into(),
    );
    if url.is_none() {
        report.check(
            "upstream.url".into(),
            "no runner has a url: set GitLab's URL",
        );
    }
    for (i, other) in pools.iter().enumerate() {
        if other.url.is_some() && other.url != url {
            report.not_carried(
                format!("runners[{i}].url"),
                "one autoscaler talks to one GitLab: run another autoscaler for this one",
            );
        }
    }
    if let Some(seconds) = root.int("check_interval").filter(|s| *s > 0) {
        upstream.insert("poll_interval".into(), format!("{seconds}s").into());
    }
    config.insert("upstream".into(), Value::Table(upstream));
    let mut log = Table::new();
    if let Some(level) = root.str("log_level") {
        let level = match level {
            "fatal" | "panic" => "error",
            other => other,
        };
        log.insert("level".into(), level.into());
    }
    if let Some(format) = root.str("log_format") {
        let format = if format == "json" { "json" } else { "text" };
        log.insert("format".into(), format.into());
    }
    if !log.is_empty() {
        config.insert("log".into(), Value::Table(log));
    }
    root.drop(
        "concurrent",
        "the most jobs at once is the sum of max_machines × capacity_per_machine over the pools",
        &mut report.not_carried,
    );
    root.drop(
        "listen_address",
        "metrics are served by the admin API: GET /metrics on [admin] listen",
        &mut report.not_carried,
    );
    root.rest(
        "a setting of the gitlab-runner process itself, with no equivalent here",
        &mut report.not_carried,
    );
}
