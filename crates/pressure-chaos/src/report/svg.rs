//! SVG plots of one scenario: throughput, latency and the breaker timeline.
//!
//! Drawn with `plotters`' SVG backend without font libraries (text goes into
//! the SVG as `<text>` and is laid out by the viewer), so the report builds
//! on a bare CI machine and the plots read on GitHub. Every plot is a
//! self-contained 800×300 SVG whose title names the scenario. Bad input
//! (empty series, NaN, zero-width buckets, a single point) never panics: such
//! points are skipped, and a drawing error yields a small SVG that says so.

use std::error::Error;

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::model::{PhaseSpan, ScenarioReport};

/// Width of every plot, in pixels, as drawing coordinates take it.
const WIDTH_PX: i32 = 800;
/// Height of every plot, in pixels, as drawing coordinates take it.
const HEIGHT_PX: i32 = 300;
/// [`WIDTH_PX`], as the backend's size takes it.
const WIDTH: u32 = WIDTH_PX.unsigned_abs();
/// [`HEIGHT_PX`], as the backend's size takes it.
const HEIGHT: u32 = HEIGHT_PX.unsigned_abs();
/// Font family of every text.
const FONT: &str = "sans-serif";

/// Fill of a fault phase's shading (drawn at [`FAULT_OPACITY`]).
const FAULT_SHADE: RGBColor = RGBColor(0xFD, 0xAE, 0x61);
/// Opacity of a fault phase's shading.
const FAULT_OPACITY: f64 = 0.3;
/// Opacity of a breaker band (legend swatches are opaque, so bands can be told apart).
const BAND_OPACITY: f64 = 0.85;

/// Breaker state `closed`.
const CLOSED: RGBColor = RGBColor(0x2C, 0xA0, 0x2C);
/// Breaker state `half_open`.
const HALF_OPEN: RGBColor = RGBColor(0xFF, 0xBF, 0x00);
/// Breaker state `open`.
const OPEN: RGBColor = RGBColor(0xD6, 0x27, 0x28);
/// Any other breaker state.
const OTHER_STATE: RGBColor = RGBColor(0x7F, 0x7F, 0x7F);

/// What a drawing step returns.
type DrawResult = Result<(), Box<dyn Error>>;
/// A labelled line: its label, colour and `(seconds, value)` points.
type Series<'a> = (&'a str, RGBColor, Vec<(f64, f64)>);
/// The whole SVG canvas.
type Area<'b> = DrawingArea<SVGBackend<'b>, plotters::coord::Shift>;
/// A chart with seconds on x and a float y axis.
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Client and upstream rates per time bucket (requests per second, `count /
/// width`) over seconds since the scenario started, with fault phases
/// shaded and named: shows whether clients kept being answered while the
/// provider failed, and how hard the stack hit the provider meanwhile.
pub fn throughput_svg(s: &ScenarioReport) -> String {
    let title = format!("{}: throughput", s.name);
    render(&title, |root| {
        let rate = |count: u64, width_ms: f64| count_f64(count) / (width_ms / 1000.0);
        let buckets: Vec<_> = s
            .throughput
            .iter()
            .filter(|b| b.t_ms.is_finite() && b.width_ms.is_finite() && b.width_ms > 0.0)
            .collect();
        let series: [Series<'_>; 6] = [
            (
                "client answered",
                CLOSED,
                pick(&buckets, |b| rate(b.answered, b.width_ms)),
            ),
            (
                "client degraded",
                HALF_OPEN,
                pick(&buckets, |b| rate(b.degraded, b.width_ms)),
            ),
            (
                "client failed",
                OPEN,
                pick(&buckets, |b| rate(b.failed, b.width_ms)),
            ),
            (
                "upstream",
                RGBColor(0x1F, 0x77, 0xB4),
                pick(&buckets, |b| rate(b.upstream, b.width_ms)),
            ),
            (
                "upstream 429",
                RGBColor(0x94, 0x67, 0xBD),
                pick(&buckets, |b| rate(b.upstream_429, b.width_ms)),
            ),
            (
                "upstream 500",
                RGBColor(0x8C, 0x56, 0x4B),
                pick(&buckets, |b| rate(b.upstream_500, b.width_ms)),
            ),
        ];
        let x_end = buckets.iter().map(|b| (b.t_ms + b.width_ms) / 1000.0);
        lines_chart(root, &title, &s.phases, x_end, series, "requests per second")
    })
}

