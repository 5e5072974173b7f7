//! The demand tracker: the forecast's peak, lead time, backlog, grace and need.

use super::*;

/// Feeds a pass at `at` with `in_use` slots in use, arrivals first, as the controller does.
fn pass(t: &mut DemandTracker, at: Millis, arrivals: u32, in_use: u32) -> Forecast {
    for _ in 0..arrivals {
        t.job_arrived(at, None);
    }
    t.observe_in_use(in_use);
    t.forecast(at, 600_000, 0)
}

#[test]
fn the_buffer_covers_the_rises_recent_jobs_met() {
    let mut t = DemandTracker::default();
    t.machine_ready(60_000);
    // A burst of four at 200 s on an idle pool: each met the ones ahead of it (0, 1, 2, 3).
    pass(&mut t, 0, 0, 0);
    let f = pass(&mut t, 200_000, 4, 4);
    assert_eq!(f.lead_time, 60_000);
    // No job may wait (5 %): all four slots; with 30 s of a 60 s lead time allowed (10 %),
    // still four (one job in four is 25 %).
    assert_eq!(f.buffer(0), 4);
    assert_eq!(f.buffer(30_000), 4);
    // A target of a whole lead time: no buffer (no job waits longer than one).
    assert_eq!(f.buffer(60_000), 0);
    // Jobs that end as fast as new ones come make no rise: sixteen lone jobs, each arriving
    // as the one before ended, in passes a lead time apart.
    let mut steady = DemandTracker::default();
    steady.machine_ready(60_000);
    for i in 0..16 {
        pass(&mut steady, i * 60_000, 1, 1);
    }
    // Each needs its own slot (a rise of 0: one free slot serves it).
    assert_eq!(steady.forecast(15 * 60_000, 600_000, 0).buffer(0), 1);
    // With no job for a window, nothing.
    assert_eq!(steady.forecast(40 * 60_000, 600_000, 0).buffer(0), 0);
}

/// A pool that met a burst of four at 200 s (rises 0 to 3, each a quarter of the jobs), with
/// machines ready in 60 s.
fn after_a_burst_of_four() -> DemandTracker {
    let mut t = DemandTracker::default();
    t.machine_ready(60_000);
    pass(&mut t, 0, 0, 0);
    pass(&mut t, 200_000, 4, 4);
    t
}

#[test]
fn the_waits_measured_set_the_share_a_target_lets_wait() {
    // Unmeasured, a wait is taken as uniform over the lead time: a 50 s target of 60 s lets
    // 30 % of jobs find no slot (5 % over the sixth of them that would wait longer), so one of
    // the four may: three slots.
    let mut t = after_a_burst_of_four();
    assert_eq!(t.forecast(200_000, 600_000, 0).buffer(50_000), 3);
    // Jobs handed out within a pass found a free slot: they say nothing of waits.
    for _ in 0..8 {
        t.job_handed_out(1_000, 1_000);
    }
    assert_eq!(t.forecast(200_000, 600_000, 0).buffer(50_000), 3);
    // Every job that found no slot waited a whole boot: only 5 % may find none, so all four.
    for _ in 0..8 {
        t.job_handed_out(60_000, 1_000);
    }
    assert_eq!(t.forecast(200_000, 600_000, 0).buffer(50_000), 4);
    // Where they waited 10 s (machines already on their way), none waited longer than the
    // target: any job may find no slot, and none is held.
    let mut t = after_a_burst_of_four();
    for _ in 0..8 {
        t.job_handed_out(10_000, 1_000);
    }
    assert_eq!(t.forecast(200_000, 600_000, 0).buffer(50_000), 0);
}

