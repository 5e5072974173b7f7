//! The conformance kit: runs a provisioner through every clause of `api-spec/provisioner.md`
//! ("Checking a provisioner") and reports each clause that failed, by number and name.
//!
//! It drives the script through the same runner the service uses, but looks at raw results so
//! that it can also judge what the service would merely refuse: stray output, schema violations,
//! calls that ran past their timeout.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use serde_json::{Value, json};

use super::protocol::{self, CreateItem};
use super::script::{RawCall, interpret};
use super::{Labels, ScriptProvisioner, Timeouts};
use crate::core::reconcile::ProviderState;

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

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Failed(String),
    Skipped(String),
}

#[derive(Debug, Clone)]
pub struct Clause {
    pub number: u8,
    pub name: &'static str,
    pub outcome: Outcome,
}

#[derive(Debug, Clone)]
pub struct Report {
    pub provisioner: String,
    pub clauses: Vec<Clause>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.clauses.iter().all(|c| c.outcome == Outcome::Passed)
    }

    pub fn failed(&self) -> Vec<&Clause> {
        self.clauses
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Failed(_)))
            .collect()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Provisioner: {}", self.provisioner)?;
        for c in &self.clauses {
            match &c.outcome {
                Outcome::Passed => writeln!(f, "  ok    {:>2}  {}", c.number, c.name)?,
                Outcome::Failed(why) => writeln!(
                    f,
                    "  FAIL  {:>2}  {}\n              {why}",
                    c.number, c.name
                )?,
                Outcome::Skipped(why) => {
                    writeln!(f, "  skip  {:>2}  {} ({why})", c.number, c.name)?
                }
            }
        }
        let count = |p: fn(&Outcome) -> bool| self.clauses.iter().filter(|c| p(&c.outcome)).count();
        write!(
            f,
            "{} clauses: {} passed, {} failed, {} skipped",
            self.clauses.len(),
            count(|o| *o == Outcome::Passed),
            count(|o| matches!(o, Outcome::Failed(_))),
            count(|o| matches!(o, Outcome::Skipped(_)))
        )
    }
}

const CLAUSES: [&str; 12] = [
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
];