/// Client latency p50/p95/p99 per time bucket, in milliseconds, over seconds
/// since the scenario started, with fault phases shaded and named: shows
/// what a fault does to the tail and whether deadlines cap it.
pub fn latency_svg(s: &ScenarioReport) -> String {
    let title = format!("{}: client latency", s.name);
    render(&title, |root| {
        let points: Vec<_> = s.latency_series.iter().filter(|p| p.t_ms.is_finite()).collect();
        let series: [Series<'_>; 3] = [
            ("p50", RGBColor(0x1F, 0x77, 0xB4), pick(&points, |p| p.p50)),
            ("p95", RGBColor(0xFF, 0x7F, 0x0E), pick(&points, |p| p.p95)),
            ("p99", OPEN, pick(&points, |p| p.p99)),
        ];
        let x_end = points.iter().map(|p| p.t_ms / 1000.0);
        lines_chart(root, &title, &s.phases, x_end, series, "latency (ms)")
    })
}

/// Labelled lines over seconds, with the fault phases shaded and a legend:
/// the x axis reaches the last point or phase end, the y axis 10 % above
/// the highest value.
fn lines_chart<const N: usize>(
    root: &Area<'_>,
    title: &str,
    phases: &[PhaseSpan],
    x_end: impl Iterator<Item = f64>,
    series: [Series<'_>; N],
    y_label: &str,
) -> DrawResult {
    let x_max = axis_max(x_end.chain(phase_ends(phases)), 1.0);
    let y_max = axis_max(series.iter().flat_map(|(_, _, p)| p.iter().map(|&(_, y)| y)), 1.0) * 1.1;
    let mut chart = cartesian(root, title, x_max, y_max, y_label)?;
    shade_phases(&mut chart, phases, y_max)?;
    for (label, color, points) in series {
        line(&mut chart, points, label, color)?;
    }
    legend(&mut chart)
}

/// A timeline of the circuit breakers: one row per breaker name (in order of
/// first appearance), one band per [`BreakerSpan`](super::BreakerSpan)
/// coloured by state (closed green, half_open amber, open red, anything else
/// grey), fault phases marked by dashed boundaries: shows when each breaker
/// opened relative to the fault and when it recovered. Without spans the
/// plot says "no breaker transitions".
pub fn breaker_svg(s: &ScenarioReport) -> String {
    let title = format!("{}: circuit breakers", s.name);
    render(&title, |root| {
        let names = breaker_names(s);
        if names.is_empty() {
            root.titled(&title, (FONT, 16))?.draw(&Text::new(
                "no breaker transitions",
                (WIDTH_PX / 2, HEIGHT_PX / 2 - 30),
                text_style(14, BLACK.mix(0.7), HPos::Center, VPos::Center),
            ))?;
            return Ok(());
        }
        let rows = count_f64(names.len());
        let spans = s
            .breaker
            .iter()
            .filter(|b| b.start_ms.is_finite() && b.end_ms.is_finite());
        let x_max = axis_max(
            spans
                .clone()
                .map(|b| b.end_ms.max(b.start_ms) / 1000.0)
                .chain(phase_ends(&s.phases)),
            1.0,
        );
        let longest = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
        let label_width = u32::try_from(longest)
            .unwrap_or(u32::MAX)
            .saturating_mul(7)
            .saturating_add(16);

        let (top, body) = root.split_vertically(50);
        draw_state_legend(&top, &title)?;
        let mut chart = ChartBuilder::on(&body)
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(label_width.clamp(40, 260))
            .build_cartesian_2d(0.0..x_max, 0.0..rows)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .light_line_style(TRANSPARENT)
            .x_desc("time since scenario start (s)")
            .axis_desc_style((FONT, 12))
            .draw()?;
        for span in spans {
            let row = names.iter().position(|n| *n == span.breaker).unwrap_or(0);
            // The first breaker on top.
            let y = rows - 1.0 - count_f64(row);
            let (a, b) = ordered(span.start_ms / 1000.0, span.end_ms / 1000.0);
            chart.draw_series(std::iter::once(Rectangle::new(
                [(a, y + 0.15), (b, y + 0.85)],
                state_color(&span.state).mix(BAND_OPACITY).filled(),
            )))?;
        }
        draw_breaker_names(root, &chart, &names)?;
        mark_fault_phases(&mut chart, &s.phases, rows)
    })
}

/// The breakers of `s` in the order they first appear (one row each).
fn breaker_names(s: &ScenarioReport) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for span in &s.breaker {
        if !names.contains(&span.breaker.as_str()) {
            names.push(&span.breaker);
        }
    }
    names
}

