//! A YAML edit applies without a restart (the file is watched) and keeps
//! the counters; an invalid edit changes nothing.

use crate::support::{ok, req, start};
use std::sync::atomic::Ordering;
use std::time::Duration;

fn yaml(n: u32) -> String {
    format!(
        "domain: live\ndescriptors:\n  - key: k\n    rate_limit: {{unit: minute, requests_per_unit: {n}}}\n"
    )
}

/// Waits (bounded) until the service has applied `n` reloads.
async fn reloads(rls: &crate::support::Rls, n: u64) {
    let m = rls.limiter.metrics();
    tokio::time::timeout(Duration::from_secs(10), async {
        while m.reloads.load(Ordering::Relaxed) < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("reload applied within 10 s");
}

#[tokio::test]
async fn an_edit_applies_live_and_keeps_the_counters() {
    let mut rls = start(&[&yaml(2)]).await;
    let r = req("live", &[&[("k", "v")]]);
    assert_eq!(rls.admitted(&r, 3).await, 2);
    std::fs::write(&rls.files[0], yaml(5)).expect("edit");
    reloads(&rls, 1).await;
    // 2 used of the new 5: exactly 3 more.
    assert_eq!(rls.admitted(&r, 5).await, 3);
    let answer = rls.call(r.clone()).await;
    assert_eq!(
        answer.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit),
        Some(5)
    );

    // An invalid edit is refused; the plan in force stays.
    std::fs::write(&rls.files[0], "domain: live\nbogus: 1\n").expect("edit");
    let m = std::sync::Arc::clone(rls.limiter.metrics());
    tokio::time::timeout(Duration::from_secs(10), async {
        while m.reload_errors.load(Ordering::Relaxed) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("invalid edit seen");
    assert!(!ok(&rls.call(r).await), "still 5 per minute, all used");
}