/// The schemas of `api-spec/schemas`, compiled once.
static SCHEMAS: LazyLock<BTreeMap<&'static str, jsonschema::Validator>> = LazyLock::new(|| {
    let sources = [
        (
            "info",
            include_str!("../../../api-spec/schemas/info.response.json"),
        ),
        (
            "create",
            include_str!("../../../api-spec/schemas/create.response.json"),
        ),
        (
            "list",
            include_str!("../../../api-spec/schemas/list.response.json"),
        ),
        (
            "status",
            include_str!("../../../api-spec/schemas/status.response.json"),
        ),
        (
            "destroy",
            include_str!("../../../api-spec/schemas/destroy.response.json"),
        ),
        (
            "error",
            include_str!("../../../api-spec/schemas/error.response.json"),
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
    };
    let name = kit.run().await;
    let mut outcomes = std::mem::take(&mut kit.outcomes);
    outcomes.push(if kit.violations.is_empty() {
        Outcome::Passed
    } else {
        Outcome::Failed(kit.violations.join("; "))
    });
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

    /// Runs clauses 1–11; returns the provisioner's name for the report.
    async fn run(&mut self) -> String {
        let name = self.info().await;
        self.machine_clauses().await;
        self.error_clauses().await;
        name
    }

    /// Clause 1.
    async fn info(&mut self) -> String {
        let timeouts = self.options.timeouts.clone();
        // 1. info
        let req = self.request(json!({}));
        match self.call("info", None, &req, timeouts.info).await {
            Ok(v) => match protocol::parse_info(v.to_string().as_bytes()) {
                Ok(info) => {
                    self.record(Outcome::Passed);
                    format!("{} {}", info.name, info.version)
                }
                Err(e) => {
                    self.record(Outcome::Failed(e.to_string()));
                    "unnamed".into()
                }
            },
            Err(e) => {
                self.record(Outcome::Failed(e));
                "no answer to info".into()
            }
        }
    }

    /// Clauses 2–8, on one machine.
    async fn machine_clauses(&mut self) {
        let timeouts = self.options.timeouts.clone();
        let key = format!("check-{:08x}", rand::random::<u32>());
        let labels: Labels = [
            (
                "autoscaler-id".to_string(),
                format!("check-{:08x}", rand::random::<u32>()),
            ),
            ("autoscaler-pool".to_string(), self.options.pool.clone()),
            ("autoscaler-key".to_string(), key.clone()),
        ]
        .into();
        let public_key = match throwaway_public_key() {
            Ok(k) => k,
            Err(e) => {
                self.record(Outcome::Failed(format!(
                    "cannot make an SSH key for the test: {e}"
                )));
                self.skip_machine_clauses("needs clause 2");
                return;
            }
        };
        let item = CreateItem {
            key: key.clone(),
            labels: labels.clone(),
            user_data: None,
        };
        let create = self
            .request(json!({"machines": [item], "ssh_public_key": public_key, "user_data": null}));
        let id = match self.create(&create, &item).await {
            Ok(id) => {
                self.record(Outcome::Passed);
                id
            }
            Err(e) => {
                self.record(Outcome::Failed(e));
                self.skip_machine_clauses("needs clause 2");
                return;
            }
        };
        let outcome = match self.create(&create, &item).await {
            Ok(again) if again == id => Outcome::Passed,
            Ok(again) => Outcome::Failed(format!("the same key gave {id:?}, then {again:?}")),
            Err(e) => Outcome::Failed(e),
        };
        self.record(outcome);

        // 4. status reaches running
        let outcome = match self
            .wait_for(&id, ProviderState::Running, timeouts.create)
            .await
        {
            Ok(status) if status.address.as_deref().is_some_and(|a| !a.is_empty()) => {
                Outcome::Passed
            }
            Ok(_) => Outcome::Failed("running without an address".into()),
            Err(e) => Outcome::Failed(e),
        };
        self.record(outcome);

        // 5. list returns it with its labels
        let owner: Labels = labels
            .iter()
            .filter(|(k, _)| *k != "autoscaler-key")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let outcome = match self.list(&owner).await {
            Ok(machines) => match machines.iter().find(|m| m.id == id) {
                Some(m) if labels.iter().all(|(k, v)| m.labels.get(k) == Some(v)) => {
                    Outcome::Passed
                }
                Some(m) => Outcome::Failed(format!(
                    "listed with labels {:?}, created with {labels:?}",
                    m.labels
                )),
                None => Outcome::Failed(format!("{id} is not in the list")),
            },
            Err(e) => Outcome::Failed(e),
        };
        self.record(outcome);

        // 6. destroy, then gone
        let outcome = match self.destroy(&id).await {
            Ok(_) => match self
                .wait_for(&id, ProviderState::Gone, timeouts.destroy)
                .await
            {
                Ok(_) => Outcome::Passed,
                Err(e) => Outcome::Failed(format!("after destroy: {e}")),
            },
            Err(e) => Outcome::Failed(format!("{e} (the machine may be left behind: {id})")),
        };
        self.record(outcome);

        // 7. list no longer returns it
        let outcome = match self.list(&owner).await {
            Ok(machines)
                if machines
                    .iter()
                    .any(|m| m.id == id && m.state != ProviderState::Gone) =>
            {
                Outcome::Failed(format!("{id} is still listed after it was destroyed"))
            }
            Ok(_) => Outcome::Passed,
            Err(e) => Outcome::Failed(e),
        };
        self.record(outcome);

        // 8. destroy again
        let outcome = match self.destroy(&id).await {
            Ok(protocol::Destroyed::Gone) => Outcome::Passed,
            Ok(other) => Outcome::Failed(format!("a second destroy answered {other:?}, not gone")),
            Err(e) => Outcome::Failed(format!("a second destroy failed: {e}")),
        };
        self.record(outcome);
    }

    /// Clauses 9–11: answers to requests that name nothing real.
    async fn error_clauses(&mut self) {
        let timeouts = self.options.timeouts.clone();
        // 9. unknown id
        let unknown = format!("check-unknown-{:08x}", rand::random::<u32>());
        let req = self.request(json!({"id": unknown}));
        let outcome = match self
            .call("status", Some(&unknown), &req, timeouts.status)
            .await
        {
            Ok(v) => match protocol::parse_status(v.to_string().as_bytes(), &unknown) {
                Ok(s) if s.state == ProviderState::Gone => Outcome::Passed,
                Ok(s) => Outcome::Failed(format!("answered {:?}", s.state)),
                Err(e) => Outcome::Failed(e.to_string()),
            },
            Err(e) => Outcome::Failed(e),
        };
        self.record(outcome);

        // 10. invalid JSON on stdin
        let outcome = self
            .refused(&["list"], b"this is { not JSON", timeouts.list)
            .await;
        self.record(outcome);
        // 11. unknown verb
        let req = self.request(json!({}));
        let outcome = self.refused(&["frobnicate"], &req, timeouts.info).await;
        self.record(outcome);
    }

    async fn create(&mut self, request: &[u8], item: &CreateItem) -> Result<String, String> {
        let timeout = self.options.timeouts.create;
        let v = self.call("create", None, request, timeout).await?;
        let created = protocol::parse_created(v.to_string().as_bytes(), std::slice::from_ref(item))
            .map_err(|e| e.to_string())?;
        match created.as_slice() {
            [one] => Ok(one.id.clone()),
            other => Err(format!("answered {} machines for one key", other.len())),
        }
    }

    async fn list(&mut self, labels: &Labels) -> Result<Vec<protocol::ListedMachine>, String> {
        let timeout = self.options.timeouts.list;
        let req = self.request(json!({"labels": labels}));
        let v = self.call("list", None, &req, timeout).await?;
        protocol::parse_list(v.to_string().as_bytes()).map_err(|e| e.to_string())
    }

    async fn destroy(&mut self, id: &str) -> Result<protocol::Destroyed, String> {
        let timeout = self.options.timeouts.destroy;
        let req = self.request(json!({"id": id}));
        let v = self.call("destroy", Some(id), &req, timeout).await?;
        protocol::parse_destroyed(v.to_string().as_bytes(), id).map_err(|e| e.to_string())
    }

    /// Polls `status` until the machine is in `state`, at most `within`.
    async fn wait_for(
        &mut self,
        id: &str,
        state: ProviderState,
        within: Duration,
    ) -> Result<protocol::Status, String> {
        let started = crate::clock::monotonic();
        let timeout = self.options.timeouts.status;
        let req = self.request(json!({"id": id}));
        loop {
            let v = self.call("status", Some(id), &req, timeout).await?;
            let status =
                protocol::parse_status(v.to_string().as_bytes(), id).map_err(|e| e.to_string())?;
            if status.state == state {
                return Ok(status);
            }
            if started.elapsed() >= within {
                return Err(format!(
                    "still {:?} after {within:?}, expected {state:?}",
                    status.state
                ));
            }
            tokio::time::sleep(self.options.poll_interval).await;
        }
    }

    async fn refused(&mut self, args: &[&str], stdin: &[u8], timeout: Duration) -> Outcome {
        match self.p.call_raw(args, stdin, timeout, None).await {
            Ok(raw) if raw.timed_out => {
                Outcome::Failed(format!("did not answer within {timeout:?}"))
            }
            Ok(raw) if raw.status.is_some_and(|s| s.success()) => {
                Outcome::Failed("exited 0 (it must refuse)".into())
            }
            Ok(_) => Outcome::Passed,
            Err(e) => Outcome::Failed(e.to_string()),
        }
    }
}

/// A public key to authorise on the test machine; its private half is thrown away.
fn throwaway_public_key() -> Result<String, String> {
    let key = russh::keys::PrivateKey::random(&mut rand::rng(), russh::keys::Algorithm::Ed25519)
        .map_err(|e| e.to_string())?;
    let mut public = key.public_key().clone();
    public.set_comment("autoscaler-provisioner-check");
    public.to_openssh().map_err(|e| e.to_string())
}