#[test]
fn older_jobs_weigh_less() {
    let mut t = DemandTracker::default();
    t.machine_ready(60_000);
    pass(&mut t, 0, 0, 0);
    // A burst of ten at 10 s, then lone jobs a lead time apart, each ending before the next.
    pass(&mut t, 10_000, 10, 10);
    pass(&mut t, 200_000, 0, 0);
    let mut f = pass(&mut t, 300_000, 1, 1);
    for i in 1..6 {
        pass(&mut t, 300_000 + i * 60_000 - 1, 0, 0);
        f = pass(&mut t, 300_000 + i * 60_000, 1, 1);
    }
    // At 600 s the burst is nearly a window old: the lone jobs outweigh it.
    assert!(f.buffer(0) < 10, "buffer {}", f.buffer(0));
    assert!(f.buffer(0) >= 1);
}
#[test]
fn a_slow_recent_machine_sets_the_lead_time() {
    let mut t = DemandTracker::default();
    assert_eq!(t.forecast(0, 600_000, 0).lead_time, DEFAULT_LEAD_TIME);
    t.observe_machines([("a", 1_000, None), ("b", 0, None)].into_iter());
    // Measured to when each began to take jobs, not to the pass that sees it.
    t.observe_machines([("a", 1_000, Some(30_500)), ("b", 0, None)].into_iter());
    t.observe_machines([("a", 1_000, Some(30_500)), ("b", 0, Some(79_200))].into_iter());
    // Seen again, or first seen ready (adopted): not measured.
    t.observe_machines([("a", 1_000, Some(30_500)), ("c", 0, Some(90_000))].into_iter());
    assert_eq!(t.forecast(100_000, 600_000, 0).lead_time, 79_200);
    for _ in 0..LEAD_SAMPLES {
        t.machine_ready(40_000);
    }
    assert_eq!(
        t.forecast(100_000, 600_000, 0).lead_time,
        40_000,
        "old samples age out"
    );
}

/// The spread is how much slower the slowest twentieth of recent machines were than the lead
/// time; a scheduled run is held from the lead time before it, less the target's wait beyond
/// that spread and a pass interval. A next stage's machines are timed from the boots
/// themselves and the wait the target allows, less a pass.
#[test]
fn the_pipeline_horizon_lets_foreseen_jobs_wait_the_target() {
    let mut t = DemandTracker::default();
    let f = t.forecast(0, 600_000, 0);
    assert_eq!(f.lead_spread, 0, "nothing measured");
    assert_eq!(
        f.boots,
        BootTimes::flat(DEFAULT_LEAD_TIME),
        "one default boot"
    );
    // Twenty machines: 30..=87 s in steps of 3 s. The 90th percentile is the 18th (81 s),
    // the 95th the 19th (84 s).
    for i in 0..20 {
        t.machine_ready(30_000 + i * 3_000);
    }
    let f = t.forecast(0, 600_000, 0);
    assert_eq!((f.lead_time, f.lead_spread), (81_000, 3_000));
    assert_eq!(
        f.boots,
        BootTimes::new((0..20).map(|i| 30_000 + i * 3_000), 0)
    );
    let h = f.pipeline_horizon(30_000, 1_000);
    assert_eq!(
        (h.ahead, h.late, h.boots),
        (81_000 - 26_000, 29_000, f.boots)
    );
    let under = f.pipeline_horizon(4_000, 1_000).ahead;
    assert_eq!(under, 81_000, "a target under the spread and a pass");
    assert_eq!(f.pipeline_horizon(200_000, 1_000).ahead, 0);
    assert_eq!(f.pipeline_horizon(30_000, 1_000).lead_time, 81_000);
    assert_eq!(f.pipeline_horizon(500, 1_000).late, 0);
}

/// With boots of 60 s and a 30 s target the grace is 90 s: in a 10 min window jobs are rare up
/// to five arrivals (the rate counts one more, 6 × 90 s < 600 s), and only while the last jobs
/// handed out meet the target (at most 5 % of them waited longer than it).
#[test]
fn jobs_are_rare_when_fewer_than_one_is_expected_within_the_grace() {
    let rare = |arrivals: u64, late: u64| {
        let mut t = DemandTracker::default();
        t.machine_ready(60_000);
        for i in 0..arrivals {
            t.job_arrived(i * 1_000, None);
        }
        for i in 0..100 {
            t.job_handed_out(if i < late { 31_000 } else { 0 }, 1_000);
        }
        let f = t.forecast(100_000, 600_000, 30_000);
        assert_eq!(f.surplus_grace, 90_000);
        f.jobs_rare
    };
    assert!(rare(0, 0), "no job at all");
    assert!(rare(5, 5), "five, with five of the last hundred late");
    assert!(!rare(6, 0), "six: one expected within a grace");
    assert!(!rare(5, 6), "the target missed: the grace keeps machines");
}