/// The colour of a breaker state's band.
fn state_color(state: &str) -> RGBColor {
    match state {
        "closed" => CLOSED,
        "half_open" => HALF_OPEN,
        "open" => OPEN,
        _ => OTHER_STATE,
    }
}

/// The title and, at its right, a swatch per breaker state.
fn draw_state_legend(top: &Area<'_>, title: &str) -> DrawResult {
    top.draw(&Text::new(
        title,
        (WIDTH_PX / 2, 10),
        text_style(16, BLACK, HPos::Center, VPos::Top),
    ))?;
    let mut x = WIDTH_PX - 270;
    for state in ["closed", "half_open", "open"] {
        top.draw(&Rectangle::new(
            [(x, 33), (x + 14, 45)],
            state_color(state).filled(),
        ))?;
        top.draw(&Text::new(
            state,
            (x + 18, 39),
            text_style(12, BLACK, HPos::Left, VPos::Center),
        ))?;
        x += 90;
    }
    Ok(())
}

/// Each breaker's name left of its row, the first on top.
fn draw_breaker_names(root: &Area<'_>, chart: &Chart<'_, '_>, names: &[&str]) -> DrawResult {
    let rows = count_f64(names.len());
    let (px, _) = chart.backend_coord(&(0.0, 0.0));
    for (row, name) in names.iter().enumerate() {
        let (_, py) = chart.backend_coord(&(0.0, rows - 0.5 - count_f64(row)));
        root.draw(&Text::new(
            *name,
            (px - 6, py),
            text_style(12, BLACK, HPos::Right, VPos::Center),
        ))?;
    }
    Ok(())
}

/// A line at the start and at the end of each fault phase, the phase
/// named at the top.
fn mark_fault_phases(chart: &mut Chart<'_, '_>, phases: &[PhaseSpan], rows: f64) -> DrawResult {
    for phase in phases
        .iter()
        .filter(|p| p.fault && p.start_ms.is_finite() && p.end_ms.is_finite())
    {
        let (a, b) = ordered(phase.start_ms / 1000.0, phase.end_ms / 1000.0);
        for x in [a, b] {
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(x, 0.0), (x, rows)],
                BLACK.mix(0.6).stroke_width(1),
            )))?;
        }
        chart.draw_series(std::iter::once(Text::new(
            phase.name.clone(),
            (a, rows),
            text_style(11, BLACK, HPos::Left, VPos::Top),
        )))?;
    }
    Ok(())
}

/// A count (rows, requests in a bucket) as a coordinate: exact up to
/// `u32::MAX`, saturating past it.
fn count_f64(n: impl TryInto<u32>) -> f64 {
    f64::from(n.try_into().unwrap_or(u32::MAX))
}

/// Draws into a fresh 800×300 SVG; on a drawing error returns a small SVG
/// naming the plot and the error instead.
fn render(title: &str, draw: impl FnOnce(&Area<'_>) -> DrawResult) -> String {
    let mut out = String::new();
    let result = {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        let drawn = root
            .fill(&WHITE)
            .map_err(Box::<dyn Error>::from)
            .and_then(|()| draw(&root));
        drawn.and_then(|()| root.present().map_err(Box::<dyn Error>::from))
    };
    match result {
        Ok(()) => {
            let mut svg = out.trim_end().to_owned();
            svg.push('\n');
            svg
        }
        Err(e) => error_svg(title, &e.to_string()),
    }
}

/// A minimal SVG stating that a plot could not be drawn.
fn error_svg(title: &str, error: &str) -> String {
    format!(
        "<svg width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" \
         xmlns=\"http://www.w3.org/2000/svg\">\n<rect width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"#FFFFFF\"/>\n\
         <text x=\"400\" y=\"140\" text-anchor=\"middle\" font-family=\"{FONT}\" font-size=\"16\">{}</text>\n\
         <text x=\"400\" y=\"170\" text-anchor=\"middle\" font-family=\"{FONT}\" font-size=\"12\">\
         plot failed: {}</text>\n</svg>\n",
        xml_escape(title),
        xml_escape(error)
    )
}

/// Escapes text for XML character data and attribute values.
fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(c),
        }
    }
    out
}

/// A chart with a seconds x axis from 0 to `x_max` and a y axis from 0 to
/// `y_max` described by `y_desc`, titled `title`.
fn cartesian<'a, 'b>(
    root: &'a Area<'b>,
    title: &str,
    x_max: f64,
    y_max: f64,
    y_desc: &str,
) -> Result<Chart<'a, 'b>, Box<dyn Error>> {
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 16))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(BLACK.mix(0.08))
        .x_desc("time since scenario start (s)")
        .y_desc(y_desc)
        .axis_desc_style((FONT, 12))
        .draw()?;
    Ok(chart)
}

