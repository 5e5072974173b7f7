//! What a machine running hostile job code can do with the mirrored API, and what it cannot.

use super::*;

/// Waits until `sidecar` holds `n` job requests (each one registers before it waits for a job).
async fn until_held(app: &App, token: &str, n: usize) {
    let sidecar = app.sidecars.authenticate(token).unwrap().id();
    tokio::time::timeout(Duration::from_secs(5), async {
        while app.long_polls.held(sidecar) < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the job requests were never held");
}

#[tokio::test]
async fn a_sidecar_token_over_its_job_request_limit_gets_429_with_retry_after() {
    let h = harness();
    let token = h.register("reg-a").await;
    let limit = h.app.limits.job_requests_per_sidecar;
    let polls: Vec<_> = (0..limit)
        .map(|_| {
            let app = h.app.clone();
            let request = job_request(&token);
            tokio::spawn(async move { router(app).oneshot(request).await.unwrap().status() })
        })
        .collect();
    until_held(&h.app, &token, limit).await;
    let refused = h.call(job_request(&token)).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers["retry-after"], "5");
    // Another sidecar of the same pool is not held back by it.
    let other = h.register("reg-a").await;
    assert_eq!(
        h.call(job_request(&other)).await.status,
        StatusCode::NO_CONTENT
    );
    for poll in polls {
        assert_eq!(poll.await.unwrap(), StatusCode::NO_CONTENT);
    }
    // Answered requests free their places.
    assert_eq!(
        h.call(job_request(&token)).await.status,
        StatusCode::NO_CONTENT
    );
}
