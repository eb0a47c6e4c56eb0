//! Every example of envoyproxy/ratelimit's README ("Configuration" →
//! "Examples"), with its domain, descriptors and limits exactly as there,
//! answered as the README says.

use crate::support::{ok, req, start};
use pressure_rls::proto::{Code, UInt64Value};

#[tokio::test]
async fn example_1_two_values_of_one_key() {
    let mut rls = start(&["domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
"])
    .await;
    let mut users = req("mongo_cps", &[&[("database", "users")]]);
    users.hits_addend = 500;
    let r = rls.call(users.clone()).await;
    assert!(ok(&r));
    let s = &r.statuses[0];
    let limit = s.current_limit.as_ref().expect("current limit");
    assert_eq!((limit.requests_per_unit, limit.unit), (500, 1));
    assert_eq!(s.limit_remaining, 0);
    users.hits_addend = 1;
    assert!(
        !ok(&rls.call(users).await),
        "the 501st request in a second is over"
    );
    // The other value has its own 500.
    let mut default = req("mongo_cps", &[&[("database", "default")]]);
    default.hits_addend = 500;
    assert!(ok(&rls.call(default).await));
    // A value the config does not list is not limited.
    let r = rls.call(req("mongo_cps", &[&[("database", "other")]])).await;
    assert!(ok(&r) && r.statuses[0].current_limit.is_none());
}

#[tokio::test]
async fn example_2_nested_lists_and_several_descriptors() {
    let yaml = "domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
";
    let mut rls = start(&[yaml]).await;
    let both = req(
        "messaging",
        &[
            &[("message_type", "marketing"), ("to_number", "2061111111")],
            &[("to_number", "2061111111")],
        ],
    );
    assert_eq!(
        rls.admitted(&both, 6).await,
        5,
        "5 marketing messages a day per number"
    );
    let r = rls.call(both).await;
    assert_eq!(r.statuses[0].code, Code::OverLimit as i32);
    assert_eq!(r.statuses[1].code, Code::Ok as i32);
    // Refused calls consumed nothing: 95 of the 100 per number remain.
    assert_eq!(r.statuses[1].limit_remaining, 95);
    // Another number has its own 5.
    let other = req(
        "messaging",
        &[&[("message_type", "marketing"), ("to_number", "2062222222")]],
    );
    assert_eq!(rls.admitted(&other, 6).await, 5);
}

#[tokio::test]
async fn example_3_key_value_before_key() {
    let mut rls = start(&["domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
"])
    .await;
    let a = req("edge_proxy_per_ip", &[&[("remote_address", "50.0.0.1")]]);
    let b = req("edge_proxy_per_ip", &[&[("remote_address", "50.0.0.2")]]);
    assert_eq!(rls.admitted(&a, 12).await, 10, "10 per second per IP");
    assert_eq!(rls.admitted(&b, 12).await, 10, "each IP counts apart");
    let banned = req("edge_proxy_per_ip", &[&[("remote_address", "50.0.0.5")]]);
    let r = rls.call(banned).await;
    assert!(!ok(&r), "requests_per_unit 0 is always over");
    assert_eq!(
        r.statuses[0].current_limit.as_ref().map(|l| l.requests_per_unit),
        Some(0)
    );
}

#[tokio::test]
async fn example_4_same_depth_only() {
    let one_level = "domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
";
    let two_levels = "domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
";
    let mut request = req("example4", &[&[("key", "value"), ("subkey", "subvalue")]]);
    request.hits_addend = 301;
    let mut rls = start(&[one_level]).await;
    let r = rls.call(request.clone()).await;
    assert!(
        ok(&r) && r.statuses[0].current_limit.is_none(),
        "two tuples do not match one level"
    );
    let mut rls = start(&[two_levels]).await;
    let r = rls.call(request).await;
    assert!(!ok(&r), "301 hits on a 300 per second limit");
    assert_eq!(
        r.statuses[0].current_limit.as_ref().map(|l| l.requests_per_unit),
        Some(300)
    );
}

#[tokio::test]
async fn example_5_unlimited() {
    let mut rls = start(&["domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
"])
    .await;
    let ldap = req("internal", &[&[("ldap", "x")]]);
    assert_eq!(rls.admitted(&ldap, 50).await, 50);
    let r = rls.call(ldap).await;
    assert_eq!(r.statuses[0].limit_remaining, u32::MAX);
    let azure = req("internal", &[&[("azure", "x")]]);
    assert_eq!(rls.admitted(&azure, 102).await, 100);
}

#[tokio::test]
async fn example_6_shadow_mode() {
    let mut rls = start(&["domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
"])
    .await;
    let a = req("example6", &[&[("service", "auth-service"), ("user", "user-a")]]);
    assert_eq!(rls.admitted(&a, 15).await, 15, "shadow mode never refuses");
    let b = req("example6", &[&[("service", "auth-service"), ("user", "user-b")]]);
    assert_eq!(rls.admitted(&b, 22).await, 20);
    let m = rls.metrics();
    let line = "pressure_rls_shadow_mode{domain=\"example6\",descriptor=\"service.user_user-a\"} 5";
    assert!(m.contains(line), "{m}");
    assert!(
        m.contains("pressure_rls_over_limit{domain=\"example6\",descriptor=\"service.user_user-b\"} 2"),
        "{m}"
    );
}

#[tokio::test]
async fn example_7_replaces() {
    let mut rls = start(&["domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
"])
    .await;
    let d1: &[(&str, &str)] = &[("key_1", "value_1"), ("user", "bkthomps")];
    let d2: &[(&str, &str)] = &[("key_2", "value_2"), ("user", "bkthomps")];
    let both = req("example7", &[d1, d2]);
    assert_eq!(
        rls.admitted(&both, 12).await,
        10,
        "10 / sec: the 5 / sec rule is replaced"
    );
    // ... and was not affected: its 5 are all there.
    assert_eq!(rls.admitted(&req("example7", &[d1]), 7).await, 5);
}

#[tokio::test]
async fn example_8_detailed_metric() {
    let mut rls = start(&["domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
"])
    .await;
    let u1 = req("example8", &[&[("key1", "unspecified_value")]]);
    let u2 = req("example8", &[&[("key1", "unspecified_value2")]]);
    let v1 = req("example8", &[&[("key1", "value1")]]);
    assert_eq!(rls.admitted(&u1, 11).await, 10);
    assert_eq!(rls.admitted(&u2, 11).await, 10);
    assert_eq!(rls.admitted(&v1, 21).await, 20);
    let m = rls.metrics();
    for key in ["key1_unspecified_value", "key1_unspecified_value2", "key1_value1"] {
        assert!(
            m.contains(&format!(
                "pressure_rls_total_hits{{domain=\"example8\",descriptor=\"{key}\"}}"
            )),
            "{key}: {m}"
        );
    }
    assert!(
        !m.contains("descriptor=\"key1\"}"),
        "detailed: no rolled-up series: {m}"
    );
}

#[tokio::test]
async fn example_9_wildcard_value() {
    let mut rls = start(&["domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
"])
    .await;
    let v1 = req("example9", &[&[("key1", "value_1")]]);
    let v2 = req("example9", &[&[("key1", "value_2")]]);
    assert_eq!(rls.admitted(&v1, 21).await, 20);
    assert_eq!(rls.admitted(&v2, 21).await, 20, "each value counts apart");
    let r = rls.call(req("example9", &[&[("key1", "other")]])).await;
    assert!(ok(&r) && r.statuses[0].current_limit.is_none());
    // A descriptor-level hits_addend overrides the request's.
    let mut v3 = req("example9", &[&[("key1", "value_3")]]);
    v3.descriptors[0].hits_addend = Some(UInt64Value { value: 20 });
    assert!(ok(&rls.call(v3.clone()).await));
    v3.descriptors[0].hits_addend = None;
    assert!(!ok(&rls.call(v3).await));
}
