//! Issue 21 on a real Redis (the testkit's), with the clock of the scripts
//! swapped for an argument: a burst that exhausts a per-minute window in
//! one sub-window is refused with a wait of at most the minute — a minute
//! after its last grant — refused a microsecond before that and admitted
//! at it, by the generic and the generated acquire script alike; usage and
//! reconcile count the same way.

use super::shape_equiv_tests::with_fake_clock;
use super::{dims_of, member, AcquireArgs, Change, Dim};
use crate::{scripts, shape};
use pressure_core::{Demand, LimitSpec, Limits};
use redis::Commands;

const MINUTE_US: u64 = 60_000_000;

/// A connection to the test Redis, and its clock (µs), which tags this
/// run's keys.
fn connect() -> (redis::Connection, u64) {
    let mut con = redis::Client::open(pressure_testkit::redis_url().as_str())
        .and_then(|c| c.get_connection())
        .expect("test redis answers");
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut con).expect("TIME");
    (con, secs * 1_000_000 + micros)
}

/// Where the tests start: an hour after `server_us` (PEXPIREAT never drops
/// a key), 1 ms into a 2 s sub-window.
fn early_in_a_sub_window(server_us: u64) -> u64 {
    (server_us / 1_000_000 + 3_600) / 2 * 2 * 1_000_000 + 1_000
}

/// Two requests per minute: its spec and its one dimension.
fn two_per_minute() -> (LimitSpec, Dim) {
    let spec = Limits::default().requests_per_minute(2).compile().expect("valid");
    let dim = dims_of(&spec).expect("dims").remove(0);
    (spec, dim)
}

/// One acquisition of one request at `now` (µs) through `script`:
/// `(granted, wait_us)`.
fn acquire(con: &mut redis::Connection, key: &str, generic: bool, now: u64) -> (bool, u64) {
    let spec = Limits::default().requests_per_minute(2).compile().expect("valid");
    let dims = dims_of(&spec).expect("dims");
    let demand = Demand::default();
    let m = member(1);
    let argv = AcquireArgs::unleased(&dims, &spec, &demand, &m, 0);
    let (src, args) = if generic {
        (scripts::ACQUIRE_LUA.to_owned(), argv.generic())
    } else {
        let steps: Vec<u64> = dims.iter().map(|d| d.step_us).collect();
        let shape = shape::Shape::of(&spec, &steps).expect("a shape");
        (shape::generate(&shape), argv.shaped(&shape))
    };
    let script = redis::Script::new(&with_fake_clock(&src));
    let mut inv = script.key(key);
    for a in args {
        inv.arg(a);
    }
    let r: Vec<i64> = inv.arg(now).invoke(con).expect("acquire");
    (r[0] == 1, if r[0] == 1 { 0 } else { r[1] as u64 })
}

fn usage(con: &mut redis::Connection, key: &str, now: u64) -> i64 {
    let (_, d) = two_per_minute();
    let script = redis::Script::new(&with_fake_clock(scripts::USAGE_LUA));
    let v: Vec<i64> = script
        .key(key)
        .arg(1)
        .arg(0)
        .arg(d.rate.dimension.index())
        .arg(d.step_us)
        .arg(d.window_us)
        .arg(0)
        .arg(0)
        .arg(now)
        .invoke(con)
        .expect("usage");
    v[0]
}

fn reconcile(con: &mut redis::Connection, key: &str, at: u64, delta: i64, now: u64) {
    let counts = match u64::try_from(delta) {
        Ok(up) => (0, up),
        Err(_) => (delta.unsigned_abs(), 0),
    };
    let c = Change::of(&two_per_minute().1, counts);
    let script = redis::Script::new(&with_fake_clock(scripts::RECONCILE_LUA));
    let _: i64 = script
        .key(key)
        .arg(1)
        .arg(at)
        .arg(0)
        .arg(c.dimension)
        .arg(c.delta)
        .arg(c.step_us)
        .arg(c.window_us)
        .arg(0)
        .arg(now)
        .invoke(con)
        .expect("reconcile");
}

