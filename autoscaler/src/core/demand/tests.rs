//! The demand tracker: the forecast's peak, lead time, backlog, grace and need.

use super::*;

#[test]
fn the_forecast_is_the_busiest_lead_time_of_the_window() {
    let mut t = DemandTracker::default();
    t.machine_ready(60_000);
    for at in [
        0, 10_000, 20_000, 200_000, 200_500, 201_000, 230_000, 250_000,
    ] {
        t.job_arrived(at, None);
    }
    let window = 600_000;
    let f = t.forecast(250_000, window);
    assert_eq!(f.lead_time, 60_000);
    // 130 s to 250 s (two lead times) holds five arrivals: four after the first.
    assert_eq!(f.peak_in_lead_time, 4);
    // Half a window later they count half; a window later, not at all.
    assert_eq!(
        t.forecast(250_000 + window / 2, window).peak_in_lead_time,
        2
    );
    let later = t.forecast(250_000 + window, window);
    assert_eq!(later.peak_in_lead_time, 0);
    // A lone job predicts no other.
    let mut lone = DemandTracker::default();
    lone.job_arrived(0, None);
    assert_eq!(lone.forecast(1_000, window).peak_in_lead_time, 0);
}

#[test]
fn a_slow_recent_machine_sets_the_lead_time() {
    let mut t = DemandTracker::default();
    assert_eq!(t.forecast(0, 600_000).lead_time, DEFAULT_LEAD_TIME);
    t.observe_machines([("a", 1_000, false), ("b", 0, false)].into_iter(), 10_000);
    t.observe_machines([("a", 1_000, true), ("b", 0, false)].into_iter(), 31_000);
    t.observe_machines([("a", 1_000, true), ("b", 0, true)].into_iter(), 80_000);
    // Seen again, or first seen ready (adopted): not measured.
    t.observe_machines([("a", 1_000, true), ("c", 0, true)].into_iter(), 99_000);
    assert_eq!(t.forecast(100_000, 600_000).lead_time, 80_000);
    for _ in 0..LEAD_SAMPLES {
        t.machine_ready(40_000);
    }
    assert_eq!(
        t.forecast(100_000, 600_000).lead_time,
        40_000,
        "old samples age out"
    );
}

#[test]
fn gitlab_backlog_counts_while_fresh() {
    let mut t = DemandTracker::default();
    t.job_arrived(1_000, Some(12));
    assert_eq!(t.forecast(1_000, 600_000).gitlab_backlog, 11);
    assert_eq!(
        t.forecast(1_000 + QUEUE_REPORT_FRESH + 1, 600_000)
            .gitlab_backlog,
        0
    );
    t.job_arrived(40_000, Some(1));
    assert_eq!(
        t.forecast(40_000, 600_000).gitlab_backlog,
        0,
        "the queue emptied"
    );
}

#[test]
fn the_peak_need_covers_the_grace() {
    let mut t = DemandTracker::default();
    t.machine_ready(30_000);
    for (at, slots) in [(0, 2), (1_000, 2), (10_000, 7), (20_000, 3), (100_000, 1)] {
        t.observe_in_use(slots);
        t.forecast(at, 600_000);
    }
    // The grace is 3 minutes (more than twice the lead time): the peak of 7 is held.
    let f = t.forecast(100_000, 600_000);
    assert_eq!((f.surplus_grace, f.need_peak), (180_000, 7));
    // 3 were needed until 100 s: held until 280 s, then back to what is in use.
    assert_eq!(t.forecast(250_000, 600_000).need_peak, 3);
    assert_eq!(t.forecast(281_000, 600_000).need_peak, 1);
    // Arrivals every 10 s: five in a minute (two lead times) after the first.
    for at in (290_000..=340_000).step_by(10_000) {
        t.job_arrived(at, None);
    }
    let f = t.forecast(340_000, 600_000);
    assert_eq!((f.peak_in_lead_time, f.need_peak), (5, 6));
    // The grace never exceeds the window (idle_time).
    assert_eq!(t.forecast(340_000, 60_000).surplus_grace, 60_000);
}

#[test]
fn the_grace_grows_while_jobs_keep_coming() {
    let mut t = DemandTracker::default();
    t.machine_ready(60_000);
    let window = 600_000;
    // No arrivals: twice the lead time, at least 3 minutes.
    assert_eq!(t.forecast(0, window).surplus_grace, 180_000);
    // Eight jobs within the last two lead times: one base grace more.
    for at in (1_000..=8_000).step_by(1_000) {
        t.job_arrived(at, None);
    }
    assert_eq!(t.forecast(10_000, window).surplus_grace, 360_000);
    // Arrivals stopped two lead times ago: the base again, whatever came before.
    assert_eq!(t.forecast(130_000, window).surplus_grace, 180_000);
    // Never beyond idle_time.
    for at in (200_000..=260_000).step_by(1_000) {
        t.job_arrived(at, None);
    }
    assert_eq!(t.forecast(260_000, window).surplus_grace, window);
}

#[test]
fn foreseen_arrivals_lengthen_the_grace_but_make_no_peak() {
    let mut t = DemandTracker::default();
    t.machine_ready(60_000);
    for at in (1_000..=8_000).step_by(1_000) {
        t.foreseen_job_arrived(at, Some(3));
    }
    let f = t.forecast(10_000, 600_000);
    // Eight jobs within two lead times: one base grace more, as any arrivals.
    assert_eq!((f.peak_in_lead_time, f.surplus_grace), (0, 360_000));
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
