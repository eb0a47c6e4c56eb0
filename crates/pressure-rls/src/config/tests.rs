//! The loader and the matching rules on upstream's README examples.

use super::*;

fn e(k: &str, v: &str) -> proto::Entry {
    proto::Entry::new(k, v)
}

fn rpu(d: &Domain, entries: &[proto::Entry]) -> Option<u32> {
    d.rule_for(entries).map(|r| r.requests_per_unit)
}

#[test]
fn key_value_before_key_and_same_depth_only() {
    let d = parse(
        "edge.yaml",
        "domain: edge_proxy_per_ip\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n  - key: remote_address\n    value: 50.0.0.5\n    rate_limit:\n      unit: second\n      requests_per_unit: 0\n",
    )
    .expect("valid");
    assert_eq!(rpu(&d, &[e("remote_address", "50.0.0.1")]), Some(10));
    assert_eq!(rpu(&d, &[e("remote_address", "50.0.0.5")]), Some(0));
    assert!(matches!(
        d.rule_for(&[e("remote_address", "50.0.0.5")]).map(|r| &r.quota),
        Some(Quota::Blocked)
    ));
    // Deeper than the tree: no match.
    assert_eq!(rpu(&d, &[e("remote_address", "1"), e("x", "y")]), None);
    assert_eq!(rpu(&d, &[e("other", "1")]), None);
    assert_eq!(rpu(&d, &[]), None);
}

#[test]
fn nested_levels_and_wildcards() {
    let d = parse(
        "f.yaml",
        "domain: example4\ndescriptors:\n  - key: key\n    value: value\n    descriptors:\n      - key: subkey\n        rate_limit:\n          requests_per_unit: 300\n          unit: second\n  - key: path\n    value: /api/*\n    rate_limit: {unit: minute, requests_per_unit: 20}\n",
    )
    .expect("valid");
    assert_eq!(rpu(&d, &[e("key", "value"), e("subkey", "any")]), Some(300));
    // The first level alone has no limit.
    assert_eq!(rpu(&d, &[e("key", "value")]), None);
    assert_eq!(rpu(&d, &[e("path", "/api/users")]), Some(20));
    assert_eq!(rpu(&d, &[e("path", "/other")]), None);
}

#[test]
fn unknown_key_and_bad_unit_name_file_and_path() {
    let err = parse(
        "ratelimit.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: weeks\n      requests_per_unit: 1\n",
    )
    .expect_err("bad unit");
    assert_eq!(
        err.to_string(),
        "ratelimit.yaml: descriptors[0].rate_limit.unit: unknown unit \"weeks\""
    );
    let err = parse(
        "r.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {}\n",
    )
    .expect_err("unknown key");
    assert_eq!(err.file, "r.yaml");
    assert_eq!(err.path, "descriptors[0].ratelimit");
    eprintln!("{err}");
    assert!(err.problem.contains("unknown field `ratelimit`"), "{err}");
    let err = parse("r.yaml", "domain: d\nextra: 1\n").expect_err("unknown top key");
    assert!(err.problem.contains("unknown field `extra`"), "{err}");
    // (file text, the path the error names, what is wrong)
    let cases = [
        ("descriptors: []\n", "domain", "no domain"),
        ("domain: d\ndescriptors:\n  - value: v\n", "descriptors[0].key", "no key"),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n",
            "descriptors[0].rate_limit.unit",
            "no unit",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n",
            "descriptors[0].rate_limit.unit",
            "unlimited with unit",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
            "descriptors[1]",
            "duplicate",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: \"\"}]}\n",
            "descriptors[0].rate_limit.replaces[0].name",
            "empty replaces",
        ),
    ];
    for (text, path, what) in cases {
        let err = parse("r.yaml", text).expect_err(what);
        assert_eq!(err.path, path, "{what}: {err}");
    }
}

#[test]
fn two_files_with_one_domain_are_an_error() {
    let texts = vec![
        ("a.yaml".to_owned(), "domain: d\n".to_owned()),
        ("b.yaml".to_owned(), "domain: d\n".to_owned()),
    ];
    let err = Plan::from_texts(&texts).expect_err("duplicate domain");
    assert_eq!(err.file, "b.yaml");
    assert!(err.problem.contains("a.yaml"), "{err}");
    let texts = vec![
        ("a.yaml".to_owned(), "domain: d\n".to_owned()),
        ("b.yaml".to_owned(), "domain: e\n".to_owned()),
    ];
    let plan = Plan::from_texts(&texts).expect("two domains");
    assert!(plan.domain("d").is_some() && plan.domain("e").is_some());
}

#[test]
fn units_map_to_limits_case_insensitively() {
    let d = parse(
        "u.yaml",
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: SECOND, requests_per_unit: 5}\n  - key: b\n    rate_limit: {unit: Minute, requests_per_unit: 7}\n",
    )
    .expect("valid");
    let rule = d.rule_for(&[e("a", "x")]).expect("a");
    let Quota::Limited { template } = &rule.quota else {
        panic!("limited")
    };
    assert_eq!(template.limits().requests_per_second, Some(5));
    let rule = d.rule_for(&[e("b", "x")]).expect("b");
    let Quota::Limited { template } = &rule.quota else {
        panic!("limited")
    };
    assert_eq!(template.limits().requests_per_minute, Some(7));
    assert_eq!(TimeUnit::Hour.limits(3).requests_per_hour, Some(3));
    assert_eq!(TimeUnit::Day.limits(4).requests_per_24_hours, Some(4));
    assert_eq!(TimeUnit::parse("DAY"), Some(TimeUnit::Day));
    assert_eq!(TimeUnit::parse("week"), None);
}

#[test]
fn metric_names_follow_upstream_stat_keys() {
    let d = parse(
        "m.yaml",
        "domain: messaging\ndescriptors:\n  - key: message_type\n    value: marketing\n    descriptors:\n      - key: to_number\n        rate_limit: {unit: minute, requests_per_unit: 5}\n",
    )
    .expect("valid");
    let r = d
        .rule_for(&[e("message_type", "marketing"), e("to_number", "1")])
        .expect("match");
    assert_eq!(r.metric, "message_type_marketing.to_number");
}
