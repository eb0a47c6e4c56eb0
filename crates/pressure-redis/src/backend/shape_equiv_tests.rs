//! The generated acquire scripts against the generic `lua/acquire.lua`, on
//! a real Redis (the testkit's): the same random sequence of acquisitions,
//! releases, tombstones, limit changes and clock jumps is applied to two
//! keys, one per script, and after every step the replies and the whole
//! hashes must be equal.
//!
//! Both scripts read the clock from an extra last `ARGV` here instead of
//! `TIME` (their clock lines are swapped), so the sequence is exact and
//! repeatable; nothing depends on the wall clock.

use super::{dims_of, member, AcquireArgs};
use crate::shape::{self, Shape};
use pressure_core::{Demand, LimitSpec, Limits, PPM};
use redis::Commands;
use std::collections::BTreeMap;
use std::time::Duration;

const CLOCK: &str = "local t = redis.call('TIME')\nlocal now = t[1] * 1000000 + t[2]\n";
const FAKE_CLOCK: &str = "local now = tonumber(ARGV[#ARGV])\n";

pub(super) fn with_fake_clock(src: &str) -> String {
    assert!(src.contains(CLOCK), "the script reads TIME as expected");
    src.replacen(CLOCK, FAKE_CLOCK, 1)
}

/// xorshift64*: a deterministic sequence, seeded per family.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

/// Limit families: each a list of variants the sequence switches between
/// (as `set_limits` would), all with small limits so that denials,
/// evictions, sweeps, rescaling and booking happen.
fn families() -> Vec<Vec<Limits>> {
    let ttl = Duration::from_secs(5);
    vec![
        vec![
            Limits::default().requests_per_minute(30),
            Limits::default().requests_per_minute(12),
        ],
        vec![
            Limits::default().requests_per_second(5).gcra(None),
            Limits::default().requests_per_second(20).gcra(Some(3)),
        ],
        vec![
            Limits::default()
                .requests_per_minute(40)
                .tokens_per_minute(2_000)
                .max_concurrent_requests(3)
                .lease_ttl(ttl),
            Limits::default()
                .requests_per_minute(25)
                .tokens_per_minute(900)
                .max_concurrent_requests(2)
                .lease_ttl(ttl),
            // A shorter lease TTL: new leases expire before older ones.
            Limits::default()
                .requests_per_minute(40)
                .tokens_per_minute(2_000)
                .max_concurrent_requests(3)
                .lease_ttl(Duration::from_millis(1_500)),
        ],
        vec![
            Limits::default()
                .requests_per_minute(60)
                .tokens_per_minute(3_000)
                .gcra(None),
            Limits::default()
                .requests_per_minute(90)
                .tokens_per_minute(1_500)
                .gcra(Some(5)),
        ],
        vec![
            Limits::default()
                .requests_per_second(10)
                .max_concurrent_requests(2)
                .lease_ttl(ttl)
                .gcra(None),
            Limits::default()
                .requests_per_second(4)
                .max_concurrent_requests(3)
                .lease_ttl(ttl)
                .gcra(None),
        ],
        vec![Limits::default().max_concurrent_requests(2).lease_ttl(ttl)],
        // Calendar dimensions, alone and beside sliding ones and leases;
        // the sequence starts a minute before a month ends (see `offset`).
        vec![
            Limits::default()
                .requests_per_day(60)
                .tokens_per_day(9_000)
                .cost_micro_usd_per_month(12_000),
            Limits::default()
                .requests_per_day(40)
                .cost_micro_usd_per_day(5_000)
                .cost_micro_usd_per_month(9_000),
        ],
        vec![
            Limits::default()
                .requests_per_minute(30)
                .tokens_per_day(6_000)
                .cost_micro_usd_per_day(8_000)
                .max_concurrent_requests(3)
                .lease_ttl(ttl),
            Limits::default()
                .requests_per_second(5)
                .gcra(None)
                .requests_per_day(50)
                .max_concurrent_requests(2)
                .lease_ttl(ttl),
        ],
        vec![
            Limits::default()
                .requests_per_second(10)
                .input_tokens_per_minute(500)
                .output_tokens_per_minute(500)
                .max_concurrent_requests(4)
                .lease_ttl(ttl),
            Limits::default()
                .requests_per_minute(30)
                .input_tokens_per_minute(800)
                .output_tokens_per_minute(300)
                .max_concurrent_requests(4)
                .lease_ttl(ttl),
        ],
    ]
}

fn hash(con: &mut redis::Connection, key: &str) -> BTreeMap<String, String> {
    con.hgetall(key).expect("HGETALL")
}

