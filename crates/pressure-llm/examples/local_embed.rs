//! Embedding latency of a local model (`LocalModel`, the `local` provider's
//! engine), per input: one input at a time (what a `knn` level does per
//! request) and in one batched call (what it does for its examples).
//! Prints the machine, and never asserts a time.
//!
//! ```sh
//! cargo run --release -p pressure-llm --features local-models --example local_embed -- \
//!     models/all-minilm-l6-v2 examples/triage/tickets.jsonl
//! ```

use std::time::Duration;

use pressure_llm::provider::LocalModel;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(data)) = (args.next(), args.next()) else {
        return Err("usage: local_embed MODEL_DIR TICKETS_JSONL".into());
    };
    let texts: Vec<String> = std::fs::read_to_string(&data)?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).map(|v| v["text"].as_str().unwrap_or("").to_owned())
        })
        .collect::<Result<_, _>>()?;
    println!("machine: {}", pressure_testkit::machine("now"));
    let clock = tokio::time::Instant::now;
    let started = clock();
    let model = LocalModel::load(&dir)?;
    println!("load: {} ms ({})", started.elapsed().as_millis(), dir);
    let _ = model.embed(&["warm-up"])?;

    let mut each: Vec<Duration> = Vec::with_capacity(texts.len());
    let mut tokens = 0u64;
    for t in &texts {
        let s = clock();
        let e = model.embed(&[t.as_str()])?;
        each.push(s.elapsed());
        tokens += e.tokens[0];
    }
    each.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mean = each.iter().map(|d| ms(*d)).sum::<f64>() / each.len() as f64;
    println!(
        "one at a time: {} inputs (mean {:.1} tokens): mean {:.2} ms, p50 {:.2} ms, p95 {:.2} ms per input",
        each.len(),
        tokens as f64 / each.len() as f64,
        mean,
        ms(each[each.len() / 2]),
        ms(each[each.len() * 95 / 100]),
    );
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let s = clock();
    let _ = model.embed(&refs)?;
    let batched = ms(s.elapsed()) / texts.len() as f64;
    println!(
        "batched: {batched:.2} ms per input; one at a time / batched = {:.2}",
        mean / batched
    );
    Ok(())
}
