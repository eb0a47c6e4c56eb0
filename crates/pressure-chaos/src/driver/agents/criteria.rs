//! The agents scenario's own criteria: every request answered or refused
//! in its dialect's shape, the storm served by the backup, recovery to the
//! primary, and each tenant's spend matching what the mock billed.

use std::collections::{BTreeMap, HashMap};

use pressure_mock::{Arrival, Outcome};

use super::{AgentRun, AgentSample, Dialect, INVALID_TENANT, PRICES, STORM_IN_MS, STORM_OUT_MS, TENANTS};
use crate::driver::criteria::{breaker_criteria, criterion, storm_window, RECOVERY_GRACE_MS, RECOVERY_SHARE};
use crate::report::Criterion;

/// The agents scenario's own criteria (the common ones are added by the caller).
pub(in crate::driver) fn criteria(run: &AgentRun) -> Vec<Criterion> {
    let mut out = vec![
        answered_or_refused(run),
        json_shapes(run),
        stream_orders(run),
        invalid_refused(run),
        storm_served_by_backup(run, Dialect::Messages),
        storm_served_by_backup(run, Dialect::Responses),
    ];
    for d in [Dialect::Messages, Dialect::Responses] {
        out.extend(breaker_criteria(
            &run.data,
            &d.primary_breaker(),
            d.primary(),
            Some(d.primary()),
        ));
    }
    out.push(recovery(run));
    out.push(money(run));
    out
}

fn good(run: &AgentRun) -> impl Iterator<Item = &AgentSample> {
    run.samples.iter().filter(|s| !s.sample.bad)
}

fn first_of<'a>(mut it: impl Iterator<Item = &'a AgentSample>) -> String {
    it.next()
        .map(|s| {
            format!(
                " (first: {} {} {}: {})",
                s.sample.id,
                s.dialect.label(),
                s.sample.status,
                s.shape.as_ref().err().map_or("", String::as_str)
            )
        })
        .unwrap_or_default()
}

fn answered_or_refused(run: &AgentRun) -> Criterion {
    let documented =
        |s: &AgentSample| s.sample.status == s.dialect.overload_status() && s.retry_after && s.shape.is_ok();
    let total = good(run).count();
    let ok = good(run).filter(|s| s.answered()).count();
    let refused = good(run).filter(|s| documented(s)).count();
    let failed = || good(run).filter(|s| !s.answered() && !documented(s));
    let n_failed = failed().count();
    criterion(
        "Every agent request is answered 2xx or refused as documented (529 / 503 with retry-after)",
        ok > 0 && n_failed == 0,
        format!(
            "of {total} requests: {ok} answered 2xx, {refused} refused 529/503 with retry-after, {n_failed} otherwise{}",
            first_of(failed())
        ),
    )
}

fn json_shapes(run: &AgentRun) -> Criterion {
    let of = |d: Dialect| {
        let json: Vec<&AgentSample> = good(run)
            .filter(|s| s.dialect == d && !s.sample.stream && (200..300).contains(&s.sample.status))
            .collect();
        let bad = json.iter().filter(|s| s.shape.is_err()).count();
        (json.len(), bad)
    };
    let (m, m_bad) = of(Dialect::Messages);
    let (r, r_bad) = of(Dialect::Responses);
    let malformed =
        good(run).filter(|s| !s.sample.stream && (200..300).contains(&s.sample.status) && s.shape.is_err());
    criterion(
        "Every JSON answer has its dialect's shape (an Anthropic message; a completed Responses response)",
        m > 0 && r > 0 && m_bad + r_bad == 0,
        format!(
            "{m_bad} of {m} Messages bodies and {r_bad} of {r} Responses bodies malformed{}",
            first_of(malformed)
        ),
    )
}

fn stream_orders(run: &AgentRun) -> Criterion {
    let of = |d: Dialect| {
        let streams: Vec<&AgentSample> = good(run)
            .filter(|s| s.dialect == d && s.sample.stream && s.sample.status == 200)
            .collect();
        let bad = streams.iter().filter(|s| s.shape.is_err()).count();
        (streams.len(), bad)
    };
    let (m, m_bad) = of(Dialect::Messages);
    let (r, r_bad) = of(Dialect::Responses);
    let broken = good(run).filter(|s| s.sample.stream && s.sample.status == 200 && s.shape.is_err());
    criterion(
        "Every stream keeps its dialect's event order (message_start … message_stop; response.created … response.completed)",
        m > 0 && r > 0 && m_bad + r_bad == 0,
        format!(
            "{m_bad} of {m} Messages streams and {r_bad} of {r} Responses streams out of order or failed{}",
            first_of(broken)
        ),
    )
}

