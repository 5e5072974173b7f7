//! The conformance kit: runs a provisioner through every clause of `api-spec/provisioner.md`
//! ("Checking a provisioner") and reports each clause that failed, by number and name.
//!
//! It drives the script through the same runner the service uses, but looks at raw results so
//! that it can also judge what the service would merely refuse: stray output, schema violations,
//! calls that ran past their timeout.

mod clauses;
mod power;
mod report;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use serde_json::Value;

use super::script::{RawCall, interpret};
use super::{ScriptProvisioner, Timeouts};
pub use report::{Clause, Outcome, Report};

/// What to check, and how.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    pub path: PathBuf,
    pub pool: String,
    pub env: BTreeMap<String, String>,
    pub timeouts: Timeouts,
    /// Pause between `status` polls while waiting for a state.
    pub poll_interval: Duration,
}

impl CheckOptions {
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            pool: "check".into(),
            env: BTreeMap::new(),
            timeouts: Timeouts::default(),
            poll_interval: Duration::from_millis(500),
        }
    }
}

/// Clause 12 judges every call, so its outcome is known last; the stop/start clauses after it
/// were added later and keep the first twelve's numbers.
const SCHEMA_CLAUSE: usize = 12;

const CLAUSES: [&str; 17] = [
    "info answers protocol 1 with a name and a version",
    "create of one machine answers it with the same key, an id and a state",
    "create repeated with the same key answers the same id (idempotency)",
    "status reaches running within the create timeout, with an address",
    "list returns the machine with the labels it was given",
    "destroy answers gone or stopping, and status then reaches gone",
    "list no longer returns the machine",
    "destroy of the destroyed machine succeeds (idempotency)",
    "status of an unknown id answers gone",
    "a request that is not valid JSON is refused with a non-zero exit",
    "an unknown verb is refused with a non-zero exit",
    "every response is valid against the schemas, stdout holds nothing but it, and each call finished within its timeout",
    "stop of a running machine reaches stopped, keeping its id and labels",
    "stop of a stopped machine answers stopped (a no-op)",
    "start of the stopped machine reaches running, with an address",
    "start of a running machine answers running (a no-op)",
    "destroy of a stopped machine answers gone or stopping, and status then reaches gone",
];

/// The schemas of `api-spec/schemas`, compiled once.
static SCHEMAS: LazyLock<BTreeMap<&'static str, jsonschema::Validator>> = LazyLock::new(|| {
    let sources = [
        (
            "info",
            include_str!("../../../../api-spec/schemas/info.response.json"),
        ),
        (
            "create",
            include_str!("../../../../api-spec/schemas/create.response.json"),
        ),
        (
            "list",
            include_str!("../../../../api-spec/schemas/list.response.json"),
        ),
        (
            "status",
            include_str!("../../../../api-spec/schemas/status.response.json"),
        ),
        (
            "destroy",
            include_str!("../../../../api-spec/schemas/destroy.response.json"),
        ),
        (
            "stop",
            include_str!("../../../../api-spec/schemas/stop.response.json"),
        ),
        (
            "start",
            include_str!("../../../../api-spec/schemas/start.response.json"),
        ),
        (
            "error",
            include_str!("../../../../api-spec/schemas/error.response.json"),
        ),
    ];
    sources
        .into_iter()
        .map(|(verb, text)| {
            let schema: Value =
                serde_json::from_str(text).expect("the shipped schemas are valid JSON");
            let validator =
                jsonschema::validator_for(&schema).expect("the shipped schemas are valid schemas");
            (verb, validator)
        })
        .collect()
});

struct Kit {
    p: ScriptProvisioner,
    options: CheckOptions,
    outcomes: Vec<Outcome>,
    /// Clause 12's findings, gathered from every call.
    violations: Vec<String>,
    /// Whether `info` declared `stop_start` (unknown when `info` failed).
    stop_start: Option<bool>,
}

