//! The machine a bench ran on, in one line: the CPU model, cores, the L2
//! and L3 cache sizes and the load average, printed before and after a run
//! so that a ratio beside it says where (and how quietly) it was seen — a
//! ratio seen on one machine only is not a result. Linux's `/proc` and
//! `/sys`; what cannot be read is `?`.

use std::fs;

/// `machine (WHEN): MODEL, N cores, L2 SIZE, L3 SIZE; load average A B C`.
pub fn machine(when: &str) -> String {
    let model = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or_else(|_| "?".to_owned(), |n| n.to_string());
    let load = fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".to_owned());
    format!(
        "machine ({when}): {model}, {cores} cores, L2 {}, L3 {}; load average {load}",
        cache(2),
        cache(3)
    )
}

/// The size of cpu0's cache of `level` (unified or data), as the kernel
/// writes it (`2048K`), or `?`.
fn cache(level: u32) -> String {
    (0..8)
        .find_map(|i| {
            let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
            let read = |f: &str| fs::read_to_string(format!("{dir}/{f}")).ok();
            let same_level = read("level")?.trim().parse::<u32>().ok()? == level;
            let kind = read("type")?;
            (same_level && kind.trim() != "Instruction").then(|| read("size"))?
        })
        .map_or_else(|| "?".to_owned(), |s| s.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_moment_the_cores_and_the_load() {
        let line = machine("before");
        let cores = std::thread::available_parallelism().unwrap().get();
        assert!(line.starts_with("machine (before): "), "{line}");
        assert!(line.contains(&format!(", {cores} cores, L2 ")), "{line}");
        assert!(line.contains("; load average "), "{line}");
    }
}