fn invalid_refused(run: &AgentRun) -> Criterion {
    let bad: Vec<&AgentSample> = run.samples.iter().filter(|s| s.sample.bad).collect();
    let refused = bad
        .iter()
        .filter(|s| s.sample.status == 400 && s.shape.is_ok())
        .count();
    let by = |d: Dialect| bad.iter().filter(|s| s.dialect == d).count();
    criterion(
        "Invalid requests are refused 400 in the dialect's error shape",
        by(Dialect::Messages) > 0 && by(Dialect::Responses) > 0 && refused == bad.len(),
        format!(
            "{refused} of {} invalid requests ({} Messages, {} Responses) refused 400 with the dialect's error body{}",
            bad.len(),
            by(Dialect::Messages),
            by(Dialect::Responses),
            first_of(bad.iter().copied().filter(|s| !(s.sample.status == 400 && s.shape.is_ok())))
        ),
    )
}

/// The arrivals of each request id.
fn by_id(arrivals: &[Arrival]) -> HashMap<&str, Vec<&Arrival>> {
    let mut out: HashMap<&str, Vec<&Arrival>> = HashMap::new();
    for a in arrivals {
        if let Some(id) = a.request_id.as_deref() {
            out.entry(id).or_default().push(a);
        }
    }
    out
}

fn storm_served_by_backup(run: &AgentRun, d: Dialect) -> Criterion {
    let (start, end) = storm_window(&run.data);
    let (from, to) = (start + STORM_IN_MS, end - STORM_OUT_MS);
    let (backup, endpoint) = d.backup();
    let ids = by_id(&run.data.arrivals);
    let hit: Vec<&AgentSample> = good(run)
        .filter(|s| s.dialect == d && s.sample.start_ms >= from && s.sample.start_ms < to)
        .collect();
    let served = |s: &&AgentSample| {
        s.answered()
            && s.degradation() == Some("backup")
            && ids.get(s.sample.id.as_str()).is_some_and(|a| {
                a.iter()
                    .any(|a| a.outcome == Outcome::Ok && a.model == backup && a.endpoint == endpoint)
            })
    };
    let n = hit.iter().filter(|s| served(s)).count();
    let primary_ok = ids
        .values()
        .flatten()
        .filter(|a| a.model == d.primary() && a.outcome == Outcome::Ok && a.at_ms >= from && a.at_ms < to)
        .count();
    let (name, rendered) = match d {
        Dialect::Messages => (
            "During the storm, Messages traffic is served by the OpenAI backup and rendered as Anthropic messages",
            "Anthropic messages / events",
        ),
        Dialect::Responses => (
            "During the storm, Responses traffic is served by the Anthropic backup and rendered as Responses",
            "Responses objects / events",
        ),
    };
    criterion(
        name,
        !hit.is_empty() && n == hit.len() && primary_ok == 0,
        format!(
            "{n} of {} requests started {:.1}–{:.1} s answered by {backup} (on {endpoint}) with x-pressure-degradation: backup as {rendered}; {primary_ok} answers by {} in that span{}",
            hit.len(),
            from / 1_000.0,
            to / 1_000.0,
            d.primary(),
            first_of(hit.iter().copied().filter(|s| !served(s)))
        ),
    )
}

/// Of the good requests of `d` started in `[from, to)`: how many, and the
/// share answered by the primary.
fn primary_share(run: &AgentRun, d: Dialect, from: f64, to: f64) -> (usize, f64) {
    let started: Vec<&AgentSample> = good(run)
        .filter(|s| s.dialect == d && s.sample.start_ms >= from && s.sample.start_ms < to)
        .collect();
    let primary = started
        .iter()
        .filter(|s| s.answered() && s.degradation() == Some("primary"))
        .count();
    let share = if started.is_empty() {
        0.0
    } else {
        primary as f64 / started.len() as f64
    };
    (started.len(), share)
}

