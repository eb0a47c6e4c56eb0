//! `pressure_redis::gc` against real servers (the test binary's own
//! `redis-server` and 3-master cluster from `pressure-testkit`, or
//! `PRESSURE_REDIS_URL` / `PRESSURE_REDIS_CLUSTER`): keys written by hand
//! the way older versions left them — state hashes without a TTL, with the
//! mark `x` (old), `e` (new), both or none — get the expiry they were meant
//! to have or are deleted; keys with a TTL, the manual queue's stream,
//! other types and other prefixes are left alone; a dry run changes nothing
//! and counts the same. Fails when no server can be had.

#[path = "../support.rs"]
mod support;

use pressure_core::BackendError;
use pressure_redis::keys::{BreakerKeys, ResourceKeys};
use pressure_redis::{GcOptions, GcReport, RedisConfig, RedisConnection};
use redis::aio::MultiplexedConnection;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The TTL gc gives a hash without a mark in these tests: unlike every
/// other TTL here, so a key that got it is recognised.
const DEFAULT_TTL: Duration = Duration::from_secs(90);
/// How far a TTL may have run down between writing and checking, ms.
const SLACK_MS: i64 = 30_000;

fn options(dry_run: bool, batch: usize) -> GcOptions {
    GcOptions {
        dry_run,
        batch,
        default_ttl: DEFAULT_TTL,
        ..GcOptions::default()
    }
}

/// The counts of a report, without `dry_run` and `nodes`.
fn counts(r: &GcReport) -> [u64; 5] {
    [r.scanned, r.had_ttl, r.expiry_set, r.deleted, r.skipped_non_hash]
}

async fn connect(config: &RedisConfig) -> RedisConnection {
    pressure_redis::connect(config, Duration::from_secs(5))
        .await
        .expect("redis answers")
}