/// Shades each fault phase over the full height and writes its name at the top.
fn shade_phases(chart: &mut Chart<'_, '_>, phases: &[PhaseSpan], y_max: f64) -> DrawResult {
    for phase in phases
        .iter()
        .filter(|p| p.fault && p.start_ms.is_finite() && p.end_ms.is_finite())
    {
        let (a, b) = ordered(phase.start_ms / 1000.0, phase.end_ms / 1000.0);
        chart.draw_series(std::iter::once(Rectangle::new(
            [(a, 0.0), (b, y_max)],
            FAULT_SHADE.mix(FAULT_OPACITY).filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            phase.name.clone(),
            (a, y_max),
            text_style(11, BLACK.mix(0.8), HPos::Left, VPos::Top),
        )))?;
    }
    Ok(())
}

/// One labelled line (with dots, so a single point shows).
fn line(chart: &mut Chart<'_, '_>, points: Vec<(f64, f64)>, label: &str, color: RGBColor) -> DrawResult {
    chart
        .draw_series(LineSeries::new(points, color.stroke_width(2)).point_size(2))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    Ok(())
}

/// The legend of the labelled lines, top right.
fn legend<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>) -> DrawResult {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font((FONT, 11))
        .draw()?;
    Ok(())
}

/// `(seconds, value)` of each item, skipping non-finite values.
fn pick<T: TimedMs>(items: &[&T], value: impl Fn(&T) -> f64) -> Vec<(f64, f64)> {
    items
        .iter()
        .map(|item| (item.t_ms() / 1000.0, value(item)))
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect()
}

/// An item of a time series, placed in the middle of the time it covers, so
/// a change inside a bucket shows where it happened rather than before it.
trait TimedMs {
    /// Where to draw it, in milliseconds since the scenario started.
    fn t_ms(&self) -> f64;
}

impl TimedMs for super::model::Bucket {
    fn t_ms(&self) -> f64 {
        self.t_ms + self.width_ms / 2.0
    }
}

impl TimedMs for super::model::LatencyPoint {
    fn t_ms(&self) -> f64 {
        self.t_ms
    }
}

/// The phases' ends, in seconds.
fn phase_ends(phases: &[PhaseSpan]) -> impl Iterator<Item = f64> + '_ {
    phases.iter().map(|p| p.end_ms.max(p.start_ms) / 1000.0)
}

/// The largest finite, positive value, or `fallback` when there is none.
fn axis_max(values: impl Iterator<Item = f64>, fallback: f64) -> f64 {
    values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
        .unwrap_or(fallback)
}

