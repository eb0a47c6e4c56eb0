//! The report of a chaos run: [`Report`] (`report.json`), its Markdown
//! rendering (`report.md`) and SVG plots per scenario.

mod model;

pub use model::{
    BreakerSpan, Bucket, Criterion, LatencyPoint, MoneyRow, Percentiles, PhaseSpan, Report, ScenarioReport,
};