#[test]
fn gitlab_backlog_counts_while_fresh() {
    let mut t = DemandTracker::default();
    t.job_arrived(1_000, Some(12));
    assert_eq!(t.forecast(1_000, 600_000, 0).gitlab_backlog, 11);
    assert_eq!(
        t.forecast(1_000 + QUEUE_REPORT_FRESH + 1, 600_000, 0)
            .gitlab_backlog,
        0
    );
    t.job_arrived(40_000, Some(1));
    assert_eq!(
        t.forecast(40_000, 600_000, 0).gitlab_backlog,
        0,
        "the queue emptied"
    );
}

#[test]
fn a_job_released_for_want_of_a_machine_is_expected_back_until_a_job_comes() {
    let mut t = DemandTracker::default();
    t.job_released(10_000);
    // GitLab fails it and may queue its retry: counted as in GitLab's queue.
    assert_eq!(t.forecast(12_000, 600_000, 0).gitlab_backlog, 1);
    assert_eq!(t.forecast(150_000, 600_000, 0).gitlab_backlog, 1);
    // A job came since (the retry, as far as anyone can tell): no longer.
    t.job_arrived(151_000, None);
    assert_eq!(t.forecast(152_000, 600_000, 0).gitlab_backlog, 0);
    // Unanswered, it is given up once GitLab would have queued the retry.
    let mut t = DemandTracker::default();
    t.job_released(10_000);
    t.job_released(11_000);
    assert_eq!(t.forecast(20_000, 600_000, 0).gitlab_backlog, 2);
    assert_eq!(
        t.forecast(11_000 + RETRY_EXPECTED_WITHIN + 1, 600_000, 0)
            .gitlab_backlog,
        0
    );
}

/// Jobs taken in one instant report GitLab's queue in no set order: the smallest stands (the
/// queue only shrinks as the pool takes from it), and an older report never replaces a newer.
#[test]
fn the_latest_queue_report_stands() {
    let mut t = DemandTracker::default();
    t.job_arrived(5_000, Some(1));
    t.foreseen_job_arrived(5_000, Some(3));
    t.job_arrived(5_000, Some(2));
    assert_eq!(t.forecast(5_000, 600_000, 0).gitlab_backlog, 0);
    t.job_arrived(4_000, Some(9));
    assert_eq!(
        t.forecast(5_000, 600_000, 0).gitlab_backlog,
        0,
        "an older report"
    );
    t.job_arrived(6_000, Some(4));
    assert_eq!(
        t.forecast(6_000, 600_000, 0).gitlab_backlog,
        3,
        "a newer one"
    );
}

#[test]
fn the_peak_need_covers_the_grace() {
    let mut t = DemandTracker::default();
    t.machine_ready(30_000);
    // No job arrived, but the one handed out waited: the target (none) is missed, so jobs do
    // not count as rare and the grace keeps what was in use.
    t.job_handed_out(5_000, 1_000);
    for (at, slots) in [(0, 2), (1_000, 2), (10_000, 7), (20_000, 3), (40_000, 1)] {
        t.observe_in_use(slots);
        t.forecast(at, 600_000, 0);
    }
    // With no wait allowed the grace is two lead times: the peak of 7 (10 s to 20 s) is held
    // until 80 s.
    let f = t.forecast(40_000, 600_000, 0);
    assert_eq!((f.surplus_grace, f.recent_need(0)), (60_000, 7));
    // 3 were in use until 40 s: held until 100 s, then back to what is in use.
    assert_eq!(t.forecast(95_000, 600_000, 0).recent_need(0), 3);
    assert_eq!(t.forecast(101_000, 600_000, 0).recent_need(0), 1);
    // The grace never exceeds the window (idle_time).
    assert_eq!(t.forecast(80_000, 10_000, 0).surplus_grace, 10_000);
    // Rare jobs and the target met: what is in use now, not what was.
    let mut rare = DemandTracker::default();
    rare.machine_ready(30_000);
    for (at, slots) in [(0, 7), (10_000, 1)] {
        rare.observe_in_use(slots);
        rare.forecast(at, 600_000, 0);
    }
    let f = rare.forecast(20_000, 600_000, 0);
    assert!(f.jobs_rare);
    assert_eq!(f.recent_need(0), 1);
}

#[test]
fn the_grace_shortens_by_the_wait_the_target_accepts() {
    let mut t = DemandTracker::default();
    t.machine_ready(30_000);
    let grace = |t: &mut DemandTracker, target| t.forecast(40_000, 600_000, target).surplus_grace;
    // A machine released too early costs a boot (30 s) and the wait beyond the target of the
    // job that finds it missing: all of a 30 s wait with no target, 20 s of it with a 10 s one,
    // nothing once the target is a lead time or more.
    assert_eq!(grace(&mut t, 0), 60_000);
    assert_eq!(grace(&mut t, 10_000), 50_000);
    assert_eq!(grace(&mut t, 30_000), 30_000);
    assert_eq!(grace(&mut t, 90_000), 30_000);
}

