//! The status page in a real browser: headless Chromium (Debian's `chromium`, driven by
//! Playwright, see `e2e::browser`) opens the admin listener of a running stack as an operator
//! would, is asked for the token, and then shows every machine, the job waiting and those
//! running, and the hour's waits, refreshing by itself with no error in its console.
//!
//! `STATUS_PAGE_SCREENSHOT=/abs/path.png` keeps a screenshot of the page (the book's,
//! `docs/src/operating/status-page.png`, is made so).

use anyhow::{Context, Result, ensure};
use autoscaler::core::machine::MachineState;
use e2e::browser::{CHROMIUM, Expect, look};
use e2e::counting::{WITHIN, rig};
use fake_gitlab::control::JobStatus;
use reqwest::Method;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_the_machines_and_jobs_of_a_running_stack() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let refuse = dir.path().join("refuse-creates");
    let refuse_env = refuse.display().to_string();
    let r = rig(
        &[],
        "max_machines = 3\nidle_time = \"10m\"",
        "",
        &[("REFUSE_CREATES_FILE", &refuse_env)],
    )
    .await?;
    let a = &r.autoscaler;

    // A job that came and went: the chart has a wait to draw.
    let quick = r.enqueue(r.job(&["echo quick"])).await?;
    let view = r.gitlab.control.wait_final(quick, WITHIN).await?;
    ensure!(view.status == JobStatus::Success, "{view:?}");
    // Two long jobs run; then the cloud is out of capacity, and a third waits for a machine.
    let long = r.job(&["sleep 600"]);
    let running = vec![
        r.enqueue(long.clone()).await?,
        r.enqueue(long.clone()).await?,
    ];
    for id in &running {
        r.wait_started(*id).await?;
    }
    std::fs::write(&refuse, "")?;
    let refused_from = e2e::replay::wall_ms();
    // Machines made ahead of the long jobs finish their way up: every create asked for from
    // now on is refused, but one asked for before may be past the provisioner's check already,
    // so a machine `requested` before now is waited for until its create is settled ...
    a.wait_machines(WITHIN, "machines on their way are up", |list| {
        use MachineState::{Booting, Creating, Injecting, Requested};
        !list.iter().any(|m| {
            matches!(m.state, Creating | Booting | Injecting)
                || (m.state == Requested && m.created_at <= refused_from)
        })
    })
    .await?;
    // ... and would take the third job: the operator destroys the idle ones (the page shows
    // them gone).
    for m in a.machines().await? {
        if m.state == MachineState::Ready {
            let response = a
                .admin_request(Method::POST, &format!("/machines/{}/destroy", m.id))
                .send()
                .await?;
            ensure!(
                response.status().is_success(),
                "destroy {}: {response:?}",
                m.id
            );
        }
    }
    a.wait_machines(WITHIN, "no machine is, or will be, idle", |list| {
        use MachineState::{Busy, Destroying, Failed, Gone, Requested};
        // A machine `requested` now was asked for after the refusals began: its create fails.
        list.iter()
            .all(|m| matches!(m.state, Busy | Destroying | Gone | Failed | Requested))
    })
    .await?;
    let waiting = r.enqueue(long).await?;
    r.wait_taken(waiting).await?;
    let listed = a.machines().await?;
    let machines: Vec<String> = listed.iter().map(|m| m.id.clone()).collect();
    let states: Vec<_> = listed.iter().map(|m| (&m.id, m.state)).collect();
    ensure!(
        states
            .iter()
            .filter(|(_, s)| *s == MachineState::Busy)
            .count()
            == 2,
        "two machines run the long jobs: {states:?}"
    );

    let expect = Expect {
        token: Some(
            a.admin_token
                .clone()
                .context("the rig sets an admin token")?,
        ),
        machines: machines.clone(),
        waiting: vec![waiting],
        running: running.clone(),
        screenshot: std::env::var_os("STATUS_PAGE_SCREENSHOT").map(Into::into),
        chromium: CHROMIUM,
    };
    let report = look(&a.admin_url, &expect).await?;
    ensure!(
        report.failed.is_none(),
        "the page did not show it all: {:?}\npage text: {}\nconsole: {:?}",
        report.failed,
        report.body.as_deref().unwrap_or_default(),
        report.console
    );

    // `/` leads to the page, which asks for the token: its calls are refused without it.
    ensure!(
        report.landed_on.as_deref() == Some(&format!("{}/ui", a.admin_url)),
        "{:?}",
        report.landed_on
    );
    let asked = report.asked_for_token.as_deref().unwrap_or_default();
    ensure!(
        asked.contains("token"),
        "the page asks for the token: {asked:?}"
    );
    for message in report.console.iter().filter(|m| m.kind == "error") {
        // Chromium logs each refused call; the page itself logs nothing.
        ensure!(
            message.phase == "before_token" && message.text.contains("401"),
            "a console error: {message:?}"
        );
    }
    ensure!(
        report.page_errors.is_empty(),
        "errors in the page: {:?}",
        report.page_errors
    );
    ensure!(
        !report.token_form_visible,
        "the token form stays once the token works"
    );
    ensure!(
        !report.problem_visible,
        "the page reports a problem: {}",
        report.problem
    );

    // With it, everything the stack holds is shown, and kept fresh.
    for id in &machines {
        ensure!(
            report.machines_shown.contains(id),
            "machine {id} is not shown: {:?}",
            report.machines_shown
        );
    }
    ensure!(report.waiting_shown == [waiting.to_string()], "{report:?}");
    for id in &running {
        ensure!(report.running_shown.contains(&id.to_string()), "{report:?}");
    }
    ensure!(report.pools_shown == ["local"], "{:?}", report.pools_shown);
    // The quick job and the two long ones started within the hour.
    ensure!(report.wait_points == 3, "{report:?}");
    ensure!(report.wait_summary.contains("1 waiting now"), "{report:?}");
    // The pool is demand-aware with the default target: the chart reads the waits against it.
    ensure!(
        report
            .wait_summary
            .contains("Wait target 30 s (dashed line): 0 waited longer."),
        "{report:?}"
    );
    ensure!(
        report.refreshed.len() == 2 && report.refreshed.iter().all(|r| r.starts_with("updated")),
        "{:?}",
        report.refreshed
    );
    Ok(())
}
