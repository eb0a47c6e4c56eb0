//! Spend against budget per tenant: the `budgets` rows of the summary's
//! top tenants, and the `pressure_tenant_spend_micro_usd` /
//! `pressure_tenant_budget_micro_usd` families of `/metrics`.
//!
//! Spend lives in the store (fleet-wide), so showing it costs a store read
//! per tenant shown. `/metrics` therefore shows the [`METRICS_TOP`]
//! tenants this process ranks first (as the dashboard ranks them: most
//! denials, then most admissions; the admin module ranks and reads them),
//! which bounds both the label set and the reads of one scrape, however
//! many tenants there are.

use crate::metrics::text;
use crate::resources;
use pressure_core::{Dimension, ResourceStats};
use serde_json::{json, Value};

/// Tenants whose spend `/metrics` shows.
pub(super) const METRICS_TOP: usize = 10;

/// The calendar budgets of `s` with their spend and reset:
/// `[{"dimension","spent","budget","resetsAt"}]` (`resetsAt` in Unix
/// milliseconds, by the store's clock; absent before the first spend).
pub(super) fn rows(s: &ResourceStats) -> Vec<Value> {
    Dimension::ALL
        .into_iter()
        .filter(|d| d.calendar().is_some())
        .filter_map(|d| {
            let budget = s.limits.get(d)?;
            let spent = s.usage.get(d.as_str()).copied().unwrap_or(0);
            let mut row = json!({ "dimension": d.as_str(), "spent": spent, "budget": budget });
            if let Some(at) = s.resets_at.get(d.as_str()) {
                row["resetsAt"] = json!(at);
            }
            Some(row)
        })
        .collect()
}

/// The tenants this process knows that have a money budget, with their
/// local numbers (the caller ranks them and reads the top ones' spend).
pub(super) fn money_tenants(stats: Vec<ResourceStats>) -> Vec<ResourceStats> {
    stats
        .into_iter()
        .filter(|s| resources::is_tenant(&s.resource) && has_money_budget(s))
        .collect()
}

/// The money budgets of `top` (tenants with their spend read from the
/// store), as Prometheus families.
pub(super) fn write_metrics(top: &[ResourceStats], out: &mut String) {
    if !top.is_empty() {
        let _ = write_families(top, out);
    }
}

fn has_money_budget(s: &ResourceStats) -> bool {
    s.limits.cost_micro_usd_per_day.is_some() || s.limits.cost_micro_usd_per_month.is_some()
}

/// One family: name, help, and a tenant's value on a dimension.
type MoneyFamily = (
    &'static str,
    &'static str,
    fn(&ResourceStats, Dimension) -> Option<u64>,
);

fn write_families(top: &[ResourceStats], out: &mut String) -> std::fmt::Result {
    const MONEY: [Dimension; 2] = [Dimension::CostMicroUsdPerDay, Dimension::CostMicroUsdPerMonth];
    let families: [MoneyFamily; 2] = [
        (
            "pressure_tenant_spend_micro_usd",
            "Money a tenant spent in the current UTC day or month, micro-USD, as the store counts it (top tenants only).",
            |s, d| s.limits.get(d).map(|_| s.usage.get(d.as_str()).copied().unwrap_or(0)),
        ),
        (
            "pressure_tenant_budget_micro_usd",
            "A tenant's money budget for the UTC day or month, micro-USD (top tenants only).",
            |s, d| s.limits.get(d),
        ),
    ];
    for (name, help, value) in families {
        text::header(out, name, "gauge", help)?;
        for s in top {
            let tenant = s
                .resource
                .strip_prefix(resources::TENANT_PREFIX)
                .unwrap_or(&s.resource);
            for d in MONEY {
                if let Some(v) = value(s, d) {
                    text::sample(out, name, &[("tenant", tenant), ("dimension", d.as_str())], v)?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pressure_core::{Limits, ResourceKind};

    fn tenant(id: &str, limits: Limits, usage: &[(&str, u64)]) -> ResourceStats {
        ResourceStats {
            resource: resources::tenant(id),
            kind: ResourceKind::Limit,
            limits,
            usage: usage.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
            resets_at: [("costMicroUsdPerDay".to_owned(), 1_764_720_000_000)]
                .into_iter()
                .collect(),
            active: None,
            allowed: 1,
            denied: 0,
            backend_errors: 0,
            shadow_denied: 0,
            queued: None,
            wait_time_ms: None,
            lazy: true,
        }
    }

    #[test]
    fn rows_list_the_calendar_budgets_only() {
        let limits = Limits::default()
            .requests_per_minute(5)
            .requests_per_day(100)
            .cost_micro_usd_per_day(900);
        let s = tenant(
            "acme",
            limits,
            &[("requestsPerMinute", 2), ("costMicroUsdPerDay", 250)],
        );
        assert_eq!(
            Value::Array(rows(&s)),
            json!([
                {"dimension": "requestsPerDay", "spent": 0, "budget": 100},
                {"dimension": "costMicroUsdPerDay", "spent": 250, "budget": 900, "resetsAt": 1_764_720_000_000_u64},
            ])
        );
    }

    #[test]
    fn metrics_name_the_tenant_and_the_period() {
        let limits = Limits::default()
            .cost_micro_usd_per_day(900)
            .cost_micro_usd_per_month(9_000);
        let s = tenant(
            "a\"b",
            limits,
            &[("costMicroUsdPerDay", 250), ("costMicroUsdPerMonth", 4_000)],
        );
        let mut out = String::new();
        write_families(&[s], &mut out).unwrap();
        for line in [
            r#"pressure_tenant_spend_micro_usd{tenant="a\"b",dimension="costMicroUsdPerDay"} 250"#,
            r#"pressure_tenant_spend_micro_usd{tenant="a\"b",dimension="costMicroUsdPerMonth"} 4000"#,
            r#"pressure_tenant_budget_micro_usd{tenant="a\"b",dimension="costMicroUsdPerDay"} 900"#,
            "# TYPE pressure_tenant_budget_micro_usd gauge",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} missing in:\n{out}");
        }
    }
}
