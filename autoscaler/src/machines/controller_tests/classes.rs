//! Machine classes through the whole machine side: a job naming a class gets a machine of that
//! class, which no other job takes; a job naming an unknown class fails at once.

use super::*;

fn small_and_large() -> Classes {
    let class = |name: &str, capacity| MachineClass {
        name: name.into(),
        capacity_per_machine: capacity,
        max_machines: None,
        sources: Vec::new(),
    };
    Classes {
        variable: "AUTOSCALER_MACHINE_CLASS".into(),
        default: "small".into(),
        list: vec![class("small", 1), class("large", 2)],
    }
}

#[tokio::test]
async fn a_job_naming_a_class_gets_a_machine_of_that_class_and_no_other_takes_it() {
    let r = rig_with(on_demand(), Some(small_and_large()));
    let small_job = r.job(1);
    r.controller.step().await;
    let small = r.only_machine();
    assert_eq!(small.class.as_deref(), Some("small"));
    let large_job = r.job_with(2, &[("AUTOSCALER_MACHINE_CLASS", "large")]);
    assert_eq!(r.jobs.class_of(large_job).as_deref(), Some("large"));
    r.controller.step().await;
    let large = r
        .machines
        .live()
        .into_iter()
        .find(|m| m.class.as_deref() == Some("large"))
        .expect("a large machine for the large job");

    for m in [&small, &large] {
        r.controller.step().await;
        r.until("injected", |ms| {
            ms.iter()
                .any(|x| x.id == m.id && x.state == MachineState::Injecting)
        })
        .await;
        r.machines.sidecar_polled(&m.id);
    }
    let sidecar_of = |m: &MachineRecord| r.machines.get(&m.id).unwrap().sidecar.unwrap();
    let took = r
        .queue
        .wait_for_job(sidecar_of(&small), None, Duration::from_millis(50))
        .await;
    assert_eq!(
        took,
        Some(small_job),
        "the small machine takes the small job only"
    );
    let took = r
        .queue
        .wait_for_job(sidecar_of(&large), None, Duration::from_millis(50))
        .await;
    assert_eq!(took, Some(large_job));
}

#[tokio::test]
async fn a_job_naming_an_unknown_class_fails_at_once_and_gets_no_machine() {
    let r = rig_with(on_demand(), Some(small_and_large()));
    let job = r.job_with(5, &[("AUTOSCALER_MACHINE_CLASS", "gpu")]);
    let phase = r.jobs.get(job).unwrap().phase;
    assert!(
        matches!(phase, crate::core::job::JobPhase::Failing { ref reason, .. }
            if reason.contains("\"gpu\"") && reason.ends_with("small, large")),
        "{phase:?}"
    );
    assert_eq!(
        r.jobs.trace_length(job),
        Some(0),
        "its log note goes at the start"
    );
    r.controller.step().await;
    assert!(r.provider.machines().is_empty(), "no machine for it");
}
