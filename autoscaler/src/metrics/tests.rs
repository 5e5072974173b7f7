use super::*;

#[test]
fn every_family_is_named_autoscaler_noun_unit_and_documented() {
    let metrics = Metrics::new();
    metrics.provisioner_call("linux", "create", "ok", Duration::from_millis(1500));
    metrics.scale_action("linux", "create", "waiting_jobs", 2);
    metrics.job_waited("linux", 2500);
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
    metrics.machine_failures.get_or_create(&pool).inc();
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
    metrics.register_levels(Levels {
        pools: Vec::new(),
        machines: std::collections::HashMap::new(),
        jobs: std::sync::Arc::new(crate::jobs::Jobs::load(store, clock).unwrap()),
    });
    let text = metrics.encode();
    assert!(text.contains("autoscaler_scale_actions_total{pool=\"linux\",action=\"create\",reason=\"waiting_jobs\"} 2"), "{text}");
    assert!(text.contains("autoscaler_provisioner_call_seconds_count{pool=\"linux\",verb=\"create\",exit=\"ok\"} 1"), "{text}");
    assert!(
        text.contains("autoscaler_job_wait_seconds_sum{pool=\"linux\"} 2.5"),
        "{text}"
    );
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(families.len(), 15, "{families:?}");
    for family in families {
        assert!(family.starts_with("autoscaler_"), "{family}");
        assert!(
            readme.contains(&format!("`{family}")),
            "README.md does not document {family}"
        );
    }
}

#[test]
fn upstream_endpoints_are_named_from_method_and_path() {
    use http::Method;
    assert_eq!(
        upstream::endpoint(&Method::PUT, "/api/v4/jobs/17"),
        "job_update"
    );
    assert_eq!(
        upstream::endpoint(&Method::PATCH, "/api/v4/jobs/17/trace"),
        "job_trace"
    );
    assert_eq!(
        upstream::endpoint(&Method::POST, "/api/v4/jobs/17/artifacts"),
        "artifacts_upload"
    );
    assert_eq!(
        upstream::endpoint(&Method::GET, "/api/v4/jobs/17/artifacts"),
        "artifacts_download"
    );
    assert_eq!(upstream::endpoint(&Method::GET, "/api/v4/other"), "other");
}
