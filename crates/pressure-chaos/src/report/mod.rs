//! The report of a chaos run: [`Report`] (`report.json`), its Markdown
//! rendering (`report.md`) and SVG plots per scenario.

mod markdown;
mod model;
mod svg;
mod write;

pub use markdown::render_markdown;
pub use model::{
    BreakerSpan, Bucket, Criterion, LatencyPoint, MoneyRow, Percentiles, PhaseSpan, Report, ScenarioReport,
};
pub use svg::{breaker_svg, latency_svg, throughput_svg};
pub use write::write_report;
