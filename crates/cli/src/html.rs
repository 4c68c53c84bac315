//! `weft report FILE --html OUT.html`: every time histogram of a metrics
//! report as a plot a person reads at a glance. The page is self-contained
//! (inline SVG and CSS, no script, nothing fetched).

use anyhow::{Context, Result};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;

const W: f64 = 760.0;
const H: f64 = 240.0;
const LEFT: f64 = 70.0;
const BOTTOM: f64 = 36.0;
const TOP: f64 = 14.0;
const RIGHT: f64 = 16.0;

/// Reads a JSON report and writes the HTML page.
pub fn report(input: &Path, html: &Path) -> Result<()> {
    let text = std::fs::read_to_string(input)
        .with_context(|| format!("cannot read {}", input.display()))?;
    let doc: Value = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a weft JSON report (weft run/attach --format json)",
            input.display()
        )
    })?;
    let page = render(&doc, &input.display().to_string());
    let mut out = weft_events::create_output(html)?;
    std::io::Write::write_all(&mut out, page.as_bytes())
        .with_context(|| format!("cannot write {}", html.display()))?;
    Ok(())
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A round step for axis ticks covering `max` in about five steps.
fn nice_step(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

fn number(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1e6 || v.abs() < 1e-3 {
        format!("{v:.2e}")
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{:.3}", v)
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

/// One metric's histogram as an SVG step plot with labelled axes.
fn plot(values: &[f64], bucket_s: f64, unit: &str, per_bucket: bool) -> String {
    let n = values.len().max(1);
    let max = values.iter().cloned().fold(0.0, f64::max);
    let step = nice_step(max);
    let top = (max / step).ceil().max(1.0) * step;
    let span_s = n as f64 * bucket_s;
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let x = |t: f64| LEFT + t / span_s * pw;
    let y = |v: f64| TOP + ph - v / top * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img">"#
    );
    // Horizontal grid and value ticks.
    let mut v = 0.0;
    while v <= top + step / 2.0 {
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#e3e3e3"/><text x="{}" y="{:.1}" text-anchor="end" class="tick">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            y(v) + 4.0,
            number(v),
            y = y(v)
        );
        v += step;
    }
    // Time ticks.
    let tstep = nice_step(span_s);
    let mut t = 0.0;
    while t <= span_s + tstep / 2.0 {
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{}" y2="{}" stroke="#999"/><text x="{x:.1}" y="{}" text-anchor="middle" class="tick">{}</text>"##,
            TOP + ph,
            TOP + ph + 4.0,
            TOP + ph + 16.0,
            number(t),
            x = x(t)
        );
        t += tstep;
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle" class="axis">time (s)</text><text x="14" y="{}" transform="rotate(-90 14 {})" text-anchor="middle" class="axis">{}</text>"#,
        LEFT + pw / 2.0,
        H - 4.0,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        escape(&format!(
            "{unit}{}",
            if per_bucket { " per bucket" } else { "" }
        ))
    );
    // The values: a filled step line, one step per bucket.
    let mut points = format!("{:.1},{:.1}", x(0.0), y(0.0));
    for (i, v) in values.iter().enumerate() {
        let (a, b) = (x(i as f64 * bucket_s), x((i + 1) as f64 * bucket_s));
        let _ = write!(points, " {a:.1},{:.1} {b:.1},{:.1}", y(*v), y(*v));
    }
    let _ = write!(points, " {:.1},{:.1}", x(n as f64 * bucket_s), y(0.0));
    let _ = write!(
        s,
        r##"<polygon points="{points}" fill="#cfe2f7" stroke="none"/><polyline class="values" data-buckets="{}" points="{points}" fill="none" stroke="#1f5fa8" stroke-width="1.5"/>"##,
        values.len()
    );
    let _ = write!(
        s,
        r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#666"/></svg>"##
    );
    s
}

/// The whole page.
pub fn render(doc: &Value, source: &str) -> String {
    let mut body = String::new();
    let metrics = doc["metrics"].as_array().cloned().unwrap_or_default();
    if metrics.is_empty() {
        body.push_str("<p>This report has no metrics (run weft with --metric NAME:FOCUS).</p>");
    }
    for m in &metrics {
        let metric = m["metric"].as_str().unwrap_or("?");
        let focus = m["focus"].as_str().unwrap_or("");
        let unit = m["unit"].as_str().unwrap_or("");
        let value = m["value"].as_f64().unwrap_or(0.0);
        let bucket_ns = m["histogram"]["bucket_ns"].as_f64().unwrap_or(1e8);
        let values: Vec<f64> = m["histogram"]["values"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        let per_bucket = metric != "concurrency";
        let _ = write!(
            body,
            r#"<section class="metric"><h2>{} <span class="focus">{}</span></h2><p class="value">{} {} <span class="note">over the run · {} buckets of {} ms</span></p>{}"#,
            escape(metric),
            escape(focus),
            number(value),
            escape(unit),
            values.len(),
            number(bucket_ns / 1e6),
            plot(&values, bucket_ns / 1e9, unit, per_bucket)
        );
        if let Some(threads) = m["threads"].as_array() {
            body.push_str("<table><tr><th>thread</th><th>value</th></tr>");
            for t in threads {
                let _ = write!(
                    body,
                    "<tr><td>{}</td><td>{} {}</td></tr>",
                    t["tid"],
                    number(t["value"].as_f64().unwrap_or(0.0)),
                    escape(unit)
                );
            }
            body.push_str("</table>");
        }
        body.push_str("</section>");
    }
    format!(
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>weft report: {src}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }}
h1 {{ font-size: 20px; }} h2 {{ font-size: 16px; margin: 0 0 4px; }}
.focus {{ font-weight: normal; color: #555; font-family: monospace; }}
.value {{ margin: 0 0 8px; font-size: 15px; }} .note {{ color: #777; font-size: 12px; }}
.metric {{ margin: 0 0 28px; }} .tick {{ font-size: 11px; fill: #555; }} .axis {{ font-size: 12px; fill: #333; }}
table {{ border-collapse: collapse; margin-top: 6px; }} td, th {{ padding: 2px 10px; border-bottom: 1px solid #eee; text-align: right; }}
</style></head>
<body><h1>weft metrics — {src}</h1>
{body}
</body></html>
"#,
        src = escape(source)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_plot_per_metric_with_its_buckets() {
        let doc = serde_json::json!({"metrics": [
            {"metric": "wall_time", "focus": "fn=a<b", "value": 0.2, "unit": "s",
             "histogram": {"bucket_ns": 100000000, "values": [0.0, 0.05, 0.1, 0.05]}},
            {"metric": "calls", "focus": "fn=x", "value": 7.0, "unit": "calls",
             "histogram": {"bucket_ns": 200000000, "values": [3.0, 4.0]}, "threads": [{"tid": 12, "value": 7.0}]},
        ]});
        let page = render(&doc, "r.json");
        assert_eq!(page.matches("<svg").count(), 2);
        assert!(page.contains(r#"data-buckets="4""#) && page.contains(r#"data-buckets="2""#));
        assert!(page.contains("fn=a&lt;b"), "focus escaped");
        assert!(!page.contains("<script"), "no script");
        let namespaces = page
            .matches(r#"xmlns="http://www.w3.org/2000/svg""#)
            .count();
        assert_eq!(
            page.matches("http").count(),
            namespaces,
            "nothing fetched: only the SVG namespace names a URL"
        );
        assert_eq!(nice_step(0.23), 0.05);
        assert_eq!(nice_step(7.0), 2.0);
    }
}
