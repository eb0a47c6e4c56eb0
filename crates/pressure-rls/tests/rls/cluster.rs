//! Two services on one Redis Cluster (the testkit's own 3 masters, or
//! `PRESSURE_REDIS_CLUSTER`) share one limit exactly, across descriptors
//! whose counters land on different shards; on Redis too, a refused call
//! consumes nothing (the refund is a store call).

use crate::support::{ok, req, start_with};
use pressure_redis::RedisConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_services_on_one_cluster_share_one_limit() {
    let mut rc = RedisConfig::new("");
    rc.cluster_nodes = pressure_testkit::cluster_nodes();
    rc.key_prefix = format!("rls-cluster-{}", std::process::id());
    let yaml =
        "domain: c\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 7}\n";
    let mut a = start_with(&[yaml], Some(rc.clone()), false).await;
    let mut b = start_with(&[yaml], Some(rc), false).await;
    for user in ["u1", "u2", "u3", "u4"] {
        let r = req("c", &[&[("user", user)]]);
        let mut admitted = 0;
        for i in 0..20 {
            let s = if i % 2 == 0 { &mut a } else { &mut b };
            admitted += usize::from(ok(&s.call(r.clone()).await));
        }
        assert_eq!(admitted, 7, "user {user}: 7 per minute across both services");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_refused_call_consumes_nothing_either() {
    let mut rc = RedisConfig::new(pressure_testkit::redis_url());
    rc.key_prefix = format!("rls-refund-{}", std::process::id());
    let yaml = "domain: r
descriptors:
  - key: wide
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: narrow
    rate_limit: {unit: minute, requests_per_unit: 1}
";
    let mut s = start_with(&[yaml], Some(rc), false).await;
    let both = req("r", &[&[("wide", "a")], &[("narrow", "a")]]);
    assert!(ok(&s.call(both.clone()).await));
    for _ in 0..5 {
        let r = s.call(both.clone()).await;
        assert!(!ok(&r));
        assert_eq!(
            r.statuses[0].limit_remaining, 4,
            "the wide grant was given back in Redis"
        );
    }
    assert_eq!(s.admitted(&req("r", &[&[("wide", "a")]]), 6).await, 4);
}