#[test]
fn generated_scripts_decide_and_store_like_the_generic_one() {
    let url = pressure_testkit::redis_url();
    let mut con = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection())
        .expect("test redis answers");
    let generic = redis::Script::new(&with_fake_clock(crate::scripts::ACQUIRE_LUA));
    let release = redis::Script::new(crate::scripts::RELEASE_LUA);
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut con).expect("TIME");
    let run = format!("{:x}", secs ^ micros.rotate_left(20));

    let mut steps = 0;
    let (mut granted, mut denied, mut tombstoned, mut marked) = (0, 0, 0, 0);
    for (fi, family) in families().into_iter().enumerate() {
        let specs: Vec<LimitSpec> = family
            .iter()
            .map(|l| l.compile().expect("valid limits"))
            .collect();
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (fi as u64 + 1));
        let kg = format!("pressure:{{eq{run}.{fi}.g}}:s");
        let ks = format!("pressure:{{eq{run}.{fi}.s}}:s");
        let _: () = con.del(&[&kg, &ks]).expect("DEL");
        // An hour ahead of the server, so PEXPIREAT never drops a key.
        let mut now = secs * 1_000_000 + micros + 3_600_000_000;
        // Calendar wall time: a minute before the next month ends, so the
        // sequence crosses a day and a month boundary.
        let month_end_us = pressure_core::Calendar::Month.next_reset(now / 1_000) * 1_000;
        let offset = month_end_us as i64 - 60_000_000 - now as i64;
        let mut v = 0;
        for _ in 0..600 {
            steps += 1;
            now += match rng.below(10) {
                0..=6 => rng.below(3_000),
                7 | 8 => rng.below(3_000_000),
                _ => rng.below(200_000_000),
            };
            if specs.len() > 1 && rng.chance(3) {
                v = (v + 1) % specs.len();
            }
            let spec = &specs[v];
            let dims = dims_of(spec).expect("dims");
            let steps_us: Vec<u64> = dims.iter().map(|d| d.step_us).collect();
            let shape = Shape::of(spec, &steps_us).expect("a shape of its own");
            let shaped = redis::Script::new(&with_fake_clock(&shape::generate(&shape)));
            let lease_id = rng.below(12);
            match rng.below(20) {
                0..=1 => {
                    let m = member(lease_id);
                    for k in [&kg, &ks] {
                        let _: i64 = release.key(k).arg(0).arg(&m).invoke(&mut con).expect("release");
                    }
                    continue;
                }
                2 => {
                    // A tombstone, as release.lua leaves for a lost acquisition.
                    let f = format!("d:{}", member(lease_id));
                    for k in [&kg, &ks] {
                        let _: () = con.hset(k, &f, now + 60_000_000).expect("HSET");
                    }
                    continue;
                }
                _ => {}
            }
            let demand = Demand {
                requests: [1, 1, 1, 1, 0, 2][rng.below(6) as usize],
                input_tokens: if rng.chance(20) { 0 } else { rng.below(300) },
                output_tokens: if rng.chance(20) { 0 } else { rng.below(300) },
                cost_micro_usd: if rng.chance(20) { 0 } else { rng.below(400) },
                lease: rng.chance(80),
                ceiling_ppm: if rng.chance(25) { 600_000 } else { PPM },
                book_within_ns: [0, 0, 50_000_000, 2_000_000_000][rng.below(4) as usize],
                count_denial: true,
            };
            let conc = match (demand.lease, spec.concurrency) {
                (true, Some(c)) => pressure_core::RateSpec::scaled(c, demand.ceiling_ppm),
                _ => 0,
            };
            let m = member(lease_id);
            let argv = AcquireArgs {
                dims: &dims,
                spec,
                demand: &demand,
                conc,
                member: &m,
                offset_us: offset,
            };
            let mut inv = generic.key(&kg);
            for a in argv.generic() {
                inv.arg(a);
            }
            let rg: Vec<i64> = inv.arg(now).invoke(&mut con).expect("generic acquire");
            let mut inv = shaped.key(&ks);
            for a in argv.shaped(&shape) {
                inv.arg(a);
            }
            let rs: Vec<i64> = inv.arg(now).invoke(&mut con).expect("generated acquire");
            assert_eq!(
                rg, rs,
                "family {fi} step {steps}: replies differ for {demand:?} (conc {conc})"
            );
            let (hg, hs) = (hash(&mut con, &kg), hash(&mut con, &ks));
            assert_eq!(
                hg, hs,
                "family {fi} step {steps}: state differs after {demand:?} (conc {conc}), reply {rg:?}"
            );
            // A key that holds the expiry mark has that expiry: the write
            // that created it came before the PEXPIREAT (issue 27).
            for k in [&kg, &ks] {
                if con.hexists::<_, _, bool>(k, "e").expect("HEXISTS") {
                    let ttl: i64 = con.pttl(k).expect("PTTL");
                    assert!(
                        ttl > 0,
                        "family {fi} step {steps}: {k} holds `e` but has PTTL {ttl}"
                    );
                    marked += 1;
                }
            }
            match rg[0] {
                1 => granted += 1,
                2 => tombstoned += 1,
                _ => denied += 1,
            }
        }
        let _: () = con.del(&[&kg, &ks]).expect("DEL");
    }
    eprintln!("granted {granted}, denied {denied}, tombstoned {tombstoned}, marked keys seen {marked}");
    // The sequence exercised every outcome.
    assert!(marked > 1_000, "marked keys seen {marked}");
    assert!(
        granted > 500 && denied > 300 && tombstoned > 5,
        "granted {granted}, denied {denied}, tombstoned {tombstoned}"
    );
}