/// Runs one command, panicking with it on an error.
async fn q<T: redis::FromRedisValue>(conn: &mut impl redis::aio::ConnectionLike, cmd: &mut redis::Cmd) -> T {
    cmd.query_async(conn)
        .await
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

/// The server's time in µs (the unit of the marks).
async fn now_us(conn: &mut RedisConnection) -> i64 {
    let (s, us): (i64, i64) = q(conn, &mut redis::cmd("TIME")).await;
    s * 1_000_000 + us
}

async fn pttl(conn: &mut impl redis::aio::ConnectionLike, key: &str) -> i64 {
    q(conn, redis::cmd("PTTL").arg(key)).await
}

async fn type_of(conn: &mut impl redis::aio::ConnectionLike, key: &str) -> String {
    q(conn, redis::cmd("TYPE").arg(key)).await
}

/// A hash without a TTL, as older versions left it.
async fn hash(conn: &mut RedisConnection, key: &str, fields: &[(&str, i64)]) {
    let mut cmd = redis::cmd("HSET");
    cmd.arg(key).arg("c").arg(0);
    for (f, v) in fields {
        cmd.arg(*f).arg(*v);
    }
    let _: i64 = q(conn, &mut cmd).await;
}

/// Asserts `key` expires in `ms` from `written` (server time in ms when it
/// was written), give or take [`SLACK_MS`] for a slow machine.
async fn assert_expires_in(conn: &mut RedisConnection, key: &str, ms: i64) {
    let left = pttl(conn, key).await;
    assert!(
        left > 0 && left <= ms + 1 && left > ms - SLACK_MS,
        "{key}: PTTL {left}, expected about {ms}"
    );
}

/// Type and TTL state (none / some / gone) of each key: what a dry run
/// must not change.
async fn snapshot(conn: &mut RedisConnection, keys: &[&str]) -> Vec<(String, String, &'static str)> {
    let mut out = Vec::new();
    for key in keys {
        let ttl = match pttl(conn, key).await {
            -2 => "gone",
            -1 => "none",
            _ => "some",
        };
        out.push(((*key).to_owned(), type_of(conn, key).await, ttl));
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn keys_without_an_expiry_get_theirs_on_a_single_redis() {
    let run = support::run_id();
    // Glob characters in the prefix: they must match only themselves.
    let prefix = format!("{run}-gc*?[a]");
    let config = RedisConfig {
        key_prefix: prefix.clone(),
        ..support::config(support::redis_url())
    };
    let mut conn = connect(&config).await;
    let now = now_us(&mut conn).await;
    let key = |id: &str| ResourceKeys::new(&prefix, id).state;
    let (past, future_x, e_only, both, marks_none, with_ttl) = (
        key("past"),
        key("future-x"),
        key("e-only"),
        key("both"),
        key("no-marks"),
        key("with-ttl"),
    );
    let breaker = BreakerKeys::new(&prefix, "openai/gpt").state;
    let stream = format!("{prefix}:{{manual-queue}}:requests");
    let string = format!("{prefix}:{{rsomething}}:v");
    // Matched by the prefix's unescaped glob; of another prefix altogether.
    let lookalike = format!("{run}-gcZZa:{{rx}}:s");
    let other = format!("other-{run}:{{rx}}:s");

    hash(&mut conn, &past, &[("x", now - 60_000_000)]).await;
    hash(&mut conn, &future_x, &[("x", now + 120_000_000)]).await;
    hash(&mut conn, &e_only, &[("e", now + 300_000_000)]).await;
    // The later of the two marks counts, whichever field holds it.
    hash(
        &mut conn,
        &both,
        &[("e", now + 200_000_000), ("x", now + 400_000_000)],
    )
    .await;
    hash(&mut conn, &marks_none, &[]).await;
    hash(&mut conn, &with_ttl, &[("x", now - 60_000_000)]).await;
    let _: i64 = q(&mut conn, redis::cmd("PEXPIRE").arg(&with_ttl).arg(600_000)).await;
    let _: i64 = q(
        &mut conn,
        redis::cmd("HSET").arg(&breaker).arg("st").arg(0).arg("ep").arg(1),
    )
    .await;
    let _: String = q(
        &mut conn,
        redis::cmd("XADD").arg(&stream).arg("*").arg("f").arg("v"),
    )
    .await;
    let _: () = q(&mut conn, redis::cmd("SET").arg(&string).arg("v")).await;
    hash(&mut conn, &lookalike, &[("x", now - 60_000_000)]).await;
    hash(&mut conn, &other, &[("x", now - 60_000_000)]).await;
    let all = [
        past.as_str(),
        &future_x,
        &e_only,
        &both,
        &marks_none,
        &with_ttl,
        &breaker,
        &stream,
        &string,
        &lookalike,
        &other,
    ];
    // scanned, had_ttl, expiry_set, deleted, skipped_non_hash
    let expected = [9, 1, 5, 1, 2];

    let before = snapshot(&mut conn, &all).await;
    // Small batches: the cursor goes round several times.
    let dry = pressure_redis::gc(&config, &options(true, 2))
        .await
        .expect("dry run");
    assert_eq!(counts(&dry), expected, "{dry:?}");
    assert!(dry.dry_run);
    assert_eq!(dry.nodes, 1);
    assert_eq!(
        snapshot(&mut conn, &all).await,
        before,
        "a dry run changes nothing"
    );

    let done = pressure_redis::gc(&config, &options(false, 3)).await.expect("gc");
    assert_eq!(
        counts(&done),
        expected,
        "the same counts as the dry run: {done:?}"
    );
    assert!(!done.dry_run);

    assert_eq!(
        pttl(&mut conn, &past).await,
        -2,
        "a key whose mark is past is deleted"
    );
    assert_expires_in(&mut conn, &future_x, 120_000).await;
    assert_expires_in(&mut conn, &e_only, 300_000).await;
    assert_expires_in(&mut conn, &both, 400_000).await;
    let default_ms = i64::try_from(DEFAULT_TTL.as_millis()).expect("small");
    assert_expires_in(&mut conn, &marks_none, default_ms).await;
    assert_expires_in(&mut conn, &breaker, default_ms).await;
    assert_expires_in(&mut conn, &with_ttl, 600_000).await;
    assert_eq!(type_of(&mut conn, &stream).await, "stream");
    assert_eq!(pttl(&mut conn, &stream).await, -1, "the manual queue persists");
    assert_eq!(
        pttl(&mut conn, &string).await,
        -1,
        "not a hash: not ours to judge"
    );
    assert_eq!(pttl(&mut conn, &lookalike).await, -1, "the prefix is no glob");
    assert_eq!(pttl(&mut conn, &other).await, -1, "another prefix is left alone");

    // Again: every key left has a TTL or is skipped.
    let again = pressure_redis::gc(&config, &options(false, 500))
        .await
        .expect("gc");
    assert_eq!(counts(&again), [8, 6, 0, 0, 2], "{again:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_master_of_a_cluster_is_scanned_once() {
    let prefix = format!("{}-gcc", support::run_id());
    let config = RedisConfig {
        cluster_nodes: support::cluster_nodes(),
        key_prefix: prefix.clone(),
        ..support::config("")
    };
    let mut conn = connect(&config).await;
    // Each master on its own connection, for the truth about its keys.
    let mut masters: Vec<MultiplexedConnection> = Vec::new();
    for url in &config.cluster_nodes {
        let mut c = redis::Client::open(url.as_str())
            .expect("a node url")
            .get_multiplexed_async_connection()
            .await
            .expect("the node answers");
        let role: Vec<redis::Value> = q(&mut c, &mut redis::cmd("ROLE")).await;
        if role.first() == Some(&redis::Value::BulkString(b"master".to_vec())) {
            masters.push(c);
        }
    }
    assert!(masters.len() >= 2, "a cluster of several masters");

    // Resources of three kinds until every master holds one of each: a
    // past mark (deleted), a future mark (expires at it), no mark.
    const KINDS: [&str; 3] = ["past", "future", "none"];
    let now = now_us(&mut conn).await;
    let mut need: BTreeSet<(usize, usize)> = (0..masters.len())
        .flat_map(|m| (0..KINDS.len()).map(move |k| (m, k)))
        .collect();
    let mut written: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for i in 0..600 {
        if need.is_empty() {
            break;
        }
        let kind = i % KINDS.len();
        let key = ResourceKeys::new(&prefix, &format!("tenant-{i}")).state;
        match KINDS[kind] {
            "past" => hash(&mut conn, &key, &[("x", now - 60_000_000)]).await,
            "future" => hash(&mut conn, &key, &[("e", now + 120_000_000)]).await,
            _ => hash(&mut conn, &key, &[]).await,
        }
        let mut owner = None;
        for (m, c) in masters.iter_mut().enumerate() {
            // Another master answers MOVED.
            let here: Result<i64, _> = redis::cmd("EXISTS").arg(&key).query_async(c).await;
            if matches!(here, Ok(1)) {
                owner = Some(m);
            }
        }
        let owner = owner.unwrap_or_else(|| panic!("no master holds {key}"));
        need.remove(&(owner, kind));
        written.insert(key, (owner, kind));
    }
    assert!(need.is_empty(), "every master holds every kind: missing {need:?}");
    let stream = format!("{prefix}:{{manual-queue}}:requests");
    let _: String = q(
        &mut conn,
        redis::cmd("XADD").arg(&stream).arg("*").arg("f").arg("v"),
    )
    .await;

    let n = |k: &str| written.values().filter(|(_, kind)| KINDS[*kind] == k).count() as u64;
    let expected = [written.len() as u64 + 1, 0, n("future") + n("none"), n("past"), 1];

    let dry = pressure_redis::gc(&config, &options(true, 2))
        .await
        .expect("dry run");
    assert_eq!(counts(&dry), expected, "{dry:?}");
    assert_eq!(dry.nodes, masters.len(), "every master scanned, once");
    for key in written.keys() {
        assert_eq!(pttl(&mut conn, key).await, -1, "{key}: a dry run changes nothing");
    }

    let done = pressure_redis::gc(&config, &options(false, 2)).await.expect("gc");
    assert_eq!(counts(&done), expected, "{done:?}");
    assert_eq!(done.nodes, masters.len());
    let default_ms = i64::try_from(DEFAULT_TTL.as_millis()).expect("small");
    for (key, (owner, kind)) in &written {
        let c = &mut masters[*owner];
        let left = pttl(c, key).await;
        match KINDS[*kind] {
            "past" => assert_eq!(left, -2, "{key} on master {owner}: deleted"),
            "future" => assert!(left > 120_000 - SLACK_MS && left <= 120_001, "{key}: PTTL {left}"),
            _ => assert!(
                left > default_ms - SLACK_MS && left <= default_ms,
                "{key}: PTTL {left}"
            ),
        }
    }
    assert_eq!(pttl(&mut conn, &stream).await, -1, "the manual queue persists");
    // Nothing under the prefix is left without a TTL on any master, but the
    // stream.
    for (m, c) in masters.iter_mut().enumerate() {
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = q(
                c,
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(format!("{prefix}:*"))
                    .arg("COUNT")
                    .arg(100),
            )
            .await;
            for key in keys {
                if key != stream {
                    assert!(pttl(c, &key).await > 0, "{key} on master {m} has a TTL");
                }
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
    }
}

#[tokio::test]
async fn an_unreachable_redis_is_an_error_with_its_address() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("redis://127.0.0.1:{port}");
    let config = RedisConfig {
        // A refused connect answers at once; the timeout only has to outlast a
        // loaded machine, so the cause stays "refused", never "timed out".
        connect_timeout_ms: 5_000,
        ..support::config(url.as_str())
    };
    match pressure_redis::gc(&config, &GcOptions::default()).await {
        Err(BackendError::Unavailable(m)) => {
            assert!(m.contains(&url) && m.contains("refused"), "{m}");
        }
        other => panic!("expected unavailable, got {other:?}"),
    }
}

/// The shared configuration (`SharedHash`, the gateway's live tenant limit
/// overrides) persists on purpose: gc skips it, dry run or not, while a
/// state hash beside it without a mark gets the default TTL.
#[tokio::test(flavor = "multi_thread")]
async fn shared_configuration_is_left_alone() {
    let prefix = format!("{}-gc-config", support::run_id());
    let config = RedisConfig {
        key_prefix: prefix.clone(),
        ..support::config(support::redis_url())
    };
    let overrides = pressure_redis::SharedHash::new(&config, "tenant-overrides");
    overrides
        .set("acme", r#"{"requestsPerMinute":10}"#)
        .await
        .expect("written");
    let mut conn = connect(&config).await;
    let bare = ResourceKeys::new(&prefix, "gateway:tenant:acme").state;
    hash(&mut conn, &bare, &[]).await;
    let version_key = format!("{}:v", overrides.key());

    for dry_run in [true, false] {
        let report = pressure_redis::gc(&config, &options(dry_run, 2))
            .await
            .expect("gc");
        // scanned, had_ttl, expiry_set, deleted, skipped_non_hash
        assert_eq!(counts(&report), [3, 0, 1, 0, 0], "{report:?}");
        assert_eq!(report.skipped_config, 2, "the hash and its version");
    }
    assert_eq!(pttl(&mut conn, overrides.key()).await, -1, "no expiry given");
    assert_eq!(pttl(&mut conn, &version_key).await, -1);
    assert_expires_in(&mut conn, &bare, DEFAULT_TTL.as_millis() as i64).await;
    let (_, entries) = overrides.snapshot().await.expect("read");
    assert_eq!(
        entries.get("acme").map(String::as_str),
        Some(r#"{"requestsPerMinute":10}"#)
    );
}