#[test]
fn a_burst_in_one_sub_window_waits_at_most_the_window() {
    let (mut con, run) = connect();
    let t0 = early_in_a_sub_window(run);
    for generic in [true, false] {
        let key = format!("pressure:{{wait{run}.{generic}}}:s");
        let _: () = con.del(&key).expect("DEL");
        let last = t0 + 400_000;
        assert_eq!(acquire(&mut con, &key, generic, t0), (true, 0));
        assert_eq!(acquire(&mut con, &key, generic, last), (true, 0));
        let now = t0 + 900_000;
        let (granted, wait) = acquire(&mut con, &key, generic, now);
        assert!(!granted);
        assert!(wait <= MINUTE_US, "generic {generic}: wait {wait} µs");
        assert_eq!(
            now + wait,
            last + MINUTE_US,
            "generic {generic}: a minute after the last grant"
        );
        assert_eq!(usage(&mut con, &key, now + wait - 1), 2);
        assert!(
            !acquire(&mut con, &key, generic, now + wait - 1).0,
            "generic {generic}"
        );
        assert_eq!(usage(&mut con, &key, now + wait), 0, "generic {generic}");
        // A correction for a grant that has left changes nothing.
        reconcile(&mut con, &key, last, 1, now + wait);
        assert_eq!(usage(&mut con, &key, now + wait), 0, "generic {generic}");
        assert!(
            acquire(&mut con, &key, generic, now + wait).0,
            "generic {generic}"
        );
        assert!(
            acquire(&mut con, &key, generic, now + wait).0,
            "generic {generic}: both left"
        );
        let _: () = con.del(&key).expect("DEL");
    }
}

/// A grant by a version that keeps no `w<d>:t` (units added to a
/// sub-window and the sum, as the scripts before issue 21 did) after this
/// version's last grant is not let go with it: in the last grant's own
/// sub-window (more units than `w<d>:tc`) that sub-window counts until its
/// end + W, and in a later sub-window that one stays.
#[test]
fn a_grant_by_an_older_version_keeps_its_sub_window() {
    let (mut con, run) = connect();
    let t0 = early_in_a_sub_window(run);
    let (_, d) = two_per_minute();
    let step = d.step_us;
    let k = t0 / step;
    let old_grant = |con: &mut redis::Connection, key: &str, sub_window: u64| {
        let _: i64 = con
            .hincr(key, format!("{}{sub_window}", d.fields[0]), 1)
            .expect("HINCRBY");
        let _: i64 = con.hincr(key, &d.fields[1], 1).expect("HINCRBY");
    };
    for generic in [true, false] {
        // In the last grant's sub-window.
        let key = format!("pressure:{{old{run}.{generic}.same}}:s");
        let _: () = con.del(&key).expect("DEL");
        assert!(acquire(&mut con, &key, generic, t0).0);
        old_grant(&mut con, &key, k);
        let (granted, wait) = acquire(&mut con, &key, generic, t0 + 900_000);
        assert!(!granted);
        assert_eq!(wait, MINUTE_US, "generic {generic}: capped at W");
        let after_t = t0 + MINUTE_US + 500_000;
        assert_eq!(usage(&mut con, &key, after_t), 2, "generic {generic}");
        assert!(!acquire(&mut con, &key, generic, after_t).0, "generic {generic}");
        let end = (k + 1) * step + MINUTE_US;
        assert!(!acquire(&mut con, &key, generic, end - 1).0, "generic {generic}");
        assert!(acquire(&mut con, &key, generic, end).0, "generic {generic}");
        let _: () = con.del(&key).expect("DEL");

        // In a later sub-window.
        let key = format!("pressure:{{old{run}.{generic}.later}}:s");
        let _: () = con.del(&key).expect("DEL");
        assert!(acquire(&mut con, &key, generic, t0).0);
        old_grant(&mut con, &key, k + 1);
        let after_t = t0 + MINUTE_US;
        assert_eq!(usage(&mut con, &key, after_t), 1, "generic {generic}");
        assert!(acquire(&mut con, &key, generic, after_t).0, "generic {generic}");
        assert!(
            !acquire(&mut con, &key, generic, after_t).0,
            "generic {generic}: the old grant stays"
        );
        let _: () = con.del(&key).expect("DEL");
    }
}
