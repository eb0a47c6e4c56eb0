//! The scripts that may create a resource's key without an acquisition —
//! a release leaving a tombstone for a lost acquisition, a reconcile that
//! adds units to a key that is gone — give it its expiry in the same call,
//! on a real Redis (the testkit's).

use crate::scripts;
use redis::Commands;

fn connection() -> redis::Connection {
    redis::Client::open(pressure_testkit::redis_url().as_str())
        .and_then(|c| c.get_connection())
        .expect("test redis answers")
}

fn fresh_key(con: &mut redis::Connection, name: &str) -> String {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(con).expect("TIME");
    let key = format!("pressure:{{expiry{secs}{micros}.{name}}}:s");
    let _: () = con.del(&key).expect("DEL");
    key
}

#[test]
fn a_tombstone_on_a_new_key_expires_with_it() {
    let mut con = connection();
    let key = fresh_key(&mut con, "tomb");
    let tomb_us = 2_000_000u64;
    let freed: i64 = scripts::RELEASE
        .key(&key)
        .arg(tomb_us)
        .arg("00000000000000ab")
        .invoke(&mut con)
        .expect("release");
    assert_eq!(freed, 0, "no lease was there");
    assert!(con
        .hexists::<_, _, bool>(&key, "d:00000000000000ab")
        .expect("HEXISTS"));
    let ttl: i64 = con.pttl(&key).expect("PTTL");
    // The tombstone's TTL plus a margin of at most as much again.
    assert!(ttl > 2_000 && ttl <= 4_001, "PTTL {ttl} ms");
}

#[test]
fn a_reconcile_that_creates_the_key_gives_it_an_expiry() {
    let mut con = connection();
    for (gcra, step_us, window_us) in [(1u8, 100_000u64, 0u64), (0, 33_334, 1_000_000)] {
        let key = fresh_key(&mut con, &format!("rec{gcra}"));
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut con).expect("TIME");
        let now_us = secs * 1_000_000 + micros;
        let _: i64 = scripts::RECONCILE
            .key(&key)
            .arg(1)
            .arg(now_us)
            .arg(gcra)
            .arg(0)
            .arg(5)
            .arg(step_us)
            .arg(window_us)
            .invoke(&mut con)
            .expect("reconcile");
        let exists: bool = con.exists(&key).expect("EXISTS");
        assert!(exists, "gcra={gcra}: the correction was written");
        let ttl: i64 = con.pttl(&key).expect("PTTL");
        // gcra: 5 intervals of 100 ms; window: 32 sub-windows of 33.3 ms;
        // each plus a margin of at most as much again.
        let bound = if gcra == 1 { 1_001 } else { 2_135 };
        assert!(
            ttl > 0 && ttl <= bound,
            "gcra={gcra}: PTTL {ttl} ms, bound {bound}"
        );
    }
}

/// A calendar count gives its key an expiry at the end of its period (plus
/// the margin), never later: a tenant's daily budget leaves Redis with its
/// day. A correction of a count whose key is gone writes nothing.
#[test]
fn a_calendar_count_expires_with_its_period() {
    use super::{changes, dims_of, member, reconcile_invocation, AcquireArgs};
    use pressure_core::{Calendar, Demand, Limits};
    let mut con = connection();
    for (limits, calendar, name) in [
        (
            Limits::default().cost_micro_usd_per_day(1_000),
            Calendar::Day,
            "day",
        ),
        (
            Limits::default().cost_micro_usd_per_month(1_000),
            Calendar::Month,
            "month",
        ),
    ] {
        let key = fresh_key(&mut con, &format!("cal-{name}"));
        let spec = limits.compile().expect("valid");
        let dims = dims_of(&spec).expect("dims");
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut con).expect("TIME");
        let now_us = secs * 1_000_000 + micros;
        // The calendar's wall time 30 s before its period ends.
        let end_us = calendar.next_reset(now_us / 1_000 + 3_600_000) * 1_000;
        let offset = end_us as i64 - 30_000_000 - now_us as i64;
        let demand = Demand {
            cost_micro_usd: 10,
            ..Demand::default()
        };
        let mut inv = scripts::ACQUIRE.key(&key);
        let m = member(1);
        let argv = AcquireArgs::unleased(&dims, &spec, &demand, &m, offset);
        for a in argv.generic() {
            inv.arg(a);
        }
        let r: Vec<i64> = inv.invoke(&mut con).expect("acquire");
        assert_eq!(r[0], 1, "{name}: granted");
        let ttl: i64 = con.pttl(&key).expect("PTTL");
        // 30 s to the period's end, plus a margin of at most 10 s.
        assert!(ttl > 25_000 && ttl <= 40_001, "{name}: PTTL {ttl} ms");
        let _: () = con.del(&key).expect("DEL");
        let up = changes(&dims, &spec, |units| (0, units(&demand)));
        let _: i64 = reconcile_invocation(&key, now_us, &up, offset)
            .invoke(&mut con)
            .expect("reconcile");
        let exists: bool = con.exists(&key).expect("EXISTS");
        assert!(!exists, "{name}: a correction of a gone count creates no key");
    }
}