/// With boots that vary, the grace is what a release costs in expectation: the mean boot
/// and the mean of each boot's excess over the target, not the slow end the buffer plans for.
#[test]
fn the_grace_prices_the_expected_boot_not_the_slow_one() {
    let mut t = DemandTracker::default();
    for boot in [30_000, 60_000, 90_000] {
        t.machine_ready(boot);
    }
    let f = t.forecast(40_000, 600_000, 70_000);
    assert_eq!(f.lead_time, 90_000, "the buffer plans for the slow end");
    // Mean 60 s; only the 90 s boot exceeds the 70 s target, by 20 s: 20/3 s on average.
    assert_eq!(f.surplus_grace, 60_000 + 20_000 / 3);
    assert_eq!(crate::core::demand::surplus_grace(&[], 0, 600_000), 180_000);
}

#[test]
fn a_buffer_that_falls_is_still_needed_through_the_grace() {
    let mut t = DemandTracker::default();
    t.machine_ready(30_000);
    // One job at 10 s on an idle pool, done at once: a slot is held for its like while it is
    // recent (a 60 s window here).
    pass(&mut t, 0, 0, 0);
    t.job_arrived(10_000, None);
    t.observe_in_use(0);
    assert_eq!(t.forecast(20_000, 60_000, 0).buffer(0), 1);
    // Out of the window at 70 s, it asks for nothing; what it asked for is still needed for the
    // grace (two lead times, 60 s), so that a buffer that dips for a pass releases nothing.
    t.forecast(70_000, 60_000, 0);
    let f = t.forecast(75_000, 60_000, 0);
    assert_eq!((f.buffer(0), f.recent_need(0)), (0, 1));
    assert_eq!(t.forecast(131_000, 60_000, 0).recent_need(0), 0);
}

#[test]
fn foreseen_arrivals_make_no_rise() {
    let mut t = DemandTracker::default();
    t.machine_ready(60_000);
    t.observe_in_use(0);
    t.forecast(0, 600_000, 0);
    // Eight jobs a pipeline forecast foresaw, then one it did not: the eight are not its rise.
    for at in (1_000..=8_000).step_by(1_000) {
        t.foreseen_job_arrived(at, Some(3));
    }
    t.observe_in_use(8);
    t.forecast(9_000, 600_000, 0);
    t.job_arrived(10_000, None);
    t.observe_in_use(9);
    let f = t.forecast(10_000, 600_000, 0);
    assert_eq!(f.buffer(0), 1);
    // Their payloads' queue sizes still count.
    assert_eq!(f.gitlab_backlog, 2);
}

#[test]
fn paid_periods_end_every_period_after_creation() {
    let hour = 3_600_000;
    assert!(!near_period_end(0, hour, 30 * 60_000));
    assert!(near_period_end(0, hour, 58 * 60_000));
    assert!(!near_period_end(0, hour, hour + 60_000), "a new hour began");
    assert!(near_period_end(0, hour, 2 * hour - 60_000));
    assert!(near_period_end(0, 0, 5), "no billing period: any time");
}

/// While jobs are rare, an idle machine is kept for a next stage whose machines are due within
/// the grace less the mean boot: it stands in for the replacement asked for then.
#[test]
fn a_kept_machine_waits_for_a_stage_due_within_the_grace_less_a_boot() {
    let mut t = DemandTracker::default();
    for boot in [40_000, 60_000, 80_000] {
        t.machine_ready(boot);
    }
    let f = Forecast {
        jobs_rare: true,
        ..t.forecast(0, 600_000, 30_000)
    };
    let keep = f.keep_horizon(f.pipeline_horizon(30_000, 1_000)).unwrap();
    assert_eq!(f.boots.mean(), 60_000);
    assert_eq!(keep.early, f.surplus_grace - 60_000);
    assert_eq!(f.pipeline_horizon(30_000, 1_000).early, 0);
    assert_eq!(
        Forecast {
            jobs_rare: false,
            ..f
        }
        .keep_horizon(keep),
        None
    );
}
