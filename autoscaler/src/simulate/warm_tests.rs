//! The simulator's warm pool: stopped machines started for waves of jobs instead of new ones
//! made, billed at the disk's price while stopped.

use std::path::Path;

use super::simulate;

/// Waves of jobs ten minutes apart on average: the idle machines of one wave are released before
/// the next, so without a stopped pool each wave waits for boots.
const WAVES: &str = "start = \"2026-11-23T08:00:00Z\"\nlength = \"2h\"\n\
    [[arrivals]]\nfrom = \"0h\"\nto = \"2h\"\njobs_per_hour = 36\nbatch = 6\nduration = [\"2m\", \"3m\"]\n";

/// A disk at a twentieth of the machine's price: a stopped machine pays for itself over
/// about 25 minutes unused (a start saves about 75 s of machine time against a boot and the
/// wait beyond the 30 s target), longer than the gaps between waves.
const CHEAP_DISK: f64 = 0.002;

fn policy(warm: &str, disk: f64) -> String {
    format!(
        "[[pools]]\nname = \"default\"\n[pools.scaling]\nmax_machines = 40\nidle_time = \"30m\"\n{warm}\
         [pools.provisioner]\nboot_time = [\"30s\", \"90s\"]\nprice_per_hour = 0.04\n\
         stopped_price_per_hour = {disk}\n"
    )
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_stopped_pool_starts_machines_instead_of_making_them_and_bills_their_disks() {
    let dir = tempfile::tempdir().unwrap();
    let w = write(dir.path(), "w.toml", WAVES);
    let cold = simulate(&w, &write(dir.path(), "cold.toml", &policy("", CHEAP_DISK))).unwrap();
    let warm = write(
        dir.path(),
        "warm.toml",
        &policy("max_stopped = 20\n", CHEAP_DISK),
    );
    let warm = simulate(&w, &warm).unwrap();
    let (c, h) = (&cold.total, &warm.total);
    assert_eq!(c.machine_minutes.stopped, 0.0);
    assert!(h.machine_minutes.stopped > 0.0, "{h:?}");
    // Waves come back to stopped machines: far fewer are made, and the waits shorten.
    assert!(h.machines_created * 2 < c.machines_created, "{c:?}\n{h:?}");
    assert!(h.wait_seconds.p95 < c.wait_seconds.p95, "{c:?}\n{h:?}");
    // The stopped time is billed, at the disk's price.
    let disk = h.machine_minutes.stopped / 60.0 * CHEAP_DISK;
    let running = h.machine_minutes.total / 60.0 * 0.04;
    assert!((h.cost.unwrap() - (running + disk)).abs() < 0.01, "{h:?}");
}

#[test]
fn a_disk_priced_like_its_machine_is_kept_stopped_only_briefly() {
    // Billed in full while stopped (as Hetzner does): a stopped machine pays for itself only
    // for the 75 s or so a start saves, so the waves find few stopped machines left, and the
    // disks cost little because they are soon gone.
    let dir = tempfile::tempdir().unwrap();
    let w = write(dir.path(), "w.toml", WAVES);
    let run = |disk: f64| {
        let policy = write(dir.path(), "p.toml", &policy("max_stopped = 20\n", disk));
        simulate(&w, &policy).unwrap().total
    };
    let (cheap, dear) = (run(CHEAP_DISK), run(0.04));
    assert!(
        dear.machines_created > cheap.machines_created * 2,
        "{cheap:?}\n{dear:?}"
    );
    assert!(
        dear.machine_minutes.stopped * 5.0 < cheap.machine_minutes.stopped,
        "{cheap:?}\n{dear:?}"
    );
}
