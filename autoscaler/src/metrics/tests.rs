use super::*;

#[test]
fn every_family_is_named_autoscaler_noun_unit_and_documented() {
    let metrics = Metrics::new();
    metrics.provisioner_call("linux", "create", "ok", Duration::from_millis(1500));
    metrics.scale_action("linux", "create", "waiting_jobs", 2);
    metrics.job_waited("linux", Some(10_000), 2500);
    let pool = PoolLabel {
        pool: "linux".into(),
    };
    for family in [
        &metrics.machine_creation,
        &metrics.machine_readiness,
        &metrics.machine_deletion,
        &metrics.machine_lifetime,
    ] {
        family.get_or_create(&pool).observe(1.0);
    }
    metrics.machine_failure("linux", "vanished", 1);
    metrics
        .upstream_requests
        .get_or_create(&UpstreamLabels {
            origin: "relay".into(),
            endpoint: "job_update".into(),
            outcome: "200".into(),
        })
        .observe(0.1);
    metrics
        .mirror_requests
        .get_or_create(&MirrorLabels {
            endpoint: "PUT /api/v4/jobs/{id}".into(),
            status: "200".into(),
        })
        .observe(0.1);
    let store: std::sync::Arc<dyn crate::store::Store> =
        std::sync::Arc::new(crate::store::MemoryStore::new());
    let clock = std::sync::Arc::new(crate::clock::ManualClock::new(0));
    metrics.register_collector(Box::new(crate::observe::Levels::new(
        Vec::new(),
        std::collections::HashMap::new(),
        std::sync::Arc::new(crate::jobs::Jobs::load(store, clock).unwrap()),
    )));
    let text = metrics.encode();
    assert!(text.contains("autoscaler_scale_actions_total{pool=\"linux\",action=\"create\",reason=\"waiting_jobs\"} 2"), "{text}");
    assert!(text.contains("autoscaler_provisioner_call_seconds_count{pool=\"linux\",verb=\"create\",exit=\"ok\"} 1"), "{text}");
    // The wait a user sees is GitLab's part (10 s pending) and ours (2.5 s).
    for (family, sum) in [
        ("autoscaler_job_wait_seconds", "12.5"),
        ("autoscaler_job_wait_gitlab_seconds", "10.0"),
        ("autoscaler_job_wait_here_seconds", "2.5"),
    ] {
        assert!(
            text.contains(&format!("{family}_sum{{pool=\"linux\"}} {sum}")),
            "{family}: {text}"
        );
    }
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/src/operating/metrics.md"
    ))
    .expect("the book's metrics page");
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(families.len(), 19, "{families:?}");
    for family in families {
        assert!(family.starts_with("autoscaler_"), "{family}");
        assert!(
            page.contains(&format!("`{family}")),
            "docs/src/operating/metrics.md does not document {family}"
        );
    }
}

/// Every series an event would create exists at zero once the pool is registered, so that the
/// first event is an increase Prometheus sees.
#[test]
fn a_registered_pool_has_zero_series_before_any_event() {
    let metrics = Metrics::new();
    metrics.register_pool("arm");
    let text = metrics.encode();
    for line in [
        "autoscaler_machine_failures_total{pool=\"arm\",reason=\"failed\"} 0",
        "autoscaler_machine_failures_total{pool=\"arm\",reason=\"vanished\"} 0",
        "autoscaler_machine_failures_total{pool=\"arm\",reason=\"create_lost\"} 0",
        "autoscaler_scale_actions_total{pool=\"arm\",action=\"create\",reason=\"waiting_jobs\"} 0",
        "autoscaler_scale_actions_total{pool=\"arm\",action=\"create\",reason=\"pipeline_forecast\"} 0",
        "autoscaler_scale_actions_total{pool=\"arm\",action=\"destroy\",reason=\"idle_timeout\"} 0",
        "autoscaler_machine_deletion_seconds_count{pool=\"arm\"} 0",
        "autoscaler_machine_lifetime_seconds_count{pool=\"arm\"} 0",
        "autoscaler_job_wait_seconds_count{pool=\"arm\"} 0",
    ] {
        assert!(text.contains(line), "no {line}: {text}");
    }
}