/// Runs every clause against the provisioner at `options.path`.
pub async fn check(options: CheckOptions) -> Report {
    let p = ScriptProvisioner::new(
        options.path.clone(),
        &options.pool,
        &format!("check-{:08x}", rand::random::<u32>()),
        options.env.clone(),
        options.timeouts.clone(),
        4,
    );
    let mut kit = Kit {
        p,
        options,
        outcomes: Vec::new(),
        violations: Vec::new(),
        stop_start: None,
    };
    let name = kit.run().await;
    let mut outcomes = std::mem::take(&mut kit.outcomes);
    let schemas = if kit.violations.is_empty() {
        Outcome::Passed
    } else {
        Outcome::Failed(kit.violations.join("; "))
    };
    outcomes.insert((SCHEMA_CLAUSE - 1).min(outcomes.len()), schemas);
    Report {
        provisioner: format!("{} ({name})", kit.options.path.display()),
        clauses: CLAUSES
            .iter()
            .zip(outcomes)
            .enumerate()
            .map(|(i, (name, outcome))| Clause {
                number: u8::try_from(i + 1).unwrap_or(u8::MAX),
                name,
                outcome,
            })
            .collect(),
    }
}

impl Kit {
    /// Calls a verb and checks what clause 12 asks of every call. Returns the stdout of a
    /// successful call, or why it was not successful.
    async fn call(
        &mut self,
        verb: &'static str,
        id: Option<&str>,
        request: &[u8],
        timeout: Duration,
    ) -> Result<Value, String> {
        let mut args = vec![verb];
        args.extend(id);
        let raw = match self.p.call_raw(&args, request, timeout, id).await {
            Ok(raw) => raw,
            Err(e) => return Err(e.to_string()),
        };
        self.judge(verb, &raw, timeout);
        let stdout = interpret(raw, timeout).map_err(|e| e.to_string())?;
        serde_json::from_slice(&stdout)
            .map_err(|e| format!("{verb}: stdout is not one JSON object ({e})"))
    }

    fn judge(&mut self, verb: &str, raw: &RawCall, timeout: Duration) {
        if raw.timed_out {
            self.violations
                .push(format!("{verb} ran past its {timeout:?} timeout"));
            return;
        }
        if raw.stdout_overflow {
            self.violations
                .push(format!("{verb} printed more than 1 MiB"));
            return;
        }
        let success = raw.status.is_some_and(|s| s.success());
        let trimmed = String::from_utf8_lossy(&raw.stdout).trim().to_string();
        if trimmed.is_empty() {
            if success {
                self.violations
                    .push(format!("{verb} succeeded with nothing on stdout"));
            }
            return;
        }
        let value: Value = match serde_json::from_str(&trimmed) {
            Ok(v) => v,
            Err(_) => {
                let shown: String = trimmed.chars().take(80).collect();
                self.violations.push(format!(
                    "{verb}: stdout is not exactly one JSON object: {shown:?}"
                ));
                return;
            }
        };
        let schema = if success { verb } else { "error" };
        if let Some(validator) = SCHEMAS.get(schema) {
            for error in validator.iter_errors(&value).take(3) {
                let at = error.instance_path().to_string();
                let at = if at.is_empty() {
                    "the response".to_string()
                } else {
                    at
                };
                self.violations.push(format!("{verb}: {at}: {error}"));
            }
        }
    }

    fn request(&self, fields: Value) -> Vec<u8> {
        serde_json::to_vec(&self.p.request(fields)).unwrap_or_default()
    }

    fn record(&mut self, outcome: Outcome) {
        self.outcomes.push(outcome);
    }

    /// Skips the machine clauses (up to clause 8) that could not run.
    fn skip_machine_clauses(&mut self, why: &str) {
        while self.outcomes.len() < 8 {
            self.record(Outcome::Skipped(why.to_string()));
        }
    }

    /// Runs every clause but 12 (which judges them all); returns the provisioner's name for
    /// the report.
    async fn run(&mut self) -> String {
        let name = self.info().await;
        self.machine_clauses().await;
        self.error_clauses().await;
        self.power_clauses().await;
        name
    }
}
