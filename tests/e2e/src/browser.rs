//! Headless Chromium on the status page: Debian's `chromium`, driven by Playwright for Python
//! (`fixtures/status-page/check.py`, installed pinned into a virtual environment under the
//! target directory by `fixtures/status-page/install`; no browser is downloaded).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::stack::repo_root;

/// The browser Debian installs (`cargo xtask test` installs the `chromium` package).
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// How long one look at the page may take, browser start included (each wait inside it is
/// bounded by `check.py`).
const LOOK_TIMEOUT: Duration = Duration::from_secs(180);

/// What the page must show, and whether to keep a screenshot of it.
#[derive(Debug, Serialize)]
pub struct Expect {
    /// The admin token to paste into the page (`None`: the API wants none).
    pub token: Option<String>,
    pub machines: Vec<String>,
    pub waiting: Vec<u64>,
    pub running: Vec<u64>,
    pub screenshot: Option<PathBuf>,
    pub chromium: &'static str,
}

/// A console message of the page, and whether it came before the token was pasted.
#[derive(Debug, Deserialize)]
pub struct Console {
    pub phase: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub text: String,
}

/// What the page showed (see `check.py`).
#[derive(Debug, Deserialize)]
pub struct Report {
    /// Why a wait on the page ran out, with the page's text then (`body`).
    pub failed: Option<String>,
    pub body: Option<String>,
    pub landed_on: Option<String>,
    pub asked_for_token: Option<String>,
    pub console: Vec<Console>,
    pub page_errors: Vec<serde_json::Value>,
    #[serde(default)]
    pub refreshed: Vec<String>,
    #[serde(default)]
    pub machines_shown: Vec<String>,
    #[serde(default)]
    pub waiting_shown: Vec<String>,
    #[serde(default)]
    pub running_shown: Vec<String>,
    #[serde(default)]
    pub pools_shown: Vec<String>,
    #[serde(default)]
    pub wait_points: usize,
    #[serde(default)]
    pub wait_summary: String,
    #[serde(default)]
    pub problem_visible: bool,
    #[serde(default)]
    pub problem: String,
    #[serde(default)]
    pub token_form_visible: bool,
}

/// The virtual environment with Playwright, installed on first use (Python 3 and PyPI needed).
fn install() -> Result<PathBuf> {
    crate::python_runner::install_venv("status-page")
}

/// Opens `admin_url` in headless Chromium and reports what the page showed.
pub async fn look(admin_url: &str, expect: &Expect) -> Result<Report> {
    if !std::path::Path::new(CHROMIUM).exists() {
        bail!("{CHROMIUM} is missing: install Debian's chromium package (cargo xtask test does)");
    }
    let venv = tokio::task::spawn_blocking(install).await??;
    let mut command = tokio::process::Command::new(venv.join("bin/python"));
    command
        .arg(repo_root().join("tests/e2e/fixtures/status-page/check.py"))
        .arg(admin_url)
        .arg(serde_json::to_string(expect)?)
        .kill_on_drop(true);
    let out = tokio::time::timeout(LOOK_TIMEOUT, command.output())
        .await
        .context("the browser did not finish in time")??;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("check.py failed ({}): {stderr}", out.status);
    }
    serde_json::from_slice(&out.stdout).with_context(|| format!("check.py's report: {stderr}"))
}