fn recovery(run: &AgentRun) -> Criterion {
    let (start, end) = storm_window(&run.data);
    let mut passed = true;
    let mut parts = Vec::new();
    for d in [Dialect::Messages, Dialect::Responses] {
        let (n_before, before) = primary_share(run, d, 0.0, start);
        let (n_after, after) = primary_share(run, d, end + RECOVERY_GRACE_MS, run.data.load_ms);
        passed &= n_before > 0 && n_after > 0 && before > 0.0 && after >= RECOVERY_SHARE * before;
        parts.push(format!(
            "{}: {:.1} % of {n_after} requests by {} from {:.1} s after the storm, {:.1} % of {n_before} before it",
            d.label(),
            after * 100.0,
            d.primary(),
            RECOVERY_GRACE_MS / 1_000.0,
            before * 100.0
        ));
    }
    criterion(
        "After the storm, traffic returns to the primaries",
        passed,
        format!(
            "{} (at least {:.0} % of the share before is needed)",
            parts.join("; "),
            RECOVERY_SHARE * 100.0
        ),
    )
}

/// The gateway's rule for a failed attempt (`pressure_llm`'s ledger): the
/// payer is charged the attempt's input at the model's input price (the
/// provider may bill it), while the mock bills nothing for a call it
/// refuses at once (500 / 503 / 529). The input of such a call is the
/// input the mock billed for the same prompt on the same model when it
/// answered.
fn refused_charge(
    a: &Arrival,
    prompt_of: &HashMap<&str, usize>,
    input_of: &HashMap<(&str, usize), u64>,
) -> Option<u64> {
    let prompt = *prompt_of.get(a.request_id.as_deref()?)?;
    let tokens = *input_of.get(&(a.model.as_str(), prompt))?;
    let price = PRICES.iter().find(|(m, _)| *m == a.model)?.1;
    Some(price.cost(tokens, 0).micro_usd())
}

fn money(run: &AgentRun) -> Criterion {
    const NAME: &str = "Each tenant's spend equals the mock's bill for its traffic, plus each refused attempt's prompt (the gateway's rule)";
    let spent = match &run.spend {
        Ok(s) => s,
        Err(e) => return criterion(NAME, false, format!("the tenants' spend could not be read: {e}")),
    };
    let tenant_of: HashMap<&str, &str> = run
        .samples
        .iter()
        .map(|s| (s.sample.id.as_str(), s.tenant))
        .collect();
    let prompt_of: HashMap<&str, usize> = run
        .samples
        .iter()
        .filter(|s| !s.sample.bad)
        .map(|s| (s.sample.id.as_str(), s.prompt))
        .collect();
    let mut input_of: HashMap<(&str, usize), u64> = HashMap::new();
    for a in run.data.arrivals.iter().filter(|a| a.outcome == Outcome::Ok) {
        if let Some(p) = a.request_id.as_deref().and_then(|id| prompt_of.get(id)) {
            input_of.insert((a.model.as_str(), *p), a.input_tokens);
        }
    }
    // Per tenant: (the mock's bill, refused calls, their prompts' charge).
    let mut per: BTreeMap<&str, (u64, u64, u64)> = TENANTS.iter().map(|(t, _)| (*t, (0, 0, 0))).collect();
    let mut unattributed = 0u64;
    let mut unknown = 0u64;
    for a in &run.data.arrivals {
        match a.request_id.as_deref().and_then(|id| tenant_of.get(id)) {
            Some(t) if *t == INVALID_TENANT.0 => {}
            Some(t) => {
                let row = per.entry(t).or_default();
                row.0 += a.micro_usd;
                if a.outcome == Outcome::ServerError {
                    row.1 += 1;
                    match refused_charge(a, &prompt_of, &input_of) {
                        Some(c) => row.2 += c,
                        None => unknown += 1,
                    }
                }
            }
            None => unattributed += a.micro_usd,
        }
    }
    let mut passed = unattributed == 0 && unknown == 0;
    let mut parts = Vec::new();
    for (t, (bill, refused, charge)) in &per {
        let s = spent.get(*t).copied().unwrap_or(0);
        passed &= *bill > 0 && s == bill + charge;
        parts.push(format!(
            "{t} spent {s} µ$ = billed {bill} µ$ + {charge} µ$ for the prompts of its {refused} refused attempts ({})",
            if s == bill + charge { "exact" } else { "MISMATCH" }
        ));
    }
    criterion(
        NAME,
        passed,
        format!(
            "{}; {unattributed} µ$ billed for no tenant's request; {unknown} refused attempts whose prompt was never answered on their model",
            parts.join("; ")
        ),
    )
}