/// `(min, max)` of two values.
fn ordered(a: f64, b: f64) -> (f64, f64) {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

/// A text style of `size` px in `color`, anchored at `h`/`v`.
fn text_style<C: Color>(size: u32, color: C, h: HPos, v: VPos) -> TextStyle<'static> {
    let mut style = TextStyle::from((FONT, size).into_font()).pos(Pos::new(h, v));
    style.color = color.to_backend_color();
    style
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::{BreakerSpan, Bucket, LatencyPoint};
    use crate::report::write::tests::sample_report;

    /// The `<rect` elements of an SVG that contain every one of `needles`.
    fn rects_with(svg: &str, needles: &[&str]) -> usize {
        svg.split('<')
            .filter(|e| e.starts_with("rect ") && needles.iter().all(|n| e.contains(n)))
            .count()
    }

    const SHADE: &str = "fill=\"#FDAE61\"";

    fn assert_svg(svg: &str) {
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"), "{svg}");
        assert!(!svg.contains("plot failed"), "{svg}");
    }

    #[test]
    fn throughput_and_latency_shade_each_fault_phase_and_escape_names() {
        let report = sample_report();
        let storm = &report.scenarios[1];
        for svg in [throughput_svg(storm), latency_svg(storm)] {
            assert_svg(&svg);
            assert_eq!(rects_with(&svg, &[SHADE]), 1);
            assert!(svg.contains("storm &lt;500&gt;"));
            assert!(svg.contains("500 storm &lt;&amp;&gt;"));
            assert!(!svg.contains("<&>"));
        }
        let throughput = throughput_svg(storm);
        for label in [
            "client answered",
            "client degraded",
            "client failed",
            "upstream 429",
            "upstream 500",
        ] {
            assert!(throughput.contains(label), "{label}");
        }
        assert!(throughput.contains("requests per second"));
        assert!(latency_svg(storm).contains("latency (ms)"));

        // A non-fault phase is not shaded; two fault phases give two.
        let normal = &report.scenarios[0];
        assert_eq!(rects_with(&throughput_svg(normal), &[SHADE]), 0);
        let mut two = storm.clone();
        two.phases[2].fault = true;
        assert_eq!(rects_with(&latency_svg(&two), &[SHADE]), 2);
        assert!(latency_svg(&two).contains("recover"));
    }

    #[test]
    fn breaker_timeline_draws_a_band_per_span() {
        let report = sample_report();
        let storm = &report.scenarios[1];
        let svg = breaker_svg(storm);
        assert_svg(&svg);
        let band = "opacity=\"0.85\"";
        assert_eq!(rects_with(&svg, &[band, "fill=\"#2CA02C\""]), 3);
        assert_eq!(rects_with(&svg, &[band, "fill=\"#D62728\""]), 1);
        assert_eq!(rects_with(&svg, &[band, "fill=\"#FFBF00\""]), 1);
        assert_eq!(rects_with(&svg, &[band]), storm.breaker.len());
        for text in [
            "mock/gpt-primary",
            "mock/gpt-backup",
            "closed",
            "half_open",
            "open",
            "storm &lt;500&gt;",
        ] {
            assert!(svg.contains(text), "{text}");
        }
        assert!(!svg.contains("no breaker transitions"));
    }

    #[test]
    fn breaker_timeline_without_spans_says_so() {
        let mut storm = sample_report().scenarios[1].clone();
        storm.breaker.clear();
        let svg = breaker_svg(&storm);
        assert_svg(&svg);
        assert!(svg.contains("no breaker transitions"));
        assert!(svg.contains("500 storm &lt;&amp;&gt;"));
    }

    #[test]
    fn degenerate_input_never_panics() {
        let empty = ScenarioReport::default();
        for svg in [throughput_svg(&empty), latency_svg(&empty), breaker_svg(&empty)] {
            assert_svg(&svg);
        }

        let mut odd = sample_report().scenarios[1].clone();
        odd.throughput = vec![
            Bucket {
                t_ms: 0.0,
                width_ms: 0.0,
                answered: 5,
                ..Bucket::default()
            },
            Bucket {
                t_ms: f64::NAN,
                width_ms: 500.0,
                answered: 5,
                ..Bucket::default()
            },
            Bucket {
                t_ms: 500.0,
                width_ms: f64::NAN,
                answered: 5,
                ..Bucket::default()
            },
            Bucket {
                t_ms: 1000.0,
                width_ms: 500.0,
                answered: 5,
                ..Bucket::default()
            },
        ];
        odd.latency_series = vec![LatencyPoint {
            t_ms: 0.0,
            p50: f64::NAN,
            p95: f64::INFINITY,
            p99: 3.0,
        }];
        odd.phases[1].end_ms = f64::NAN;
        odd.phases[0].end_ms = odd.phases[0].start_ms;
        odd.breaker = vec![
            BreakerSpan {
                breaker: "a".into(),
                state: "weird".into(),
                start_ms: 5.0,
                end_ms: 5.0,
            },
            BreakerSpan {
                breaker: "b".into(),
                state: "open".into(),
                start_ms: 9.0,
                end_ms: f64::NAN,
            },
            BreakerSpan {
                breaker: "c".into(),
                state: "closed".into(),
                start_ms: 2000.0,
                end_ms: 1000.0,
            },
        ];
        for svg in [throughput_svg(&odd), latency_svg(&odd), breaker_svg(&odd)] {
            assert_svg(&svg);
        }

        // Zero-length phases and a single point.
        let mut single = ScenarioReport {
            name: "one".into(),
            ..ScenarioReport::default()
        };
        single.throughput = vec![Bucket {
            t_ms: 0.0,
            width_ms: 1000.0,
            upstream: 3,
            ..Bucket::default()
        }];
        single.latency_series = vec![LatencyPoint {
            t_ms: 0.0,
            p50: 1.0,
            p95: 2.0,
            p99: 3.0,
        }];
        single.phases = vec![PhaseSpan {
            name: "blip".into(),
            start_ms: 0.0,
            end_ms: 0.0,
            fault: true,
        }];
        for svg in [
            throughput_svg(&single),
            latency_svg(&single),
            breaker_svg(&single),
        ] {
            assert_svg(&svg);
        }
    }

    #[test]
    fn error_svg_escapes() {
        let svg = error_svg("a <&> b", "\"x\" 'y'");
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("a &lt;&amp;&gt; b"));
        assert!(svg.contains("&quot;x&quot; &apos;y&apos;"));
    }
}
