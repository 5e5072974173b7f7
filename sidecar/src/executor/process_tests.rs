//! The stage runner's tests: real `bash` processes, their groups, signals and pipes.

use super::*;
use crate::executor::Interrupts;
use crate::trace::buffer::TraceBuffer;
use crate::trace::masker::Masker;

fn trace() -> Trace {
    let m = Masker::new(Vec::<String>::new(), Vec::<String>::new());
    Trace::new(TraceBuffer::new(m, 1 << 20), false)
}

fn limits(deadline: Option<Instant>, stop_at: Interrupt) -> StageLimits {
    StageLimits {
        deadline,
        stop_at,
        kill_grace: Duration::from_secs(2),
    }
}

fn script(dir: &Path, body: &str) -> std::path::PathBuf {
    let path = dir.join("stage.sh");
    std::fs::write(&path, body).unwrap();
    path
}

/// Runs `script` in `dir` to its end: no deadline, no interrupt raised.
async fn run_to_end(script: &Path, dir: &Path, t: &Trace) -> StageEnd {
    let i = Interrupts::new();
    let stage = limits(None, Interrupt::Cancel);
    run_bash(script, dir, t, i.subscribe(), stage, None)
        .await
        .unwrap()
}

/// Alive = exists and is not a zombie (a killed orphan waits for init to reap it).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X"))
        }
    }
}

/// A killed process may still be on its way out right after its pipe closed (files
/// are closed before the exit completes); poll its state for a bounded time.
async fn dies(pid: i32) -> bool {
    for _ in 0..500 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Blocks until the script writes a line into the FIFO at `path`: an event, not a sleep.
async fn wait_fifo(path: std::path::PathBuf) -> String {
    tokio::task::spawn_blocking(move || std::fs::read_to_string(path).unwrap())
        .await
        .unwrap()
}

fn mkfifo(path: &Path) {
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(ok.success());
}

#[tokio::test]
async fn output_order_and_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(dir.path(), "echo out1\necho err1 >&2\necho out2\nexit 3\n");
    let t = trace();
    let end = run_to_end(&s, dir.path(), &t).await;
    assert_eq!(end, StageEnd::Exited(3));
    assert_eq!(t.contents(), b"out1\nerr1\nout2\n");
}

#[tokio::test]
async fn sidecar_token_is_not_inherited() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(dir.path(), "echo \"token=${SIDECAR_TOKEN:-unset}\"\n");
    let t = trace();
    // The variable is removed from the child's environment whatever the parent has.
    run_to_end(&s, dir.path(), &t).await;
    assert_eq!(t.contents(), b"token=unset\n");
}

#[tokio::test]
async fn timeout_kills_the_whole_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("bg.pid");
    let s = script(
        dir.path(),
        &format!("sleep 60 &\necho $! > {}\nsleep 60\n", pidfile.display()),
    );
    let t = trace();
    let i = Interrupts::new();
    let deadline = Instant::now() + Duration::from_millis(500);
    let started = std::time::Instant::now();
    let end = run_bash(
        &s,
        dir.path(),
        &t,
        i.subscribe(),
        limits(Some(deadline), Interrupt::Cancel),
        None,
    )
    .await
    .unwrap();
    assert_eq!(end, StageEnd::TimedOut);
    assert!(started.elapsed() < Duration::from_secs(10));
    let bg: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(dies(bg).await, "background process {bg} survived");
}

#[tokio::test]
async fn leftover_background_processes_do_not_block_the_stage() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("bg.pid");
    let s = script(
        dir.path(),
        &format!("sleep 60 &\necho $! > {}\necho done\n", pidfile.display()),
    );
    let t = trace();
    let end = run_to_end(&s, dir.path(), &t).await;
    assert_eq!(end, StageEnd::Exited(0));
    assert_eq!(t.contents(), b"done\n");
    let bg: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(dies(bg).await, "background process {bg} survived");
}

#[tokio::test]
async fn cancel_stops_a_job_stage_but_not_after_script() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("ready");
    mkfifo(&fifo);
    let s = script(
        dir.path(),
        &format!("echo ready > {}\nsleep 60\n", fifo.display()),
    );
    let t = trace();
    let i = Interrupts::new();
    let run = run_bash(
        &s,
        dir.path(),
        &t,
        i.subscribe(),
        limits(None, Interrupt::Cancel),
        None,
    );
    let (end, _) = tokio::join!(run, async {
        wait_fifo(fifo.clone()).await;
        i.raise(Interrupt::Cancel);
    });
    assert_eq!(end.unwrap(), StageEnd::Interrupted(Interrupt::Cancel));

    // The same cancel level does not stop a stage that only stops at Abort.
    let fifo2 = dir.path().join("ready2");
    mkfifo(&fifo2);
    let s = script(
        dir.path(),
        &format!("echo ready > {}\necho after\n", fifo2.display()),
    );
    let t = trace();
    let run = run_bash(
        &s,
        dir.path(),
        &t,
        i.subscribe(),
        limits(None, Interrupt::Abort),
        None,
    );
    let (end, _) = tokio::join!(run, wait_fifo(fifo2.clone()));
    assert_eq!(end.unwrap(), StageEnd::Exited(0));
    assert_eq!(t.contents(), b"after\n");
}

#[tokio::test]
async fn abort_kills_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("ready");
    mkfifo(&fifo);
    // The script ignores SIGTERM: only SIGKILL ends it, so a fast end proves Abort
    // did not wait for the grace period.
    let s = script(
        dir.path(),
        &format!("trap '' TERM\necho ready > {}\nsleep 60\n", fifo.display()),
    );
    let t = trace();
    let i = Interrupts::new();
    let mut l = limits(None, Interrupt::Cancel);
    l.kill_grace = Duration::from_secs(60);
    let started = std::time::Instant::now();
    let run = run_bash(&s, dir.path(), &t, i.subscribe(), l, None);
    let (end, _) = tokio::join!(run, async {
        wait_fifo(fifo.clone()).await;
        i.raise(Interrupt::Abort);
    });
    assert_eq!(end.unwrap(), StageEnd::Interrupted(Interrupt::Abort));
    assert!(started.elapsed() < Duration::from_secs(30));
}
